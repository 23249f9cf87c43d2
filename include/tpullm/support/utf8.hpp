#pragma once
/// Strict UTF-8 validation (RFC 3629) for text read from binary files (GGUF keys, names and
/// string values): no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF,
/// no truncated or stray continuation bytes; and the one UTF-8 encoder of the project.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tpullm {

/// The byte offset of the first byte of `s` that does not begin a valid UTF-8 sequence, or
/// nullopt when all of `s` is valid UTF-8.
std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept;

/// True when `s` is valid UTF-8 (see find_invalid_utf8).
inline bool is_valid_utf8(std::string_view s) noexcept {
  return !find_invalid_utf8(s);
}

/// Appends the UTF-8 encoding of code point `cp` (<= U+10FFFF; 1 to 4 bytes).
void append_utf8(std::string& out, char32_t cp);

} // namespace tpullm
