#pragma once
/// The int8 KV cache format (`--kv-dtype int8`, IR type `i8` with `quant<kv_rows>`).
///
/// A cache [S, kv_heads, d] is S * kv_heads head rows, position-major as the float caches; each
/// head row is stored as d signed 8-bit codes followed by its f32 scale (d + 4 bytes, the scale
/// unaligned at byte d): value = code * scale with scale = max|row| / 127 and codes rounded to
/// nearest even, so |value - x| <= scale / 2 per element (plus one f32 rounding). A row of zeros
/// stores scale 0; a row with a NaN or an infinity stores a NaN scale, so what attention reads
/// from it is NaN, as it would be from a float cache. One scale per position and head (not per
/// block of positions): a row is written once, when its token is stored, and never rewritten by
/// a later token, so a cache prefix stays valid for prefix reuse and speculative rollback.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tpullm/kernels/detail/int8_quantize.hpp"

namespace tpullm::kernels {

/// One byte of an int8 KV cache (a code, or a byte of a row's scale); spans of kv8_t count bytes.
struct kv8_t {
  std::int8_t code;
};

/// Bytes of a head row's scale after its d codes.
inline constexpr std::int64_t kKv8ScaleBytes = 4;

/// Elements of KV between the starts of two consecutive head rows of d values: d for the float
/// caches, d + 4 (codes and scale) for kv8_t.
template <class KV>
constexpr std::int64_t kv_row_elems(std::int64_t d) {
  return std::is_same_v<KV, kv8_t> ? d + kKv8ScaleBytes : d;
}

/// The scale of the head row of d codes at `row`.
inline float kv8_scale(const kv8_t* row, std::int64_t d) {
  float s;
  std::memcpy(&s, static_cast<const void*>(row + d), sizeof s);
  return s;
}

/// Stores the d values of x as one head row (codes then scale) at dst: the W8A8 dynamic row rule
/// (detail::row_quant), with a NaN scale where the row is not finite.
inline void kv8_quantize_row(const float* x, kv8_t* dst, std::int64_t d) {
  float amax = 0.f;
  bool finite = true;
  for (std::int64_t i = 0; i < d; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  const detail::RowQuant r = detail::row_quant(detail::QuantParams{}, amax);
  const float scale = finite ? r.scale : __builtin_nanf("");
  if (finite && !r.zero_row) {
    for (std::int64_t i = 0; i < d; ++i)
      dst[i].code = static_cast<std::int8_t>(std::clamp(std::nearbyint(x[i] * r.inv), r.lo, r.hi));
  } else {
    for (std::int64_t i = 0; i < d; ++i)
      dst[i].code = 0;
  }
  std::memcpy(static_cast<void*>(dst + d), &scale, sizeof scale);
}

/// Stores `rows` head rows of d values (x: [rows, d]) as consecutive head rows at dst.
inline void kv8_quantize_rows(const float* x, kv8_t* dst, std::int64_t rows, std::int64_t d) {
  for (std::int64_t r = 0; r < rows; ++r)
    kv8_quantize_row(x + r * d, dst + r * (d + kKv8ScaleBytes), d);
}

/// dst[0, d) = the values of the head row at src (code * scale, in f32).
inline void kv8_dequantize_row(const kv8_t* src, float* dst, std::int64_t d) {
  const float s = kv8_scale(src, d);
  for (std::int64_t i = 0; i < d; ++i)
    dst[i] = static_cast<float>(src[i].code) * s;
}

} // namespace tpullm::kernels
