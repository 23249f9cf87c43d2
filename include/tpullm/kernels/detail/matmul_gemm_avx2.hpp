#pragma once
/// AVX2 GEMM pieces of the linear: [kc, 32] block dequantization and the MR x 16 micro-kernel.

#include "tpullm/kernels/detail/matmul_avx2_common.hpp"
#include "tpullm/kernels/detail/matmul_portable.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

template <WeightFormat F>
TPULLM_TARGET_AVX2 void decode_block_avx2(const PackedWeights& w, std::int64_t p, std::int64_t kb,
                                          std::int64_t kc, float* out) {
  constexpr int RG = static_cast<int>(row_group(F));
  const std::int64_t rb = row_bytes(F);
  const std::uint8_t* row = panel_row(w, p, kb);
  std::int64_t k = 0;
  while (k < kc) {
    std::int64_t ke = kc;
    __m256 s[4], z[4];
    for (int i = 0; i < 4; ++i) {
      s[i] = _mm256_set1_ps(1.0f);
      z[i] = _mm256_setzero_ps();
    }
    if constexpr (is_quantized(F)) {
      const std::int64_t g = (kb + k) / w.group_rows();
      ke = std::min(kc, (g + 1) * w.group_rows() - kb);
      group_scale_avx2(w, p, g, s);
      if constexpr (has_mins(F))
        group_min_avx2(w, p, g, z); // z holds the mins: w = u s - m
      else
        group_zero_avx2<F>(w, p, g, z);
    }
    for (; k < ke; k += RG, row += RG * rb) {
      __m256 wv[RG][4];
      decode_rows_avx2<F>(row, wv);
      for (int j = 0; j < RG; ++j)
        for (int i = 0; i < 4; ++i) {
          if constexpr (has_mins(F))
            wv[j][i] = _mm256_fmsub_ps(wv[j][i], s[i], z[i]);
          else if constexpr (is_quantized(F))
            wv[j][i] = _mm256_mul_ps(_mm256_sub_ps(wv[j][i], z[i]), s[i]);
          _mm256_store_ps(out + (k + j) * 32 + 8 * i, wv[j][i]);
        }
    }
  }
}

/// MR x 16 micro-kernel on half `h` of a 32-column B block.
template <int MR>
TPULLM_TARGET_AVX2 void micro_avx2_half(const float* ap, const float* b, std::int64_t kc, float* c,
                                        std::int64_t ldc, int ncols, TileInit init,
                                        const float* bias) {
  __m256 acc[MR][2];
  const __m256i m0 = col_mask_avx2(ncols, 0), m1 = col_mask_avx2(ncols, 1);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    switch (init) {
    case TileInit::zero:
      acc[i][0] = acc[i][1] = _mm256_setzero_ps();
      break;
    case TileInit::bias:
      acc[i][0] = _mm256_maskload_ps(bias, m0);
      acc[i][1] = _mm256_maskload_ps(bias + 8, m1);
      break;
    case TileInit::load:
      acc[i][0] = _mm256_maskload_ps(c + i * ldc, m0);
      acc[i][1] = _mm256_maskload_ps(c + i * ldc + 8, m1);
      break;
    }
  }
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b + 32 * k), b1 = _mm256_load_ps(b + 32 * k + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(ap + k * MR + i);
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    _mm256_maskstore_ps(c + i * ldc, m0, acc[i][0]);
    _mm256_maskstore_ps(c + i * ldc + 8, m1, acc[i][1]);
  }
}

template <int MR>
TPULLM_TARGET_AVX2 void micro_avx2(const float* ap, const float* b, std::int64_t kc, float* c,
                                   std::int64_t ldc, int ncols, TileInit init, const float* bias) {
  micro_avx2_half<MR>(ap, b, kc, c, ldc, ncols, init, bias);
  if (ncols > 16)
    micro_avx2_half<MR>(ap, b + 16, kc, c + 16, ldc, ncols - 16, init, bias ? bias + 16 : nullptr);
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
