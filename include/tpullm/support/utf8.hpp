#pragma once
/// Strict UTF-8 validation (RFC 3629) for text read from binary files (GGUF keys, names and
/// string values): no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF,
/// no truncated or stray continuation bytes.

#include <cstddef>
#include <optional>
#include <string_view>

namespace tpullm {

/// The byte offset of the first byte of `s` that does not begin a valid UTF-8 sequence, or
/// nullopt when all of `s` is valid UTF-8.
std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept;

/// True when `s` is valid UTF-8 (see find_invalid_utf8).
inline bool is_valid_utf8(std::string_view s) noexcept {
  return !find_invalid_utf8(s);
}

} // namespace tpullm
