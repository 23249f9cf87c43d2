#pragma once
/// Activation quantization of the W8A8 linear (kernels/int8_linear.hpp): rows of x [M, K] f32 to
/// int8 codes, per row (dynamic) or per tensor (static), on the portable, AVX2 and AVX-512 paths.
/// Every path computes exactly the reference's values (int8_linear.hpp's file comment): one f32
/// multiply by the same f32 inverse scale, round half to even, clamp, so the integer sums the
/// kernels build on them are the reference's to the bit.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/isa_target.hpp"

#if TPULLM_X86
#include <immintrin.h>
#endif

namespace tpullm::kernels::detail {

/// Quantized rows of x: `code[m][k]` = q + 128 (the int8 q with its sign bit flipped, so the byte
/// is VPDPBUSD's unsigned operand) for k < K, and 128 (q = 0) for the padding k in [K, Kp);
/// `scale[m]` = s_m (dynamic) or s (static); `zero` = z (0 for dynamic).
struct QuantRows {
  std::vector<std::uint8_t> code; ///< [M][Kp] biased codes q + 128
  std::vector<float> scale;       ///< [M] row scales
  std::int64_t M = 0, K = 0, Kp = 0;
  std::int32_t zero = 0;
  /// Row m's codes [Kp].
  const std::uint8_t* row(std::int64_t m) const { return code.data() + m * Kp; }
};

/// How rows are quantized, as plain numbers (dynamic per row, or static scale / zero).
struct QuantParams {
  bool dynamic = true;
  float scale = 0.0f;    ///< static: s
  std::int32_t zero = 0; ///< static: z
};

/// The inverse scale, clamp range and offset of one row (reference formulas).
struct RowQuant {
  float inv = 0.0f, lo = 0.0f, hi = 0.0f, z = 0.0f, scale = 0.0f;
  bool zero_row = false; ///< dynamic row with max|x| == 0: all q = 0, s_m = 0
};

inline RowQuant row_quant(const QuantParams& p, float amax) {
  RowQuant r;
  if (p.dynamic) {
    if (!(amax > 0.0f)) {
      r.zero_row = true;
      return r;
    }
    r.inv = 127.0f / amax;
    r.scale = amax / 127.0f;
    r.lo = -127.0f;
    r.hi = 127.0f;
    return r;
  }
  r.inv = 1.0f / p.scale;
  r.scale = p.scale;
  r.lo = -128.0f;
  r.hi = 127.0f;
  r.z = static_cast<float>(p.zero);
  return r;
}

/// One element, exactly as the reference: clamp(nearbyint(x * inv) + z, lo, hi) + 128.
inline std::uint8_t quant_code(float x, const RowQuant& r) {
  const float q = std::clamp(std::nearbyint(x * r.inv) + r.z, r.lo, r.hi);
  return static_cast<std::uint8_t>(static_cast<int>(q) + 128);
}

inline void quantize_rows_portable(const float* x, std::int64_t ldx, const QuantParams& p,
                                   QuantRows& q) {
  for (std::int64_t m = 0; m < q.M; ++m) {
    const float* xr = x + m * ldx;
    float amax = 0.0f;
    if (p.dynamic)
      for (std::int64_t k = 0; k < q.K; ++k)
        amax = std::max(amax, std::fabs(xr[k]));
    const RowQuant r = row_quant(p, amax);
    std::uint8_t* c = q.code.data() + m * q.Kp;
    q.scale[static_cast<std::size_t>(m)] = r.scale;
    if (r.zero_row) {
      std::fill(c, c + q.Kp, std::uint8_t{128});
      continue;
    }
    for (std::int64_t k = 0; k < q.K; ++k)
      c[k] = quant_code(xr[k], r);
    std::fill(c + q.K, c + q.Kp, std::uint8_t{128});
  }
}

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

TPULLM_TARGET_AVX512 inline void quantize_rows_avx512(const float* x, std::int64_t ldx,
                                                      const QuantParams& p, QuantRows& q) {
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (std::int64_t m = 0; m < q.M; ++m) {
    const float* xr = x + m * ldx;
    auto mask = [&](std::int64_t k) {
      const std::int64_t n = std::min<std::int64_t>(q.K - k, 16);
      return static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1u);
    };
    float amax = 0.0f;
    if (p.dynamic) {
      __m512 mx = _mm512_setzero_ps();
      for (std::int64_t k = 0; k < q.K; k += 16)
        mx = _mm512_max_ps(mx, _mm512_and_ps(_mm512_maskz_loadu_ps(mask(k), xr + k), absmask));
      amax = _mm512_reduce_max_ps(mx);
    }
    const RowQuant r = row_quant(p, amax);
    std::uint8_t* c = q.code.data() + m * q.Kp;
    q.scale[static_cast<std::size_t>(m)] = r.scale;
    if (r.zero_row) {
      std::fill(c, c + q.Kp, std::uint8_t{128});
      continue;
    }
    const __m512 inv = _mm512_set1_ps(r.inv), lo = _mm512_set1_ps(r.lo), hi = _mm512_set1_ps(r.hi),
                 z = _mm512_set1_ps(r.z);
    const __m512i bias = _mm512_set1_epi32(128);
    for (std::int64_t k = 0; k < q.K; k += 16) {
      const __mmask16 mk = mask(k);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, xr + k), inv);
      __m512 t =
          _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
      t = _mm512_min_ps(_mm512_max_ps(t, lo), hi);
      const __m512i i = _mm512_add_epi32(_mm512_cvttps_epi32(t), bias);
      _mm_mask_storeu_epi8(c + k, mk, _mm512_cvtepi32_epi8(i));
    }
    std::fill(c + q.K, c + q.Kp, std::uint8_t{128});
  }
}

