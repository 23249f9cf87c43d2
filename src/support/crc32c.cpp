// Out-of-line definitions of tpullm/support/crc32c.hpp (compiled once into tpullm_core).
#include "tpullm/support/crc32c.hpp"

namespace tpullm::detail {

const std::array<std::array<std::uint32_t, 256>, 8>& crc32c_tables() {
  static const auto t = [] {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
      for (std::size_t s = 1; s < 8; ++s)
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    return t;
  }();
  return t;
}

std::uint32_t crc32c_portable(std::uint32_t c, const unsigned char* p, std::size_t n) {
  const auto& t = crc32c_tables();
  while (n >= 8) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c; // little-endian load (x86_64, aarch64)
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0)
    c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return c;
}

bool crc32c_hardware() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

} // namespace tpullm::detail

namespace tpullm {

std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t crc) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::uint32_t c = ~crc;
#if defined(__x86_64__)
  if (detail::crc32c_hardware())
    return ~detail::crc32c_sse42(c, p, bytes.size());
#endif
  return ~detail::crc32c_portable(c, p, bytes.size());
}

} // namespace tpullm
