// UTF-8 helpers: see unicode.hpp.
#include "unicode.hpp"

#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "tpullm/support/error.hpp"

namespace tpullm::text::detail {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when s[i] does not start one. `subpart`
// receives how many bytes form the maximal invalid prefix (>= 1) when it returns 0.
std::size_t valid_sequence(std::string_view s, std::size_t i, std::size_t& subpart) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  subpart = 1;
  if (c < 0x80)
    return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0)
      lo = 0xA0;
    if (c == 0xED)
      hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0)
      lo = 0x90;
    if (c == 0xF4)
      hi = 0x8F;
  } else
    return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if (i + k >= s.size())
      return 0;
    const unsigned char d = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (d < l || d > h)
      return 0;
    subpart = k + 1;
  }
  return n;
}

} // namespace

std::string sanitize_utf8(std::string_view s) {
  std::size_t i = 0, sub = 0;
  while (i < s.size()) { // fast path: valid input is returned as is
    const std::size_t n = valid_sequence(s, i, sub);
    if (n == 0)
      break;
    i += n;
  }
  if (i == s.size())
    return std::string(s);
  std::string out(s.substr(0, i));
  while (i < s.size()) {
    const std::size_t n = valid_sequence(s, i, sub);
    if (n == 0) {
      out += kReplacementChar; // one per bad byte
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

char32_t next_code_point(std::string_view s, std::size_t& i) noexcept {
  const auto b = [&](std::size_t k) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[k]));
  };
  const char32_t c = b(i);
  const std::size_t n = utf8_len(static_cast<unsigned char>(c));
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (std::size_t k = 1; k < n && i + k < s.size(); ++k)
    cp = (cp << 6) | (b(i + k) & 0x3F);
  i += n;
  return cp;
}

namespace {
// Whether `cp` leaves any text around it in NFC unchanged (the quick check's "yes" with combining
// class 0): no canonical decomposition, and not a character that composes with the one before
// it (utf8proc marks those with a comb_index >= 0x8000; Hangul vowel and trailing jamo compose
// algorithmically).
bool nfc_inert(char32_t cp) {
  if (cp < 0x300)
    return true;
  if (cp >= 0x1161 && cp <= 0x11C2)
    return false;
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  if (p->combining_class != 0)
    return false;
  if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0)
    return false;
  return p->comb_index == UINT16_MAX || p->comb_index < 0x8000;
}
} // namespace

std::string nfc(std::string_view s) {
  // Text made only of NFC-inert characters is already NFC (most text: ASCII, CJK, Cyrillic...).
  bool plain = true;
  for (std::size_t i = 0; i < s.size() && plain;) {
    if (static_cast<unsigned char>(s[i]) < 0xCC) {
      i += utf8_len(static_cast<unsigned char>(s[i]));
      continue;
    }
    plain = nfc_inert(next_code_point(s, i));
  }
  if (plain)
    return std::string(s);
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
      &dst, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0)
    throw_error(ErrorKind::internal, "NFC", utf8proc_errmsg(n));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> hold(dst, &std::free);
  return std::string(reinterpret_cast<const char*>(dst), static_cast<std::size_t>(n));
}

namespace {
struct ByteTable {
  std::array<std::string, 256> chars;
  std::array<std::int16_t, 324> byte_of{}; // code points < 324 cover the whole alphabet
  ByteTable() {
    byte_of.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const char32_t cp = self ? static_cast<char32_t>(b) : next++;
      append_utf8(chars[static_cast<std::size_t>(b)], cp);
      byte_of[cp] = static_cast<std::int16_t>(b);
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}
} // namespace

const std::array<std::string, 256>& byte_chars() {
  return byte_table().chars;
}

int byte_of_char(char32_t cp) noexcept {
  const auto& t = byte_table();
  return cp < t.byte_of.size() ? t.byte_of[cp] : -1;
}

std::string lossy_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0, sub = 0;
  while (i < bytes.size()) {
    const std::size_t n = valid_sequence(bytes, i, sub);
    if (n == 0) {
      out += kReplacementChar;
      i += sub;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

} // namespace tpullm::text::detail
