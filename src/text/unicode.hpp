#pragma once
// UTF-8 helpers of the tokenizer: input sanitising, code point iteration, NFC (utf8proc), the
// GPT-2 byte <-> character table of the ByteLevel pieces, and Rust's lossy UTF-8 decoding.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tpullm/support/utf8.hpp"

namespace tpullm::text::detail {

/// `s` with each byte that is not part of a valid UTF-8 sequence (stray continuation, truncated
/// or overlong sequence, surrogate, beyond U+10FFFF) replaced by U+FFFD; valid input unchanged.
std::string sanitize_utf8(std::string_view s);

/// Byte length of the UTF-8 sequence starting with `lead` (valid UTF-8 assumed): 1..4.
inline std::size_t utf8_len(unsigned char lead) noexcept {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

/// Decodes the code point at s[i] (valid UTF-8 assumed) and advances i past it.
char32_t next_code_point(std::string_view s, std::size_t& i) noexcept;

/// Unicode NFC of valid UTF-8 text (utf8proc).
std::string nfc(std::string_view s);

/// The GPT-2 byte-level alphabet: the UTF-8 text of the character that stands for each byte.
const std::array<std::string, 256>& byte_chars();

/// The byte a byte-level character stands for, or -1 when `cp` is not one of the 256.
int byte_of_char(char32_t cp) noexcept;

/// `bytes` decoded as UTF-8 the way Rust's String::from_utf8_lossy does: each maximal invalid
/// subpart becomes one U+FFFD.
std::string lossy_utf8(std::string_view bytes);

/// U+FFFD in UTF-8.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

} // namespace tpullm::text::detail
