// Template lexer: data, tags and expression tokens, with Jinja2's whitespace control as
// transformers configures it (trim_blocks, lstrip_blocks).
#include "jinja_lexer.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string_view>

#include "jinja_value.hpp"

namespace tpullm::text::jinja {
namespace {

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string normalize_newlines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n')
        ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n')
    out.pop_back();
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

class Lexer {
public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    std::size_t text_start = 0;
    while (true) {
      const std::size_t open = find_open(text_start);
      if (open == std::string::npos) {
        emit_text(text_start, s_.size(), false, false, false);
        break;
      }
      const char kind = s_[open + 1];
      const char mod = open + 2 < s_.size() ? s_[open + 2] : '\0';
      const bool minus = mod == '-';
      const bool plus = mod == '+';
      const bool block_like = kind == '%' || kind == '#';
      emit_text(text_start, open, minus, block_like && !plus, true);
      const int open_line = line_at(open);
      std::size_t p = open + 2 + ((minus || plus) ? 1 : 0);
      if (kind == '#') {
        const std::size_t close = s_.find("#}", p);
        if (close == std::string::npos)
          fail(open_line, "unterminated comment '{#'");
        const bool cminus = close > p && s_[close - 1] == '-';
        const bool cplus = close > p && s_[close - 1] == '+';
        set_after(cminus, !cplus);
        text_start = close + 2;
        continue;
      }
      tokens_.push_back({kind == '%' ? Token::Kind::block_begin : Token::Kind::var_begin,
                         kind == '%' ? "{%" : "{{", open_line});
      text_start = lex_tag(p, kind == '%', open_line);
    }
    tokens_.push_back({Token::Kind::eof, "", line_at(s_.size())});
    return std::move(tokens_);
  }

private:
  std::size_t find_open(std::size_t from) const {
    for (std::size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#'))
        return i;
    return std::string::npos;
  }

  int line_at(std::size_t pos) {
    // Lines are counted incrementally: positions only move forward.
    for (; line_pos_ < pos && line_pos_ < s_.size(); ++line_pos_)
      if (s_[line_pos_] == '\n')
        ++line_;
    return line_;
  }

  void set_after(bool minus, bool trim) {
    after_minus_ = minus;
    after_trim_ = !minus && trim;
  }

  // The data in [b, e) before a tag (or the end), with the previous tag's trailing rules and this
  // tag's leading ones: `-` strips all whitespace, lstrip_blocks strips the spaces and tabs that
  // start the tag's line.
  // Whitespace as Python's regex \s sees it (Unicode, as Jinja2's lexer matches it).
  // Returns the byte offsets of each code point in [b, e) plus e.
  std::vector<std::size_t> offsets(std::size_t b, std::size_t e) const {
    std::vector<std::size_t> off;
    for (std::size_t i = b; i < e;) {
      off.push_back(i);
      const auto c = static_cast<unsigned char>(s_[i]);
      i += c < 0x80             ? 1
           : (c & 0xE0) == 0xC0 ? 2
           : (c & 0xF0) == 0xE0 ? 3
           : (c & 0xF8) == 0xF0 ? 4
                                : 1;
      i = std::min(i, e);
    }
    off.push_back(e);
    return off;
  }
  bool space_at(std::size_t from, std::size_t to) const {
    const auto cps = utf8_decode(std::string_view(s_.data() + from, to - from));
    return cps.size() == 1 && py_isspace(cps[0]);
  }

  void emit_text(std::size_t b, std::size_t e, bool minus, bool lstrip, bool before_tag) {
    std::size_t start = b, end = e;
    const std::vector<std::size_t> off = offsets(b, e);
    const std::size_t ncp = off.size() - 1;
    if (after_minus_) {
      std::size_t k = 0;
      while (k < ncp && space_at(off[k], off[k + 1]))
        ++k;
      start = off[k];
    } else if (after_trim_ && start < end && s_[start] == '\n') {
      ++start;
    }
    if (before_tag && minus) {
      std::size_t k = ncp;
      while (k > 0 && off[k - 1] >= start && space_at(off[k - 1], off[k]))
        --k;
      end = std::max(off[k], start);
    } else if (before_tag && lstrip) {
      // Jinja2: when only whitespace stands between the last newline (or a line start) and the
      // tag, it goes.
      std::size_t k = ncp;
      while (k > 0 && s_[off[k - 1]] != '\n' && space_at(off[k - 1], off[k]))
        --k;
      const std::size_t pos = off[k];
      const bool line_start = pos == 0 || s_[pos - 1] == '\n';
      if (line_start && pos < end)
        end = std::max(pos, start);
    }
    after_minus_ = after_trim_ = false;
    if (end > start)
      tokens_.push_back({Token::Kind::text, s_.substr(start, end - start), line_at(start)});
  }

  // Tokens inside a tag from `p`; returns the position after the closing delimiter.
  std::size_t lex_tag(std::size_t p, bool block, int open_line) {
    int depth = 0;
    while (true) {
      while (p < s_.size() && is_ws(s_[p]))
        ++p;
      if (p >= s_.size())
        fail(open_line, block ? "unterminated block tag '{%'" : "unterminated expression '{{'");
      const int line = line_at(p);
      const std::string_view rest(s_.data() + p, s_.size() - p);
      const char end_char = block ? '%' : '}';
      // Closing delimiter, with an optional '-' / '+'.
      for (int m = 0; m < 2; ++m) {
        const std::size_t off = static_cast<std::size_t>(m);
        const char mod = m == 1 ? rest[0] : '\0';
        if (m == 1 && mod != '-' && mod != '+')
          break;
        if (rest.size() >= off + 2 && rest[off] == end_char && rest[off + 1] == '}' &&
            (block || depth == 0)) {
          tokens_.push_back(
              {block ? Token::Kind::block_end : Token::Kind::var_end, block ? "%}" : "}}", line});
          if (block)
            set_after(mod == '-', mod != '+');
          else
            set_after(mod == '-', false);
          return p + off + 2;
        }
      }
      const char c = rest[0];
      if (is_name_start(c)) {
        std::size_t q = p;
        while (q < s_.size() && is_name_char(s_[q]))
          ++q;
        tokens_.push_back({Token::Kind::name, s_.substr(p, q - p), line});
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p, line);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p, line);
      } else {
        static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                          "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                          "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        bool matched = false;
        for (const char* op : ops) {
          const std::string_view o(op);
          if (rest.substr(0, o.size()) == o) {
            if (o == "(" || o == "[" || o == "{")
              ++depth;
            if ((o == ")" || o == "]" || o == "}") && depth > 0)
              --depth;
            tokens_.push_back({Token::Kind::op, std::string(o), line});
            p += o.size();
            matched = true;
            break;
          }
        }
        if (!matched)
          fail(line, str_cat("unexpected character '", c, "' in a tag"));
      }
    }
  }

