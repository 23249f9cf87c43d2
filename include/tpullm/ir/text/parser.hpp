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
  Module parse_module() {
    expect_keyword("module");
    Module m(expect(Tok::at_id, "a module name (@name)").text);
    expect(Tok::l_brace, "'{'");
    while (cur_.kind != Tok::r_brace) {
      if (is_keyword("weight"))
        parse_weight(m);
      else if (is_keyword("func"))
        parse_function(m);
      else
        error("expected 'weight', 'func' or '}'");
    }
    advance();
    if (cur_.kind != Tok::eof)
      error("unexpected text after the module");
    return m;
  }

  /// type ::= 'tensor' '<' (dim 'x')* dtype (',' 'panels')? (',' quant)? '>'
  TensorType parse_type() {
    const Location at = cur_.loc;
    expect_keyword("tensor");
    if (cur_.kind != Tok::less)
      error("expected '<' after 'tensor'");
    Token body = lex_.lex_shape(); // lexes straight after '<'
    cur_ = lex_.next();
    TensorType t;
    std::string_view s = body.text;
    while (true) {
      const auto x = s.find('x');
      if (x == std::string_view::npos || x == 0 ||
          !std::all_of(s.begin(), s.begin() + x, [](char c) { return c >= '0' && c <= '9'; }))
        break;
      std::int64_t d = 0;
      auto r = std::from_chars(s.data(), s.data() + x, d);
      if (r.ec != std::errc())
        throw DiagnosticError(body.loc,
                              "dimension '" + std::string(s.substr(0, x)) + "' is too large");
      t.shape.push_back(d);
      s.remove_prefix(x + 1);
    }
    auto dt = parse_dtype(s);
    if (!dt)
      throw DiagnosticError(body.loc,
                            "unknown element type '" + std::string(s) + "' in tensor type");
    t.dtype = *dt;
    if (cur_.kind == Tok::comma) {
      advance();
      if (is_keyword("panels")) {
        advance();
        t.layout = Layout::panels;
        if (cur_.kind == Tok::comma) {
          advance();
          t.quant = parse_quant();
        }
      } else {
        t.quant = parse_quant();
      }
    }
    if (cur_.kind != Tok::greater)
      throw DiagnosticError(cur_.loc,
                            "expected '>' to close the tensor type started at " + at.str());
    advance();
    if (auto why = t.limit_violation())
      throw DiagnosticError(body.loc, *why);
    return t;
  }

