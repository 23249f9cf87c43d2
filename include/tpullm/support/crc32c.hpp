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
const std::array<std::array<std::uint32_t, 256>, 8>& crc32c_tables();

/// Table-driven update of the running (pre-inverted) value `c`.
std::uint32_t crc32c_portable(std::uint32_t c, const unsigned char* p, std::size_t n);

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
bool crc32c_hardware();

} // namespace detail

/// CRC-32C of `bytes`, continuing from `crc` (the value of the bytes before them; 0 to start).
std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t crc = 0);

/// The table-driven CRC-32C, whatever the CPU (tests compare it with crc32c()).
inline std::uint32_t crc32c_portable(std::span<const std::byte> bytes, std::uint32_t crc = 0) {
  return ~detail::crc32c_portable(~crc, reinterpret_cast<const unsigned char*>(bytes.data()),
                                  bytes.size());
}

} // namespace tpullm