  std::size_t lex_number(std::size_t p, int line) {
    std::size_t q = p;
    const auto digits = [&] {
      while (q < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[q])) || s_[q] == '_'))
        ++q;
    };
    digits();
    bool floating = false;
    if (q + 1 < s_.size() && s_[q] == '.' && std::isdigit(static_cast<unsigned char>(s_[q + 1]))) {
      floating = true;
      ++q;
      digits();
    }
    if (q < s_.size() && (s_[q] == 'e' || s_[q] == 'E')) {
      std::size_t r = q + 1;
      if (r < s_.size() && (s_[r] == '+' || s_[r] == '-'))
        ++r;
      if (r < s_.size() && std::isdigit(static_cast<unsigned char>(s_[r]))) {
        floating = true;
        q = r;
        digits();
      }
    }
    std::string text;
    for (std::size_t i = p; i < q; ++i)
      if (s_[i] != '_')
        text += s_[i];
    tokens_.push_back({floating ? Token::Kind::floating : Token::Kind::integer, text, line});
    return q;
  }

  std::size_t lex_string(std::size_t p, int line) {
    const char q = s_[p];
    std::string out;
    std::size_t i = p + 1;
    while (true) {
      if (i >= s_.size())
        fail(line, "unterminated string literal");
      const char c = s_[i];
      if (c == q)
        break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= s_.size())
        fail(line, "unterminated string literal");
      const char e = s_[i + 1];
      i += 2;
      switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '0':
        out += '\0';
        break;
      case '\n':
        break; // line continuation
      case 'x':
      case 'u':
      case 'U': {
        const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        std::uint32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          const int h = i < s_.size() ? hex_value(s_[i]) : -1;
          if (h < 0)
            fail(line, str_cat("truncated \\", e, " escape in a string literal"));
          cp = cp * 16 + static_cast<std::uint32_t>(h);
          ++i;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
          fail(line, "invalid code point in a string literal escape");
        out += utf8_encode({static_cast<char32_t>(cp)});
        break;
      }
      default:
        // Python keeps unknown escapes as they are.
        out += '\\';
        out += e;
      }
    }
    tokens_.push_back({Token::Kind::string, out, line});
    return i + 1;
  }

  std::string s_;
  std::vector<Token> tokens_;
  bool after_minus_ = false;
  bool after_trim_ = false;
  std::size_t line_pos_ = 0;
  int line_ = 1;
};

} // namespace

std::vector<Token> lex_template(const std::string& source) {
  return Lexer(normalize_newlines(source)).run();
}

} // namespace tpullm::text::jinja
