#pragma once
/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and final xor
/// 0xFFFFFFFF), the checksum of iSCSI (RFC 3720) and ext4: crc32c("123456789") = 0xE3069283.
/// The bundle's weight blob is checksummed with it per chunk (docs/bundle.md). Uses the SSE4.2
/// crc32 instruction when the CPU has it (about 8 bytes per 3 cycles), else a slicing-by-8
/// table (about 1 byte per cycle); both give the same value.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tpullm {

namespace detail {

/// The 8 slicing tables of the reflected Castagnoli polynomial.
inline const std::array<std::array<std::uint32_t, 256>, 8>& crc32c_tables() {
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

/// Table-driven update of the running (pre-inverted) value `c`.
inline std::uint32_t crc32c_portable(std::uint32_t c, const unsigned char* p, std::size_t n) {
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

#if defined(__x86_64__)
/// The SSE4.2 instruction's update of the running (pre-inverted) value `c`.
__attribute__((target("sse4.2"))) inline std::uint32_t
crc32c_sse42(std::uint32_t c, const unsigned char* p, std::size_t n) {
  std::uint64_t c64 = c;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  std::uint32_t c32 = static_cast<std::uint32_t>(c64);
  while (n-- > 0)
    c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
#endif

/// True when the hardware instruction is used.
inline bool crc32c_hardware() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

} // namespace detail

/// CRC-32C of `bytes`, continuing from `crc` (the value of the bytes before them; 0 to start).
inline std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t crc = 0) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::uint32_t c = ~crc;
#if defined(__x86_64__)
  if (detail::crc32c_hardware())
    return ~detail::crc32c_sse42(c, p, bytes.size());
#endif
  return ~detail::crc32c_portable(c, p, bytes.size());
}

/// The table-driven CRC-32C, whatever the CPU (tests compare it with crc32c()).
inline std::uint32_t crc32c_portable(std::span<const std::byte> bytes, std::uint32_t crc = 0) {
  return ~detail::crc32c_portable(~crc, reinterpret_cast<const unsigned char*>(bytes.data()),
                                  bytes.size());
}

} // namespace tpullm
