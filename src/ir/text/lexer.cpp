// Out-of-line definitions of tpullm/ir/text/lexer.hpp (compiled once into tpullm_core).
#include "tpullm/ir/text/lexer.hpp"

namespace tpullm::ir::text {

auto Lexer::next() -> Token {
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

auto Lexer::lex_shape() -> Token {
  skip_space();
  Token t;
  t.loc = here();
  t.kind = Tok::bare_id;
  t.text = take_while(is_id_char);
  if (t.text.empty())
    throw DiagnosticError(t.loc, "expected a shape and element type");
  return t;
}

auto Lexer::advance() -> void {
  if (src_[pos_] == '\n') {
    ++line_;
    col_ = 1;
  } else {
    ++col_;
  }
  ++pos_;
}

auto Lexer::skip_space() -> void {
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

auto Lexer::lex_string(Token t) -> Token {
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

auto Lexer::lex_number(Token t) -> Token {
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
       ((peek(1) == '-' || peek(1) == '+') && std::isdigit(static_cast<unsigned char>(peek(2)))))) {
    t.kind = Tok::floating;
    advance();
    if (src_[pos_] == '-' || src_[pos_] == '+')
      advance();
    digits();
  }
  t.text = std::string(src_.substr(start, pos_ - start));
  return t;
}

} // namespace tpullm::ir::text
