#pragma once
/// AVX2 GEMV of the float formats (f32 / bf16 / f16, M <= 4): each panel's K range read as
/// kGemvStreams interleaved DRAM streams into shared accumulators (the plan of
/// matmul_gemv_streams_avx512.hpp on 8-wide registers).

#include "tpullm/kernels/detail/matmul_avx2_common.hpp"
#include "tpullm/kernels/detail/matmul_gemv_stream_plan.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// y rows m0..m0+R-1 (R <= 2: 4 accumulators per row and set fill the 16 ymm registers) over
/// panels [pa, pb), S streams per panel (GemvStreamPlan) of U rows each per step.
template <WeightFormat F, int R, int S = kGemvStreams, std::int64_t PF = kGemvPf,
          std::int64_t SB = kGemvStreamBytes, int HINT = _MM_HINT_T0>
TPULLM_TARGET_AVX2 void gemv_streams_avx2(const LinearArgs& a, std::int64_t m0, std::int64_t pa,
                                          std::int64_t pb) {
  static_assert(!is_quantized(F) && row_group(F) == 1 && R <= 2, "float formats, R <= 2");
  constexpr std::int64_t rb = row_bytes(F);
  constexpr int U = static_cast<int>(std::max<std::int64_t>(1, SB / rb));
  constexpr int NA = R == 1 ? std::min(U, 2) : 1;
  const PackedWeights& w = *a.v.w;
  const GemvStreamPlan g = gemv_stream_plan(a, S, U);
  const std::int64_t Kv = a.v.k1 - a.v.k0;
  const std::int64_t last_b = (Kv - (S - 1) * g.L) * rb;
  const float* xr[R];
  for (int r = 0; r < R; ++r)
    xr[r] = a.x + (m0 + r) * a.ldx;
  for (std::int64_t p = pa; p < pb; ++p) {
    const bool next = p + 1 < pb;
    const std::uint8_t* base = panel_row(w, p, a.v.k0);
    __m256 acc[NA][R][4];
    for (int u = 0; u < NA; ++u)
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 4; ++i)
          acc[u][r][i] = _mm256_setzero_ps();
    for (std::int64_t j = 0; j < g.L; j += U) {
      const std::int64_t jb = j * rb + PF;
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) {
        const std::int64_t end = s + 1 < S ? g.stream_b : last_b;
        if (PF > 0 && (jb < end || next)) {
          const char* q = reinterpret_cast<const char*>(base + s * g.stream_b + jb) +
                          (jb < end ? 0 : g.wrap_b + g.stream_b - end);
#pragma GCC unroll 8
          for (std::int64_t b = 0; b < U * rb; b += 64)
            _mm_prefetch(q + b, static_cast<_mm_hint>(HINT));
        }
      }
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) {
        const std::uint8_t* row = base + s * g.stream_b + j * rb;
#pragma GCC unroll 8
        for (int u = 0; u < U; ++u) {
          __m256 wv[1][4];
          decode_rows_avx2<F>(row + u * rb, wv);
          for (int r = 0; r < R; ++r) {
            const __m256 xb = _mm256_set1_ps(xr[r][s * g.L + j + u]);
            for (int i = 0; i < 4; ++i)
              acc[u % NA][r][i] = _mm256_fmadd_ps(xb, wv[0][i], acc[u % NA][r][i]);
          }
        }
      }
    }
    const std::uint8_t* row = base + S * g.stream_b;
    for (std::int64_t k = S * g.L; k < Kv; ++k, row += rb) {
      __m256 wv[1][4];
      decode_rows_avx2<F>(row, wv);
      for (int r = 0; r < R; ++r) {
        const __m256 xb = _mm256_set1_ps(xr[r][k]);
        for (int i = 0; i < 4; ++i)
          acc[0][r][i] = _mm256_fmadd_ps(xb, wv[0][i], acc[0][r][i]);
      }
    }
    for (int u = 1; u < NA; ++u)
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 4; ++i)
          acc[0][r][i] = _mm256_add_ps(acc[0][r][i], acc[u][r][i]);
    const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
    const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, w.N - p * kPanelCols));
    for (int r = 0; r < R; ++r) {
      float* yr = a.y + (m0 + r) * a.ldy + c0;
      for (int i = 0; i < 4; ++i) {
        const __m256i mk = col_mask_avx2(nc, i);
        __m256 v = acc[0][r][i];
        if (a.bias)
          v = _mm256_add_ps(v, _mm256_maskload_ps(a.bias + c0 + 8 * i, mk));
        if (a.accumulate)
          v = _mm256_add_ps(v, _mm256_maskload_ps(yr + 8 * i, mk));
        _mm256_maskstore_ps(yr + 8 * i, mk, v);
      }
    }
  }
}

/// Float-format GEMV of all M <= 4 rows over panels [pa, pb): pairs of rows, then a single one.
template <WeightFormat F>
TPULLM_TARGET_AVX2 void gemv_float_avx2(const LinearArgs& a, std::int64_t pa, std::int64_t pb) {
  std::int64_t m = 0;
  for (; m + 2 <= a.M; m += 2)
    gemv_streams_avx2<F, 2>(a, m, pa, pb);
  if (m < a.M)
    gemv_streams_avx2<F, 1>(a, m, pa, pb);
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
