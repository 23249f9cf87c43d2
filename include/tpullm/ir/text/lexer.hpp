#pragma once
/// Tokens of the `.tir` text format. One token of lookahead; positions are 1-based line:col.
/// `//` starts a comment to the end of the line.

#include <cctype>
#include <string>
#include <string_view>

#include "tpullm/support/diagnostic.hpp"

namespace tpullm::ir::text {

/// Token kinds of the text format.
enum class Tok {
  eof,
  bare_id,    ///< keyword or identifier: module, func, tensor, true, halves, f32, ...
  percent_id, ///< %name (text excludes the '%')
  at_id,      ///< @name (text excludes the '@')
  string,     ///< "..." (text is the unescaped contents)
  integer,    ///< -?[0-9]+
  floating,   ///< -?[0-9]+.[0-9]*(e[+-]?[0-9]+)? or with an exponent only
  l_paren,
  r_paren,
  l_brace,
  r_brace,
  l_square,
  r_square,
  less,
  greater,
  comma,
  colon,
  equal,
  arrow, ///< ->
  hash,  ///< #
};

/// One token with its text and position.
struct Token {
  Tok kind = Tok::eof;
  std::string text;
  Location loc;
};

/// Splits text into tokens.
class Lexer {
public:
  /// Lexes `src`, naming `file` in locations; the first line of `src` is line `first_line`
  /// (a piece of a larger file keeps that file's line numbers).
  Lexer(std::string_view src, std::string file, int first_line = 1)
      : src_(src), file_(std::move(file)), line_(first_line) {}

  /// The next token; throws DiagnosticError on a character that starts no token.
  Token next() {
    skip_space();
    Token t;
    t.loc = here();
    if (pos_ >= src_.size())
      return t;
    const char c = src_[pos_];
    auto single = [&](Tok k) {
      advance();
      t.kind = k;
      t.text = std::string(1, c);
      return t;
    };
    switch (c) {
    case '(':
      return single(Tok::l_paren);
    case ')':
      return single(Tok::r_paren);
    case '{':
      return single(Tok::l_brace);
    case '}':
      return single(Tok::r_brace);
    case '[':
      return single(Tok::l_square);
    case ']':
      return single(Tok::r_square);
    case '<':
      return single(Tok::less);
    case '>':
      return single(Tok::greater);
    case ',':
      return single(Tok::comma);
    case ':':
      return single(Tok::colon);
    case '=':
      return single(Tok::equal);
    case '#':
      return single(Tok::hash);
    default:
      break;
    }
    if (c == '-' && peek(1) == '>') {
      advance();
      advance();
      t.kind = Tok::arrow;
      t.text = "->";
      return t;
    }
    if (c == '%' || c == '@') {
      advance();
      t.kind = c == '%' ? Tok::percent_id : Tok::at_id;
      t.text = take_while([](char ch) { return is_id_char(ch) || ch == '$' || ch == '-'; });
      if (t.text.empty())
        throw DiagnosticError(t.loc, std::string("expected a name after '") + c + "'");
      return t;
    }
    if (c == '"')
      return lex_string(t);
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        ((c == '-' || c == '+') && std::isdigit(static_cast<unsigned char>(peek(1)))))
      return lex_number(t);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Tok::bare_id;
      t.text = take_while(is_id_char);
      return t;
    }
    throw DiagnosticError(t.loc, std::string("unexpected character '") + c + "'");
  }

  /// Reads the `DxDx...xdtype` body of a tensor type right after its '<'. Returns the text
  /// (digits, 'x' and the dtype spelling); the parser splits it.
  Token lex_shape() {
    skip_space();
    Token t;
    t.loc = here();
    t.kind = Tok::bare_id;
    t.text = take_while(is_id_char);
    if (t.text.empty())
      throw DiagnosticError(t.loc, "expected a shape and element type");
    return t;
  }

  Location here() const { return Location{file_, line_, col_}; }
  const std::string& file() const { return file_; }

private:
  static bool is_id_char(char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.';
  }
  char peek(std::size_t ahead) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  void advance() {
    if (src_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  void skip_space() {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else if (c == '/' && peek(1) == '/') {
        while (pos_ < src_.size() && src_[pos_] != '\n')
          advance();
      } else {
        break;
      }
    }
  }
  template <class P>
  std::string take_while(P pred) {
    const std::size_t start = pos_;
    while (pos_ < src_.size() && pred(src_[pos_]))
      advance();
    return std::string(src_.substr(start, pos_ - start));
  }
  Token lex_string(Token t) {
    advance(); // opening quote
    t.kind = Tok::string;
    while (true) {
      if (pos_ >= src_.size() || src_[pos_] == '\n')
        throw DiagnosticError(t.loc, "unterminated string");
      const char c = src_[pos_];
      advance();
      if (c == '"')
        return t;
      if (c == '\\') {
        if (pos_ >= src_.size())
          throw DiagnosticError(t.loc, "unterminated string");
        const char e = src_[pos_];
        advance();
        if (e == 'n')
          t.text += '\n';
        else if (e == '"' || e == '\\')
          t.text += e;
        else
          throw DiagnosticError(t.loc, std::string("unknown escape '\\") + e + "' in string");
      } else {
        t.text += c;
      }
    }
  }
  Token lex_number(Token t) {
    const std::size_t start = pos_;
    if (src_[pos_] == '-' || src_[pos_] == '+')
      advance();
    auto digits = [&] {
      while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_])))
        advance();
    };
    digits();
    t.kind = Tok::integer;
    if (pos_ < src_.size() && src_[pos_] == '.') {
      t.kind = Tok::floating;
      advance();
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E') &&
        (std::isdigit(static_cast<unsigned char>(peek(1))) ||
         ((peek(1) == '-' || peek(1) == '+') &&
          std::isdigit(static_cast<unsigned char>(peek(2)))))) {
      t.kind = Tok::floating;
      advance();
      if (src_[pos_] == '-' || src_[pos_] == '+')
        advance();
      digits();
    }
    t.text = std::string(src_.substr(start, pos_ - start));
    return t;
  }

  std::string_view src_;
  std::string file_;
  std::size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

} // namespace tpullm::ir::text
