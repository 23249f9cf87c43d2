#pragma once
/// Scalar conversions between f32 and the 16-bit float formats stored in checkpoints.
/// bf16: the top 16 bits of an IEEE f32. f16: IEEE binary16. Widening is exact; narrowing
/// rounds to nearest even and keeps NaN a NaN.

#include <bit>
#include <cstdint>
#include <cstring>

namespace tpullm {

/// Raw bits of a bfloat16 value.
struct bf16_t {
  std::uint16_t bits = 0;
};
/// Raw bits of an IEEE binary16 value.
struct f16_t {
  std::uint16_t bits = 0;
};

/// bf16 -> f32 (exact).
inline float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// f32 -> bf16, round to nearest even; NaN stays a quiet NaN.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// f16 -> f32 (exact, including subnormals, infinities and NaN).
inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

/// f32 -> f16, round to nearest even; overflow goes to infinity, NaN stays NaN.
inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u)
    return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (absu >= 0x477ff000u) // rounds to >= 65520 -> inf
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (absu < 0x38800000u) { // below the smallest normal f16 (2^-14): subnormal or zero
    if (absu < 0x33000000u) // below half the smallest subnormal (2^-25)
      return sign;
    const std::uint32_t exp = absu >> 23;
    const std::uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exp; // 14..24
    std::uint32_t v = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (v & 1u)))
      ++v;
    return static_cast<std::uint16_t>(sign | v);
  }
  std::uint32_t v = absu - 0x38000000u; // rebias exponent 127 -> 15 (in place)
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

} // namespace tpullm
