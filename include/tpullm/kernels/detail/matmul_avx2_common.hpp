#pragma once
/// AVX2 helpers shared by the linear GEMV and GEMM: row-group decoding into ymm registers,
/// group zero points / mins and column masks.

#include "tpullm/kernels/detail/matmul_common.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// Raw row group -> w[j][0..3] (row j; columns 0-7, 8-15, 16-23, 24-31).
template <WeightFormat F>
TPULLM_TARGET_AVX2 inline void decode_rows_avx2(const std::uint8_t* r, __m256 (*w)[4]) {
  if constexpr (F == WeightFormat::f32) {
    for (int i = 0; i < 4; ++i)
      w[0][i] = _mm256_load_ps(reinterpret_cast<const float*>(r) + 8 * i);
  } else if constexpr (F == WeightFormat::bf16) {
    const __m256i d0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(r));
    const __m256i d1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32));
    const __m256i hm = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    w[0][0] = _mm256_castsi256_ps(_mm256_slli_epi32(d0, 16));
    w[0][1] = _mm256_castsi256_ps(_mm256_slli_epi32(d1, 16));
    w[0][2] = _mm256_castsi256_ps(_mm256_and_si256(d0, hm));
    w[0][3] = _mm256_castsi256_ps(_mm256_and_si256(d1, hm));
  } else if constexpr (F == WeightFormat::f16) {
    for (int i = 0; i < 4; ++i)
      w[0][i] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(r + 16 * i)));
  } else if constexpr (F == WeightFormat::int8) {
    for (int i = 0; i < 4; ++i) {
      const __m256i d = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32 * i));
      w[0][i] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 24), 24));
      w[1][i] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 16), 24));
      w[2][i] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 8), 24));
      w[3][i] = _mm256_cvtepi32_ps(_mm256_srai_epi32(d, 24));
    }
  } else if constexpr (F == WeightFormat::int8_asym || F == WeightFormat::int8_min) {
    const __m256i m8 = _mm256_set1_epi32(0xFF);
    for (int i = 0; i < 4; ++i) {
      const __m256i d = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32 * i));
      for (int j = 0; j < 4; ++j)
        w[j][i] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(d, 8 * j), m8));
    }
  } else if constexpr (is_six_format(F)) {
    const __m256i m4 = _mm256_set1_epi32(0xF), m2 = _mm256_set1_epi32(0x30);
    for (int i = 0; i < 4; ++i) {
      const __m256i hb = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 256 + 32 * i));
      for (int o = 0; o < 2; ++o) {
        const __m256i d = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 128 * o + 32 * i));
        for (int j = 0; j < 8; ++j) { // as decode_rows_avx512
          const int sh = 8 * (j % 4) + 4 * (j / 4);
          const int hs = 8 * (j % 4) + 2 * (2 * o + j / 4) - 4;
          const __m256i hi = hs >= 0 ? _mm256_srli_epi32(hb, hs) : _mm256_slli_epi32(hb, -hs);
          w[8 * o + j][i] = _mm256_cvtepi32_ps(_mm256_or_si256(
              _mm256_and_si256(_mm256_srli_epi32(d, sh), m4), _mm256_and_si256(hi, m2)));
        }
      }
    }
  } else {
    const __m256i m4 = _mm256_set1_epi32(0xF);
    for (int i = 0; i < 4; ++i) {
      const __m256i d = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32 * i));
      for (int j = 0; j < 8; ++j) {
        const int sh = 8 * (j % 4) + 4 * (j / 4);
        w[j][i] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(d, sh), m4));
      }
    }
  }
}

template <WeightFormat F>
TPULLM_TARGET_AVX2 inline void group_zero_avx2(const PackedWeights& w, std::int64_t p,
                                               std::int64_t g, __m256* z) {
  if constexpr (fixed_zero(F) != 0) {
    for (int i = 0; i < 4; ++i)
      z[i] = _mm256_set1_ps(static_cast<float>(fixed_zero(F)));
  } else if constexpr (has_zeros(F)) {
    const std::uint8_t* zp = panel_zeros(w, p, g);
    for (int i = 0; i < 4; ++i)
      z[i] = _mm256_cvtepi32_ps(
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zp + 8 * i))));
  } else {
    for (int i = 0; i < 4; ++i)
      z[i] = _mm256_setzero_ps();
  }
}

/// One group's parameters from `f32` (one level) or super-block f32 times int8 codes
/// (two-level) for the column octets i0..i0+n-1 (v[i] holds columns 8i..8i+7; others untouched).
TPULLM_TARGET_AVX2 inline void group_params_avx2(const PackedWeights& w,
                                                 const AlignedArray<float>& f32,
                                                 const AlignedArray<std::int8_t>& codes,
                                                 std::int64_t p, std::int64_t g, __m256* v,
                                                 int i0 = 0, int n = 4) {
  if (!w.two_level()) {
    const float* s = f32.data() + (p * w.groups() + g) * kPanelCols;
    for (int i = i0; i < i0 + n; ++i)
      v[i] = _mm256_load_ps(s + 8 * i);
    return;
  }
  const TwoLevelAt at = two_level_at(w, p, g);
  const float* s = f32.data() + at.super;
  const std::int8_t* c = codes.data() + at.code;
  for (int i = i0; i < i0 + n; ++i)
    v[i] = _mm256_mul_ps(_mm256_load_ps(s + 8 * i),
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                             _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8 * i)))));
}

/// The group's scales, columns 0-7, 8-15, 16-23, 24-31 (octets i0..i0+n-1 only).
TPULLM_TARGET_AVX2 inline void group_scale_avx2(const PackedWeights& w, std::int64_t p,
                                                std::int64_t g, __m256* s, int i0 = 0, int n = 4) {
  group_params_avx2(w, w.scales, w.scale_codes, p, g, s, i0, n);
}

/// The group's mins (int4_min / int8_min / int6_min), as group_scale_avx2.
TPULLM_TARGET_AVX2 inline void group_min_avx2(const PackedWeights& w, std::int64_t p,
                                              std::int64_t g, __m256* m, int i0 = 0, int n = 4) {
  group_params_avx2(w, w.mins, w.min_codes, p, g, m, i0, n);
}

TPULLM_TARGET_AVX2 inline __m256i col_mask_avx2(int ncols, int part) {
  const int n = std::clamp(ncols - 8 * part, 0, 8);
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
