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
  Token next();

  /// Reads the `DxDx...xdtype` body of a tensor type right after its '<'. Returns the text
  /// (digits, 'x' and the dtype spelling); the parser splits it.
  Token lex_shape();

  Location here() const { return Location{file_, line_, col_}; }
  const std::string& file() const { return file_; }

private:
  static bool is_id_char(char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.';
  }
  char peek(std::size_t ahead) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  void advance();
  void skip_space();
  template <class P>
  std::string take_while(P pred) {
    const std::size_t start = pos_;
    while (pos_ < src_.size() && pred(src_[pos_]))
      advance();
    return std::string(src_.substr(start, pos_ - start));
  }
  Token lex_string(Token t);
  Token lex_number(Token t);

  std::string_view src_;
  std::string file_;
  std::size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

} // namespace tpullm::ir::text
