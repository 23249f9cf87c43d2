#pragma once
/// Packing of a q tile into a scaled Q^T [d, br] (generic and AVX-512 register transpose).

#include "tpullm/kernels/detail/flash_attention_tile.hpp"

namespace tpullm::kernels::detail {

/// Q^T [d, br] from br row pointers (nullptr = pad row of zeros), scaled.
inline void fa_pack_qt_generic(const float* const* rows, std::int64_t br, std::int64_t d,
                               float scale, float* qt) {
  for (std::int64_t i = 0; i < br; ++i)
    for (std::int64_t x = 0; x < d; ++x)
      qt[x * br + i] = rows[i] ? rows[i][x] * scale : 0.f;
}

#if TPULLM_X86
TPULLM_AVX512_BEGIN
/// Same as fa_pack_qt_generic, 16 x 16 blocks transposed in registers.
TPULLM_TARGET_AVX512 inline void fa_pack_qt_avx512(const float* const* rows, std::int64_t br,
                                                   std::int64_t d, float scale, float* qt) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (std::int64_t i0 = 0; i0 < br; i0 += 16)
    for (std::int64_t x0 = 0; x0 < d; x0 += 16) {
      const std::int64_t w = std::min<std::int64_t>(16, d - x0);
      const __mmask16 m = static_cast<__mmask16>(w == 16 ? 0xFFFF : (1u << w) - 1u);
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = rows[i0 + i] ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m, rows[i0 + i] + x0), sc)
                            : _mm512_setzero_ps();
      // 16x16 transpose: 32-bit, 64-bit, 128-bit, 256-bit interleave stages
      __m512 t[16];
      for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 16; i += 4)
        for (int j = 0; j < 2; ++j) {
          r[i + j] = _mm512_castpd_ps(
              _mm512_unpacklo_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
          r[i + j + 2] = _mm512_castpd_ps(
              _mm512_unpackhi_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
        }
      for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; ++j) {
          t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
          t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xDD);
        }
      for (int j = 0; j < 8; ++j) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
      }
      // r[k] now holds column x0 + perm(k) of the 16 rows
      static constexpr int kCol[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
      for (int k = 0; k < 16; ++k) {
        const int col = kCol[k];
        if (col < w)
          _mm512_storeu_ps(qt + (x0 + col) * br + i0, r[k]);
      }
    }
}
TPULLM_AVX512_END
#endif

} // namespace tpullm::kernels::detail
