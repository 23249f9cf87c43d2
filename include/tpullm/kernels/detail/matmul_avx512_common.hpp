#pragma once
/// AVX-512 helpers shared by the linear GEMV and GEMM: row-group decoding into zmm registers,
/// column masks, group zero points / mins and the GEMV row store.

#include "tpullm/kernels/detail/matmul_common.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// Raw row group -> w[j][0..1] (row j of the group, columns 0..15 / 16..31).
template <WeightFormat F>
TPULLM_TARGET_AVX512 inline void decode_rows_avx512(const std::uint8_t* r, __m512 (*w)[2]) {
  if constexpr (F == WeightFormat::f32) {
    w[0][0] = _mm512_load_ps(reinterpret_cast<const float*>(r));
    w[0][1] = _mm512_load_ps(reinterpret_cast<const float*>(r) + 16);
  } else if constexpr (F == WeightFormat::bf16) {
    const __m512i d = _mm512_load_si512(r);
    w[0][0] = _mm512_castsi512_ps(_mm512_slli_epi32(d, 16));
    w[0][1] =
        _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else if constexpr (F == WeightFormat::f16) {
    w[0][0] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(r)));
    w[0][1] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32)));
  } else if constexpr (F == WeightFormat::int8) {
    for (int h = 0; h < 2; ++h) {
      const __m512i d = _mm512_load_si512(r + 64 * h);
      w[0][h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(d, 24), 24));
      w[1][h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(d, 16), 24));
      w[2][h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(d, 8), 24));
      w[3][h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(d, 24));
    }
  } else if constexpr (F == WeightFormat::int8_asym || F == WeightFormat::int8_min) {
    const __m512i m8 = _mm512_set1_epi32(0xFF);
    for (int h = 0; h < 2; ++h) {
      const __m512i d = _mm512_load_si512(r + 64 * h);
      for (int j = 0; j < 4; ++j)
        w[j][h] = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(d, 8 * j), m8));
    }
  } else if constexpr (is_six_format(F)) {
    const __m512i m4 = _mm512_set1_epi32(0xF), m2 = _mm512_set1_epi32(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m512i hb = _mm512_load_si512(r + 256 + 64 * h);
#pragma GCC unroll 2
      for (int o = 0; o < 2; ++o) {
        const __m512i d = _mm512_load_si512(r + 128 * o + 64 * h);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) { // row 8o + j: nibble at 8 (j % 4) + 4 (j / 4), high bits at
          const int sh = 8 * (j % 4) + 4 * (j / 4); // 8 (j % 4) + 2 (2o + j / 4), moved to 4..5
          const int hs = 8 * (j % 4) + 2 * (2 * o + j / 4) - 4;
          const __m512i hi = hs >= 0 ? _mm512_srli_epi32(hb, hs) : _mm512_slli_epi32(hb, -hs);
          w[8 * o + j][h] = _mm512_cvtepi32_ps(_mm512_or_si512(
              _mm512_and_si512(_mm512_srli_epi32(d, sh), m4), _mm512_and_si512(hi, m2)));
        }
      }
    }
  } else {
    const __m512i m4 = _mm512_set1_epi32(0xF);
    for (int h = 0; h < 2; ++h) {
      const __m512i d = _mm512_load_si512(r + 64 * h);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const int sh = 8 * (j % 4) + 4 * (j / 4);
        w[j][h] = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(d, sh), m4));
      }
    }
  }
}

TPULLM_TARGET_AVX512 inline __mmask16 col_mask(int ncols, int half) {
  const int n = std::clamp(ncols - 16 * half, 0, 16);
  return static_cast<__mmask16>((1u << n) - 1u);
}

/// 32 one-level f32 group parameters at `v` (64-byte aligned): columns 0..15 / 16..31.
TPULLM_TARGET_AVX512 inline void load_group_f32(const float* v, __m512 (&out)[2]) {
  out[0] = _mm512_load_ps(v);
  out[1] = _mm512_load_ps(v + 16);
}

/// 32 u8 zero points at `z` (16-byte aligned) as f32: columns 0..15 / 16..31.
TPULLM_TARGET_AVX512 inline void load_group_u8(const std::uint8_t* z, __m512 (&out)[2]) {
  out[0] =
      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(z))));
  out[1] = _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(z + 16))));
}

template <WeightFormat F>
TPULLM_TARGET_AVX512 inline void group_zero_avx512(const PackedWeights& w, std::int64_t p,
                                                   std::int64_t g, __m512& z0, __m512& z1) {
  if constexpr (fixed_zero(F) != 0) {
    z0 = z1 = _mm512_set1_ps(static_cast<float>(fixed_zero(F)));
  } else if constexpr (has_zeros(F)) {
    __m512 z[2];
    load_group_u8(panel_zeros(w, p, g), z);
    z0 = z[0];
    z1 = z[1];
  } else {
    z0 = z1 = _mm512_setzero_ps();
  }
}

/// One group's 32 parameters from `f32` (one level: 32 f32 per group) or, for a two-level
/// weight, super-block f32 times int8 codes: columns 0..15 / 16..31.
TPULLM_TARGET_AVX512 inline void group_params_avx512(const PackedWeights& w,
                                                     const AlignedArray<float>& f32,
                                                     const AlignedArray<std::int8_t>& codes,
                                                     std::int64_t p, std::int64_t g, __m512& v0,
                                                     __m512& v1) {
  if (!w.two_level()) {
    __m512 v[2];
    load_group_f32(f32.data() + (p * w.groups() + g) * kPanelCols, v);
    v0 = v[0];
    v1 = v[1];
    return;
  }
  const TwoLevelAt at = two_level_at(w, p, g);
  const float* s = f32.data() + at.super;
  const __m128i* c = reinterpret_cast<const __m128i*>(codes.data() + at.code);
  v0 =
      _mm512_mul_ps(_mm512_load_ps(s), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(c))));
  v1 = _mm512_mul_ps(_mm512_load_ps(s + 16),
                     _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(c + 1))));
}

/// The group's scales: columns 0..15 / 16..31.
TPULLM_TARGET_AVX512 inline void group_scale_avx512(const PackedWeights& w, std::int64_t p,
                                                    std::int64_t g, __m512& s0, __m512& s1) {
  group_params_avx512(w, w.scales, w.scale_codes, p, g, s0, s1);
}

/// The group's mins (int4_min / int8_min / int6_min): columns 0..15 / 16..31.
TPULLM_TARGET_AVX512 inline void group_min_avx512(const PackedWeights& w, std::int64_t p,
                                                  std::int64_t g, __m512& m0, __m512& m1) {
  group_params_avx512(w, w.mins, w.min_codes, p, g, m0, m1);
}

TPULLM_TARGET_AVX512 inline void store_rows_avx512(const LinearArgs& a, std::int64_t m0, int R,
                                                   std::int64_t p, __m512 (*t)[2]) {
  const PackedWeights& w = *a.v.w;
  const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
  const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, w.N - p * kPanelCols));
  const __mmask16 k0m = col_mask(nc, 0), k1m = col_mask(nc, 1);
  for (int r = 0; r < R; ++r) {
    float* yr = a.y + (m0 + r) * a.ldy + c0;
    __m512 v0 = t[r][0], v1 = t[r][1];
    if (a.bias) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0m, a.bias + c0));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1m, a.bias + c0 + 16));
    }
    if (a.accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0m, yr));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1m, yr + 16));
    }
    _mm512_mask_storeu_ps(yr, k0m, v0);
    _mm512_mask_storeu_ps(yr + 16, k1m, v1);
  }
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
