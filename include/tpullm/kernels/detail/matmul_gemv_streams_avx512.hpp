#pragma once
/// AVX-512 GEMV of the float formats (f32 / bf16 / f16, M <= 4): each panel's K range read as
/// kGemvStreams interleaved DRAM streams into shared accumulators.

#include "tpullm/kernels/detail/matmul_avx512_common.hpp"
#include "tpullm/kernels/detail/matmul_gemv_stream_plan.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// y rows m0..m0+R-1 over panels [pa, pb): f32 FMAs of x with weights decoded in registers, S
/// streams per panel of U rows (kGemvStreamBytes) each per step, NA accumulator sets along the
/// step's rows. Float formats only (no scale groups).
template <WeightFormat F, int R, int S = kGemvStreams, std::int64_t PF = kGemvStreamPf,
          std::int64_t SB = kGemvStreamBytes, int HINT = _MM_HINT_T0>
TPULLM_TARGET_AVX512 void gemv_streams_avx512(const LinearArgs& a, std::int64_t m0, std::int64_t pa,
                                              std::int64_t pb) {
  static_assert(!is_quantized(F) && row_group(F) == 1, "float formats only");
  constexpr std::int64_t rb = row_bytes(F);
  constexpr int U = static_cast<int>(std::max<std::int64_t>(1, SB / rb));
  constexpr int NA = R == 1 ? std::min(U, 4) : R == 2 ? std::min(U, 2) : 1;
  const PackedWeights& w = *a.v.w;
  const GemvStreamPlan g = gemv_stream_plan(a, S, U);
  const std::int64_t Kv = a.v.k1 - a.v.k0;
  const std::int64_t last_b = (Kv - (S - 1) * g.L) * rb; // bytes of the last stream
  const float* xr[R];
  for (int r = 0; r < R; ++r)
    xr[r] = a.x + (m0 + r) * a.ldx;
  for (std::int64_t p = pa; p < pb; ++p) {
    const bool next = p + 1 < pb; // prefetch on into the next panel of this range
    const std::uint8_t* base = panel_row(w, p, a.v.k0);
    __m512 acc[NA][R][2];
#pragma GCC unroll 4
    for (int u = 0; u < NA; ++u)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[u][r][0] = acc[u][r][1] = _mm512_setzero_ps();
    for (std::int64_t j = 0; j < g.L; j += U) {
      const std::int64_t jb = j * rb + PF; // prefetch offset inside a stream
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
          __m512 wv[1][2];
          decode_rows_avx512<F>(row + u * rb, wv);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const __m512 xb = _mm512_set1_ps(xr[r][s * g.L + j + u]);
            acc[u % NA][r][0] = _mm512_fmadd_ps(xb, wv[0][0], acc[u % NA][r][0]);
            acc[u % NA][r][1] = _mm512_fmadd_ps(xb, wv[0][1], acc[u % NA][r][1]);
          }
        }
      }
    }
    // the last stream's rows past S * L (fewer than S * U; all of them when K is small)
    const std::uint8_t* row = base + S * g.stream_b;
    for (std::int64_t k = S * g.L; k < Kv; ++k, row += rb) {
      __m512 wv[1][2];
      decode_rows_avx512<F>(row, wv);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 xb = _mm512_set1_ps(xr[r][k]);
        acc[0][r][0] = _mm512_fmadd_ps(xb, wv[0][0], acc[0][r][0]);
        acc[0][r][1] = _mm512_fmadd_ps(xb, wv[0][1], acc[0][r][1]);
      }
    }
#pragma GCC unroll 4
    for (int u = 1; u < NA; ++u)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[0][r][0] = _mm512_add_ps(acc[0][r][0], acc[u][r][0]);
        acc[0][r][1] = _mm512_add_ps(acc[0][r][1], acc[u][r][1]);
      }
    store_rows_avx512(a, m0, R, p, acc[0]);
  }
}

/// Float-format GEMV of all M <= 4 rows, or of 8 rows (a row block's pass: gemv_rows_range),
/// over panels [pa, pb).
template <WeightFormat F>
TPULLM_TARGET_AVX512 void gemv_float_avx512(const LinearArgs& a, std::int64_t pa, std::int64_t pb) {
  switch (a.M) {
  case 8:
    gemv_streams_avx512<F, 8>(a, 0, pa, pb);
    return;
  case 1:
    gemv_streams_avx512<F, 1>(a, 0, pa, pb);
    return;
  case 2:
    gemv_streams_avx512<F, 2>(a, 0, pa, pb);
    return;
  case 3:
    gemv_streams_avx512<F, 3>(a, 0, pa, pb);
    return;
  default:
    gemv_streams_avx512<F, 4>(a, 0, pa, pb);
    return;
  }
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
