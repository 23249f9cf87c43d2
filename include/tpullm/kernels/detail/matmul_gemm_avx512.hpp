#pragma once
/// AVX-512 GEMM pieces of the linear: [kc, 32] block dequantization and the MR x 32 micro-kernel.

#include "tpullm/kernels/detail/matmul_avx512_common.hpp"
#include "tpullm/kernels/detail/matmul_portable.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

template <WeightFormat F>
TPULLM_TARGET_AVX512 void decode_block_avx512(const PackedWeights& w, std::int64_t p,
                                              std::int64_t kb, std::int64_t kc, float* out) {
  constexpr int RG = static_cast<int>(row_group(F));
  const std::int64_t rb = row_bytes(F);
  const std::uint8_t* row = panel_row(w, p, kb);
  std::int64_t k = 0;
  while (k < kc) {
    std::int64_t ke = kc;
    __m512 s0 = _mm512_set1_ps(1.0f), s1 = s0, z0 = _mm512_setzero_ps(), z1 = z0;
    if constexpr (is_quantized(F)) {
      const std::int64_t g = (kb + k) / w.group_rows();
      ke = std::min(kc, (g + 1) * w.group_rows() - kb);
      group_scale_avx512(w, p, g, s0, s1);
      if constexpr (has_mins(F))
        group_min_avx512(w, p, g, z0, z1); // z holds the mins: w = u s - m
      else
        group_zero_avx512<F>(w, p, g, z0, z1);
    }
    for (; k < ke; k += RG, row += RG * rb) {
      __m512 wv[RG][2];
      decode_rows_avx512<F>(row, wv);
#pragma GCC unroll 8
      for (int j = 0; j < RG; ++j) {
        if constexpr (has_mins(F)) {
          wv[j][0] = _mm512_fmsub_ps(wv[j][0], s0, z0);
          wv[j][1] = _mm512_fmsub_ps(wv[j][1], s1, z1);
        } else if constexpr (is_quantized(F)) {
          wv[j][0] = _mm512_mul_ps(_mm512_sub_ps(wv[j][0], z0), s0);
          wv[j][1] = _mm512_mul_ps(_mm512_sub_ps(wv[j][1], z1), s1);
        }
        _mm512_store_ps(out + (k + j) * 32, wv[j][0]);
        _mm512_store_ps(out + (k + j) * 32 + 16, wv[j][1]);
      }
    }
  }
}

/// pack_a on AVX-512: x rows [m0, m0 + mc) x cols [kb, kb + kc) into MR-row strips [kc][rows],
/// 16 columns at a time through a 16 x 16 register transpose (rows past the strip are zero).
TPULLM_TARGET_AVX512 inline void pack_a_avx512(const float* x, std::int64_t ldx, std::int64_t m0,
                                               std::int64_t mc, std::int64_t kb, std::int64_t kc,
                                               int MR, float* out) {
  for (std::int64_t s = 0; s < mc; s += MR) {
    const int rows = static_cast<int>(std::min<std::int64_t>(MR, mc - s));
    float* o = out + s * kc;
    const __mmask16 rmask = static_cast<__mmask16>((1u << rows) - 1u);
    for (std::int64_t k0 = 0; k0 < kc; k0 += 16) {
      const int w = static_cast<int>(std::min<std::int64_t>(16, kc - k0));
      const __mmask16 km = static_cast<__mmask16>(w == 16 ? 0xFFFF : (1u << w) - 1u);
      __m512 r[16], t[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(km, x + (m0 + s + i) * ldx + kb + k0)
                        : _mm512_setzero_ps();
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
      // r[q] holds column k0 + kCol[q] of the 16 rows (see fa_pack_qt_avx512)
      static constexpr int kCol[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
      for (int q = 0; q < 16; ++q)
        if (kCol[q] < w)
          _mm512_mask_storeu_ps(o + (k0 + kCol[q]) * rows, rmask, r[q]);
    }
  }
}

/// Starts an MR x 32 tile's accumulators (columns masked by m0 / m1) as `init` says: zero, the
/// bias row, or C's rows (stride ldc).
template <int MR>
TPULLM_TARGET_AVX512 __attribute__((always_inline)) inline void
tile_start_avx512(__m512 (&acc)[MR][2], TileInit init, const float* c, std::int64_t ldc,
                  const float* bias, __mmask16 m0, __mmask16 m1) {
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    switch (init) {
    case TileInit::zero:
      acc[i][0] = acc[i][1] = _mm512_setzero_ps();
      break;
    case TileInit::bias:
      acc[i][0] = _mm512_maskz_loadu_ps(m0, bias);
      acc[i][1] = _mm512_maskz_loadu_ps(m1, bias + 16);
      break;
    case TileInit::load:
      acc[i][0] = _mm512_maskz_loadu_ps(m0, c + i * ldc);
      acc[i][1] = _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
      break;
    }
  }
}

/// Stores an MR x 32 tile's accumulators into C (stride ldc, columns masked by m0 / m1).
template <int MR>
TPULLM_TARGET_AVX512 __attribute__((always_inline)) inline void
tile_store_avx512(const __m512 (&acc)[MR][2], float* c, std::int64_t ldc, __mmask16 m0,
                  __mmask16 m1) {
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
    _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
  }
}

/// MR x 32 micro-kernel: C[MR, ncols] (=|+=) Ap[kc][MR] · B[kc][32].
template <int MR>
TPULLM_TARGET_AVX512 void micro_avx512(const float* ap, const float* b, std::int64_t kc, float* c,
                                       std::int64_t ldc, int ncols, TileInit init,
                                       const float* bias) {
  __m512 acc[MR][2];
  const __mmask16 m0 = col_mask(ncols, 0), m1 = col_mask(ncols, 1);
  tile_start_avx512<MR>(acc, init, c, ldc, bias, m0, m1);
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + 32 * k), b1 = _mm512_load_ps(b + 32 * k + 16);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(ap[k * MR + i]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  tile_store_avx512<MR>(acc, c, ldc, m0, m1);
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
