#pragma once
/// Parses the `.tir` text format into a Module (grammar in docs/ir.md). Malformed input throws
/// DiagnosticError with `file:line:col: message`; the parser never verifies semantics beyond
/// what it needs to build the IR (run verify_module after parsing).

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tpullm/ir/module.hpp"
#include "tpullm/ir/text/lexer.hpp"
#include "tpullm/support/input_file.hpp"

namespace tpullm::ir::text {

/// Recursive-descent parser over a Lexer with one token of lookahead.
class Parser {
public:
  /// Parses `src`, naming `file` in diagnostics; `src` starts at line `first_line` of it.
  Parser(std::string_view src, std::string file, int first_line = 1)
      : lex_(src, std::move(file), first_line) {
    cur_ = lex_.next();
  }

  /// module ::= 'module' @name '{' (weight-decl | func)* '}'
  Module parse_module();

  /// type ::= 'tensor' '<' (dim 'x')* dtype (',' 'panels')? (',' quant)? '>'
  TensorType parse_type();

private:
  // quant ::= 'quant' '<' format ',' 'group' '=' int (',' 'zero_point')? (',' 'act_order')? '>'
  QuantSpec parse_quant();

  // weight-decl ::= 'weight' @name ':' type
  void parse_weight(Module& m);

  // func ::= 'func' @name '(' (%arg ':' type ('buffer' struct)?),* ')' '->' '(' type,* ')'
  //          ('attributes' struct)? '{' op* '}'
  void parse_function(Module& m);

  // '(' type,* ')'
  std::vector<TensorType> parse_type_list();

  // op ::= (%res (':' N)? '=')? "name" '(' uses ')' attr-dict? ':' '(' types ')' '->' results
  //        ('plan' struct)? ('buffers' '[' (struct | 'none'),* ']')?
  void parse_op(Module&, Function& f, std::map<std::string, std::vector<Value*>>& values);

  // attr-dict ::= '{' (name '=' value),* '}'
  void parse_attrs(OpVariant& op, const std::string& opname);

  void parse_attr_value(bool& v);
  void parse_attr_value(std::int64_t& v);
  void parse_attr_value(float& v);
  void parse_attr_value(std::vector<std::int64_t>& v);
  void parse_attr_value(std::string& v) { v = expect(Tok::string, "a string").text; }
  void parse_attr_value(SymbolRef& v) { v.name = expect(Tok::at_id, "a symbol (@name)").text; }
  void parse_attr_value(DType& v);
  /// struct ::= '{' (key '=' value),* '}' (members not given keep their defaults).
  template <AttrStruct T>
  void parse_attr_value(T& v) {
    expect(Tok::l_brace, "'{'");
    std::vector<std::string> seen;
    if (cur_.kind != Tok::r_brace) {
      while (true) {
        const Token key = expect(Tok::bare_id, "a field name");
        expect(Tok::equal, "'='");
        if (std::find(seen.begin(), seen.end(), key.text) != seen.end())
          throw DiagnosticError(key.loc, "field '" + key.text + "' given twice");
        seen.push_back(key.text);
        bool found = false;
        T::fields(v, [&](const char* n, auto& member) {
          if (!found && key.text == n) {
            found = true;
            parse_attr_value(member);
          }
        });
        if (!found) {
          std::string known;
          T::fields(v, [&](const char* n, auto&) {
            known += (known.empty() ? "" : ", ") + std::string(n);
          });
          throw DiagnosticError(key.loc,
                                "unknown field '" + key.text + "' (fields: " + known + ")");
        }
        if (cur_.kind != Tok::comma)
          break;
        advance();
      }
    }
    expect(Tok::r_brace, "'}'");
  }
  template <class T>
  void parse_attr_value(std::optional<T>& v) {
    v.emplace();
    parse_attr_value(*v);
  }
  template <class T>
  void parse_attr_value(std::vector<T>& v) {
    expect(Tok::l_square, "'['");
    v.clear();
    if (cur_.kind != Tok::r_square) {
      while (true) {
        v.emplace_back();
        parse_attr_value(v.back());
        if (cur_.kind != Tok::comma)
          break;
        advance();
      }
    }
    expect(Tok::r_square, "']'");
  }
  template <NamedEnum E>
  void parse_attr_value(E& v) {
    const Token t = expect(Tok::bare_id, "a name");
    auto e = parse_enum<E>(t.text);
    if (!e) {
      std::string options;
      for (const auto& [val, n] : EnumNames<E>::items)
        options += (options.empty() ? "" : ", ") + std::string(n);
      throw DiagnosticError(t.loc, "'" + t.text + "' is not one of " + options);
    }
    v = *e;
  }

  std::int64_t parse_int();

  void advance() { cur_ = lex_.next(); }
  bool is_keyword(std::string_view k) const { return cur_.kind == Tok::bare_id && cur_.text == k; }
  void expect_keyword(std::string_view k) {
    if (!is_keyword(k))
      error("expected '" + std::string(k) + "'");
    advance();
  }
  Token expect(Tok k, const std::string& what);
  [[noreturn]] void error(const std::string& msg) const {
    const std::string got = cur_.kind == Tok::eof ? "end of input" : "'" + cur_.text + "'";
    throw DiagnosticError(cur_.loc, msg + ", got " + got);
  }

  Lexer lex_;
  Token cur_;
};

/// Parses a module from text; `file` names it in diagnostics, whose line numbers start at
/// `first_line` (for a piece cut out of a larger file).
inline Module parse_module(std::string_view src, const std::string& file = "<input>",
                           int first_line = 1) {
  return Parser(src, file, first_line).parse_module();
}

/// Reads and parses a `.tir` file ("-" reads standard input). A path that is not a regular
/// file (a FIFO, a directory, a device) is refused without blocking (support/input_file.hpp).
Module parse_file(const std::filesystem::path& path);

} // namespace tpullm::ir::text
