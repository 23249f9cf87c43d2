#pragma once
/// AVX2 GEMV of the linear (M <= 4, all formats): f32 FMAs on weights dequantized in registers.

#include "tpullm/kernels/detail/matmul_avx2_common.hpp"
#include "tpullm/kernels/detail/matmul_gemv_streams_avx2.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// GEMV over R <= 2 rows of x for one panel, f32 FMAs on decoded weights.
template <WeightFormat F, int R>
TPULLM_TARGET_AVX2 void gemv_panel_avx2(const LinearArgs& a, std::int64_t m0, std::int64_t p) {
  constexpr int RG = static_cast<int>(row_group(F));
  constexpr int NA = R == 1 ? 2 : 1;
  const PackedWeights& w = *a.v.w;
  const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
  const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, w.N - p * kPanelCols));
  const std::int64_t rb = row_bytes(F);
  __m256 t[R][4];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i)
      t[r][i] = _mm256_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m256 acc[NA][R][4];
    for (int u = 0; u < NA; ++u)
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 4; ++i)
          acc[u][r][i] = _mm256_setzero_ps();
    const std::uint8_t* row = panel_row(w, p, ks);
    for (std::int64_t k = ks; k < ke; k += RG, row += RG * rb) {
      __m256 wv[RG][4];
      decode_rows_avx2<F>(row, wv);
      for (int j = 0; j < RG; ++j)
        for (int r = 0; r < R; ++r) {
          const __m256 xb = _mm256_set1_ps(a.x[(m0 + r) * a.ldx + k + j - a.v.k0]);
          const int u = static_cast<int>((k + j) % NA);
          for (int i = 0; i < 4; ++i)
            acc[u][r][i] = _mm256_fmadd_ps(xb, wv[j][i], acc[u][r][i]);
        }
    }
    for (int u = 1; u < NA; ++u)
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 4; ++i)
          acc[0][r][i] = _mm256_add_ps(acc[0][r][i], acc[u][r][i]);
    if constexpr (is_quantized(F)) {
      const std::int64_t g = ks / w.group_rows();
      __m256 s[4], z[4];
      group_scale_avx2(w, p, g, s);
      if constexpr (has_mins(F))
        group_min_avx2(w, p, g, z); // t += s acc - m xs
      else
        group_zero_avx2<F>(w, p, g, z);
      for (int r = 0; r < R; ++r) {
        const __m256 xs = _mm256_set1_ps(a.xsum[(m0 + r) * a.xsum_ld + gi]);
        for (int i = 0; i < 4; ++i) {
          if constexpr (has_mins(F))
            t[r][i] = _mm256_fnmadd_ps(z[i], xs, _mm256_fmadd_ps(s[i], acc[0][r][i], t[r][i]));
          else
            t[r][i] = _mm256_fmadd_ps(s[i], _mm256_fnmadd_ps(z[i], xs, acc[0][r][i]), t[r][i]);
        }
      }
    } else {
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 4; ++i)
          t[r][i] = _mm256_add_ps(t[r][i], acc[0][r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* yr = a.y + (m0 + r) * a.ldy + c0;
    for (int i = 0; i < 4; ++i) {
      const __m256i mk = col_mask_avx2(nc, i);
      __m256 v = t[r][i];
      if (a.bias)
        v = _mm256_add_ps(v, _mm256_maskload_ps(a.bias + c0 + 8 * i, mk));
      if (a.accumulate)
        v = _mm256_add_ps(v, _mm256_maskload_ps(yr + 8 * i, mk));
      _mm256_maskstore_ps(yr + 8 * i, mk, v);
    }
  }
}

template <WeightFormat F>
TPULLM_TARGET_AVX2 void gemv_avx2(const LinearArgs& a, std::int64_t pa, std::int64_t pb) {
  if constexpr (!is_quantized(F)) { // f32 / bf16 / f16: K-interleaved streams per panel
    gemv_float_avx2<F>(a, pa, pb);
    return;
  }
  for (std::int64_t p = pa; p < pb; ++p) {
    std::int64_t m = 0;
    for (; m + 2 <= a.M; m += 2)
      gemv_panel_avx2<F, 2>(a, m, p);
    if (m < a.M)
      gemv_panel_avx2<F, 1>(a, m, p);
  }
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