TPULLM_TARGET_AVX2 inline void quantize_rows_avx2(const float* x, std::int64_t ldx,
                                                  const QuantParams& p, QuantRows& q) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i lanes = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (std::int64_t m = 0; m < q.M; ++m) {
    const float* xr = x + m * ldx;
    const std::int64_t K8 = q.K / 8 * 8;
    float amax = 0.0f;
    if (p.dynamic) {
      __m256 mx = _mm256_setzero_ps();
      for (std::int64_t k = 0; k < K8; k += 8)
        mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(xr + k), absmask));
      alignas(32) float t[8];
      _mm256_store_ps(t, mx);
      for (float v : t)
        amax = std::max(amax, v);
      for (std::int64_t k = K8; k < q.K; ++k)
        amax = std::max(amax, std::fabs(xr[k]));
    }
    const RowQuant r = row_quant(p, amax);
    std::uint8_t* c = q.code.data() + m * q.Kp;
    q.scale[static_cast<std::size_t>(m)] = r.scale;
    if (r.zero_row) {
      std::fill(c, c + q.Kp, std::uint8_t{128});
      continue;
    }
    const __m256 inv = _mm256_set1_ps(r.inv), lo = _mm256_set1_ps(r.lo), hi = _mm256_set1_ps(r.hi),
                 z = _mm256_set1_ps(r.z);
    const __m256i bias = _mm256_set1_epi32(128);
    for (std::int64_t k = 0; k < K8; k += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + k), inv);
      __m256 t =
          _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
      t = _mm256_min_ps(_mm256_max_ps(t, lo), hi);
      const __m256i i = _mm256_add_epi32(_mm256_cvttps_epi32(t), bias); // [0, 255]
      // 8 dwords -> 8 bytes: two in-lane packs, then the lanes' first dwords side by side
      const __m256i w = _mm256_packus_epi32(i, i);
      const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w, w), lanes);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(c + k), _mm256_castsi256_si128(b));
    }
    for (std::int64_t k = K8; k < q.K; ++k)
      c[k] = quant_code(xr[k], r);
    std::fill(c + q.K, c + q.Kp, std::uint8_t{128});
  }
}

#pragma GCC diagnostic pop
#endif

/// Quantizes rows [0, M) of x (row stride ldx, K columns) into `q` (storage reused), padded to
/// Kp (a multiple of 4) with code 128, on the path `isa` selects.
inline void quantize_rows(const float* x, std::int64_t ldx, std::int64_t M, std::int64_t K,
                          std::int64_t Kp, const QuantParams& p, Isa isa, QuantRows& q) {
  q.M = M;
  q.K = K;
  q.Kp = Kp;
  q.zero = p.dynamic ? 0 : p.zero;
  q.code.resize(static_cast<std::size_t>(M * Kp));
  q.scale.resize(static_cast<std::size_t>(M));
  switch (vector_isa(isa)) {
#if TPULLM_X86
  case Isa::avx512:
    quantize_rows_avx512(x, ldx, p, q);
    return;
  case Isa::avx2:
    quantize_rows_avx2(x, ldx, p, q);
    return;
#else
  case Isa::avx512:
  case Isa::avx2:
#endif
  case Isa::amx:
  case Isa::portable:
    quantize_rows_portable(x, ldx, p, q);
    return;
  }
}

} // namespace tpullm::kernels::detail
