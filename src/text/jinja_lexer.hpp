#pragma once
// Internal to the chat-template engine: the token stream of a template, with Jinja2's whitespace
// rules already applied to the text between tags (trim_blocks, lstrip_blocks, `-` and `+`).
#include <string>
#include <vector>

namespace tpullm::text::jinja {

/// One token. Text tokens carry template data; the others come from inside `{{ }}` / `{% %}`.
struct Token {
  enum class Kind {
    text,
    var_begin,
    var_end,
    block_begin,
    block_end,
    name,
    string,
    integer,
    floating,
    op,
    eof
  };
  Kind kind;
  std::string text; ///< data, name, unescaped string, number spelling or operator
  int line = 1;
};

/// Splits a template into tokens (newlines normalized to \n, one trailing newline dropped, as
/// Jinja2 does). Comments leave no token. Throws tpullm::Error on an unterminated tag, comment or
/// string, or a character no expression can hold.
std::vector<Token> lex_template(const std::string& source);

} // namespace tpullm::text::jinja