private:
  // quant ::= 'quant' '<' format ',' 'group' '=' int (',' 'zero_point')? (',' 'act_order')? '>'
  QuantSpec parse_quant() {
    expect_keyword("quant");
    expect(Tok::less, "'<'");
    QuantSpec q;
    const Token f = expect(Tok::bare_id, "a quantization format (gptq, awq, packed)");
    auto fmt = parse_quant_format(f.text);
    if (!fmt)
      throw DiagnosticError(f.loc, "unknown quantization format '" + f.text + "'");
    q.format = *fmt;
    expect(Tok::comma, "','");
    expect_keyword("group");
    expect(Tok::equal, "'='");
    q.group_size = parse_int();
    if (q.group_size < 0)
      error("group size must be >= 0");
    while (cur_.kind == Tok::comma) {
      advance();
      const Token flag = expect(Tok::bare_id, "'zero_point' or 'act_order'");
      if (flag.text == "zero_point")
        q.zero_point = true;
      else if (flag.text == "act_order")
        q.act_order = true;
      else
        throw DiagnosticError(flag.loc, "unknown quantization flag '" + flag.text + "'");
    }
    expect(Tok::greater, "'>'");
    return q;
  }

  // weight-decl ::= 'weight' @name ':' type
  void parse_weight(Module& m) {
    advance();
    const Token n = expect(Tok::at_id, "a weight name (@name)");
    expect(Tok::colon, "':'");
    Weight w{n.text, parse_type(), {}};
    if (m.find_weight(n.text))
      throw DiagnosticError(n.loc, "weight @" + n.text + " is declared twice");
    m.add_weight(std::move(w));
  }

  // func ::= 'func' @name '(' (%arg ':' type ('buffer' struct)?),* ')' '->' '(' type,* ')'
  //          ('attributes' struct)? '{' op* '}'
  void parse_function(Module& m) {
    advance();
    const Token n = expect(Tok::at_id, "a function name (@name)");
    if (m.find_function(n.text))
      throw DiagnosticError(n.loc, "function @" + n.text + " is defined twice");
    Function& f = m.add_function(n.text);
    f.set_loc(n.loc);
    std::map<std::string, std::vector<Value*>> values;
    expect(Tok::l_paren, "'('");
    if (cur_.kind != Tok::r_paren) {
      while (true) {
        const Token a = expect(Tok::percent_id, "an argument (%name)");
        expect(Tok::colon, "':'");
        auto t = parse_type();
        if (values.count(a.text))
          throw DiagnosticError(a.loc, "value %" + a.text + " is defined twice");
        Value* arg = f.add_argument(a.text, std::move(t));
        values[a.text] = {arg};
        if (is_keyword("buffer")) {
          advance();
          Buffer b;
          parse_attr_value(b);
          arg->set_buffer(b);
        }
        if (cur_.kind != Tok::comma)
          break;
        advance();
      }
    }
    expect(Tok::r_paren, "')'");
    expect(Tok::arrow, "'->'");
    f.set_result_types(parse_type_list());
    if (is_keyword("attributes")) {
      advance();
      FunctionInfo info;
      parse_attr_value(info);
      f.set_info(info);
    }
    expect(Tok::l_brace, "'{'");
    while (cur_.kind != Tok::r_brace) {
      if (cur_.kind == Tok::eof)
        error("unexpected end of input inside @" + f.name());
      parse_op(m, f, values);
    }
    advance();
  }

  // '(' type,* ')'
  std::vector<TensorType> parse_type_list() {
    expect(Tok::l_paren, "'('");
    std::vector<TensorType> ts;
    if (cur_.kind != Tok::r_paren) {
      while (true) {
        ts.push_back(parse_type());
        if (cur_.kind != Tok::comma)
          break;
        advance();
      }
    }
    expect(Tok::r_paren, "')'");
    return ts;
  }

  // op ::= (%res (':' N)? '=')? "name" '(' uses ')' attr-dict? ':' '(' types ')' '->' results
  //        ('plan' struct)? ('buffers' '[' (struct | 'none'),* ']')?
  void parse_op(Module&, Function& f, std::map<std::string, std::vector<Value*>>& values) {
    Token res;
    std::int64_t declared_results = -1;
    if (cur_.kind == Tok::percent_id) {
      res = cur_;
      advance();
      if (cur_.kind == Tok::colon) {
        advance();
        declared_results = parse_int();
        if (declared_results < 1)
          throw DiagnosticError(res.loc, "result count must be >= 1");
      } else {
        declared_results = 1;
      }
      expect(Tok::equal, "'='");
    }
    const Token name = expect(Tok::string, "an op name in quotes, e.g. \"top.MatMul\"");
    auto kind = parse_op_name(name.text);
    if (!kind)
      throw DiagnosticError(name.loc, "unknown op '" + name.text + "'");
    OpVariant op = make_op(*kind);
    // operands
    expect(Tok::l_paren, "'('");
    std::vector<Value*> operands;
    std::vector<Location> operand_locs;
    if (cur_.kind != Tok::r_paren) {
      while (true) {
        const Token u = expect(Tok::percent_id, "an operand (%name)");
        std::int64_t idx = 0;
        if (cur_.kind == Tok::hash) {
          advance();
          idx = parse_int();
        }
        auto it = values.find(u.text);
        if (it == values.end())
          throw DiagnosticError(u.loc, "use of undefined value %" + u.text);
        if (idx < 0 || idx >= static_cast<std::int64_t>(it->second.size()))
          throw DiagnosticError(u.loc,
                                "value %" + u.text + " has no result #" + std::to_string(idx));
        operands.push_back(it->second[idx]);
        operand_locs.push_back(u.loc);
        if (cur_.kind != Tok::comma)
          break;
        advance();
      }
    }
    expect(Tok::r_paren, "')'");
    if (cur_.kind == Tok::l_brace)
      parse_attrs(op, name.text);
    expect(Tok::colon, "':' before the op's type");
    const Location types_loc = cur_.loc;
    auto in_types = parse_type_list();
    if (in_types.size() != operands.size())
      throw DiagnosticError(types_loc, "'" + name.text + "' lists " +
                                           std::to_string(in_types.size()) + " operand types for " +
                                           std::to_string(operands.size()) + " operands");
    for (std::size_t i = 0; i < operands.size(); ++i)
      if (!(in_types[i] == operands[i]->type()))
        throw DiagnosticError(operand_locs[i], "operand #" + std::to_string(i) + " has type " +
                                                   operands[i]->type().str() +
                                                   " but the op lists " + in_types[i].str());
    expect(Tok::arrow, "'->'");
    std::vector<TensorType> out_types;
    if (cur_.kind == Tok::l_paren)
      out_types = parse_type_list();
    else
      out_types.push_back(parse_type());
    const std::int64_t have = static_cast<std::int64_t>(out_types.size());
    if (declared_results < 0 && have != 0)
      throw DiagnosticError(name.loc, "'" + name.text + "' has " + std::to_string(have) +
                                          " results but names none");
    if (declared_results >= 0 && have != declared_results)
      throw DiagnosticError(res.loc, "%" + res.text + " names " + std::to_string(declared_results) +
                                         " results but the op lists " + std::to_string(have));
    std::optional<OpPlan> plan;
    if (is_keyword("plan")) {
      advance();
      plan.emplace();
      parse_attr_value(*plan);
    }
    std::vector<std::optional<Buffer>> buffers;
    Location buffers_loc;
    if (is_keyword("buffers")) {
      buffers_loc = cur_.loc;
      advance();
      expect(Tok::l_square, "'['");
      while (cur_.kind != Tok::r_square) {
        if (is_keyword("none")) {
          advance();
          buffers.emplace_back();
        } else {
          Buffer b;
          parse_attr_value(b);
          buffers.emplace_back(b);
        }
        if (cur_.kind != Tok::comma)
          break;
        advance();
      }
      expect(Tok::r_square, "']'");
      if (buffers.size() != out_types.size())
        throw DiagnosticError(buffers_loc, "'" + name.text + "' lists " +
                                               std::to_string(buffers.size()) + " buffers for " +
                                               std::to_string(out_types.size()) + " results");
    }
    auto* o = f.append(std::make_unique<Operation>(std::move(op), operands, out_types, name.loc));
    o->set_plan(std::move(plan));
    for (std::size_t r = 0; r < buffers.size(); ++r)
      o->result(r)->set_buffer(buffers[r]);
    if (declared_results > 0) {
      if (values.count(res.text))
        throw DiagnosticError(res.loc, "value %" + res.text + " is defined twice");
      auto& slot = values[res.text];
      for (std::size_t r = 0; r < o->num_results(); ++r)
        slot.push_back(o->result(r));
    }
  }

  // attr-dict ::= '{' (name '=' value),* '}'
  void parse_attrs(OpVariant& op, const std::string& opname) {
    expect(Tok::l_brace, "'{'");
    std::vector<std::string> seen;
    if (cur_.kind != Tok::r_brace) {
      while (true) {
        const Token key = expect(Tok::bare_id, "an attribute name");
        expect(Tok::equal, "'='");
        if (std::find(seen.begin(), seen.end(), key.text) != seen.end())
          throw DiagnosticError(key.loc, "attribute '" + key.text + "' given twice");
        seen.push_back(key.text);
        bool found = false;
        visit_op(op, [&](auto& o) {
          using T = std::decay_t<decltype(o)>;
          T::attrs(o, [&](const char* n, auto& member) {
            if (!found && key.text == n) {
              found = true;
              parse_attr_value(member);
            }
          });
        });
        if (!found)
          throw DiagnosticError(key.loc, "'" + opname + "' has no attribute '" + key.text + "'");
        if (cur_.kind != Tok::comma)
          break;
        advance();
      }
    }
    expect(Tok::r_brace, "'}'");
  }

  void parse_attr_value(bool& v) {
    const Token t = expect(Tok::bare_id, "true or false");
    if (t.text != "true" && t.text != "false")
      throw DiagnosticError(t.loc, "expected true or false, got '" + t.text + "'");
    v = t.text == "true";
  }
  void parse_attr_value(std::int64_t& v) {
    v = parse_int();
    if (cur_.kind == Tok::colon) { // the `: i64` suffix is optional
      advance();
      expect_keyword("i64");
    }
  }
  void parse_attr_value(float& v) {
    const Token t = cur_;
    if (t.kind == Tok::integer || t.kind == Tok::floating) {
      advance();
      auto r =
          std::from_chars(t.text.data() + (t.text[0] == '+'), t.text.data() + t.text.size(), v);
      if (r.ec != std::errc())
        throw DiagnosticError(t.loc, "'" + t.text + "' is not a representable f32");
    } else if (t.kind == Tok::bare_id && (t.text == "inf" || t.text == "nan")) {
      advance();
      v = t.text == "inf" ? std::numeric_limits<float>::infinity()
                          : std::numeric_limits<float>::quiet_NaN();
    } else {
      error("expected a floating-point number");
    }
    if (cur_.kind == Tok::colon) { // the `: f32` suffix is optional
      advance();
      expect_keyword("f32");
    }
  }
  void parse_attr_value(std::vector<std::int64_t>& v) {
    expect(Tok::l_square, "'['");
    v.clear();
    if (cur_.kind != Tok::r_square) {
      while (true) {
        v.push_back(parse_int());
        if (cur_.kind != Tok::comma)
          break;
        advance();
      }
    }
    expect(Tok::r_square, "']'");
  }
  void parse_attr_value(std::string& v) { v = expect(Tok::string, "a string").text; }
  void parse_attr_value(SymbolRef& v) { v.name = expect(Tok::at_id, "a symbol (@name)").text; }
  void parse_attr_value(DType& v) {
    const Token t = expect(Tok::bare_id, "an element type");
    auto d = parse_dtype(t.text);
    if (!d)
      throw DiagnosticError(t.loc, "unknown element type '" + t.text + "'");
    v = *d;
  }
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

  std::int64_t parse_int() {
    const Token t = cur_;
    if (t.kind != Tok::integer)
      error("expected an integer");
    advance();
    std::int64_t v = 0;
    auto r = std::from_chars(t.text.data() + (t.text[0] == '+'), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc())
      throw DiagnosticError(t.loc, "integer '" + t.text + "' is out of range");
    return v;
  }

  void advance() { cur_ = lex_.next(); }
  bool is_keyword(std::string_view k) const { return cur_.kind == Tok::bare_id && cur_.text == k; }
  void expect_keyword(std::string_view k) {
    if (!is_keyword(k))
      error("expected '" + std::string(k) + "'");
    advance();
  }
  Token expect(Tok k, const std::string& what) {
    if (cur_.kind != k)
      error("expected " + what);
    Token t = cur_;
    advance();
    return t;
  }
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
inline Module parse_file(const std::filesystem::path& path) {
  std::string text;
  try {
    text = path == "-" ? read_stdin() : read_regular_file(path);
  } catch (const Error& e) {
    throw DiagnosticError(Location{path == "-" ? "<stdin>" : path.string()}, e.message());
  }
  return parse_module(text, path == "-" ? "<stdin>" : path.string());
}

} // namespace tpullm::ir::text
