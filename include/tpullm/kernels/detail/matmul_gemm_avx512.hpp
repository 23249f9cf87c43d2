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
      const float* s = panel_scales(w, p, g);
      s0 = _mm512_load_ps(s);
      s1 = _mm512_load_ps(s + 16);
      group_zero_avx512<F>(w, p, g, z0, z1);
    }
    for (; k < ke; k += RG, row += RG * rb) {
      __m512 wv[RG][2];
      decode_rows_avx512<F>(row, wv);
#pragma GCC unroll 8
      for (int j = 0; j < RG; ++j) {
        if constexpr (is_quantized(F)) {
          wv[j][0] = _mm512_mul_ps(_mm512_sub_ps(wv[j][0], z0), s0);
          wv[j][1] = _mm512_mul_ps(_mm512_sub_ps(wv[j][1], z1), s1);
        }
        _mm512_store_ps(out + (k + j) * 32, wv[j][0]);
        _mm512_store_ps(out + (k + j) * 32 + 16, wv[j][1]);
      }
    }
  }
}

/// MR x 32 micro-kernel: C[MR, ncols] (=|+=) Ap[kc][MR] · B[kc][32].
template <int MR>
TPULLM_TARGET_AVX512 void micro_avx512(const float* ap, const float* b, std::int64_t kc, float* c,
                                       std::int64_t ldc, int ncols, TileInit init,
                                       const float* bias) {
  __m512 acc[MR][2];
  const __mmask16 m0 = col_mask(ncols, 0), m1 = col_mask(ncols, 1);
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
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + 32 * k), b1 = _mm512_load_ps(b + 32 * k + 16);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(ap[k * MR + i]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
    _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
  }
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
