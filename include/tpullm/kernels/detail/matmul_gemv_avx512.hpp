#pragma once
/// AVX-512 GEMV of the linear (M <= 4, all formats): f32 FMAs on weights dequantized in registers.

#include "tpullm/kernels/detail/matmul_avx512_common.hpp"
#include "tpullm/kernels/detail/matmul_gemv_streams_avx512.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// GEMV over R rows of x (R <= 4) for one panel with f32 FMAs (all formats). NA independent
/// accumulator sets along K hide the FMA latency.
template <WeightFormat F, int R>
TPULLM_TARGET_AVX512 void gemv_panel_avx512(const LinearArgs& a, std::int64_t m0, std::int64_t p) {
  constexpr int RG = static_cast<int>(row_group(F));
  constexpr int NA = R == 1 ? 4 : R == 2 ? 2 : 1;
  constexpr int STEP = RG == 1 ? NA : RG; // rows per loop iteration
  const PackedWeights& w = *a.v.w;
  const std::int64_t rb = row_bytes(F);
  const float* xr[R];
  for (int r = 0; r < R; ++r)
    xr[r] = a.x + (m0 + r) * a.ldx - a.v.k0;
  __m512 t[R][2];
  for (int r = 0; r < R; ++r)
    t[r][0] = t[r][1] = _mm512_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m512 acc[NA][R][2];
#pragma GCC unroll 4
    for (int u = 0; u < NA; ++u)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        acc[u][r][0] = acc[u][r][1] = _mm512_setzero_ps();
    const std::uint8_t* row = panel_row(w, p, ks);
    std::int64_t k = ks;
    for (; k + STEP <= ke; k += STEP, row += STEP * rb) {
      for (std::int64_t b = 0; b < STEP * rb; b += 64) // every line of this step, kGemvPf ahead
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + b, _MM_HINT_T0);
      __m512 wv[STEP][2];
#pragma GCC unroll 8
      for (int u = 0; u < STEP; u += RG)
        decode_rows_avx512<F>(row + u * rb, wv + u);
#pragma GCC unroll 8
      for (int u = 0; u < STEP; ++u)
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512 xb = _mm512_set1_ps(xr[r][k + u]);
          acc[u % NA][r][0] = _mm512_fmadd_ps(xb, wv[u][0], acc[u % NA][r][0]);
          acc[u % NA][r][1] = _mm512_fmadd_ps(xb, wv[u][1], acc[u % NA][r][1]);
        }
    }
    if constexpr (RG == 1) {
      for (; k < ke; ++k, row += rb) {
        __m512 wv[1][2];
        decode_rows_avx512<F>(row, wv);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512 xb = _mm512_set1_ps(xr[r][k]);
          acc[0][r][0] = _mm512_fmadd_ps(xb, wv[0][0], acc[0][r][0]);
          acc[0][r][1] = _mm512_fmadd_ps(xb, wv[0][1], acc[0][r][1]);
        }
      }
    }
#pragma GCC unroll 4
    for (int u = 1; u < NA; ++u)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        acc[0][r][0] = _mm512_add_ps(acc[0][r][0], acc[u][r][0]);
        acc[0][r][1] = _mm512_add_ps(acc[0][r][1], acc[u][r][1]);
      }
    if constexpr (is_quantized(F)) {
      const std::int64_t g = ks / w.group_rows();
      __m512 s0, s1;
      group_scale_avx512(w, p, g, s0, s1);
      __m512 z0, z1;
      if constexpr (has_mins(F))
        group_min_avx512(w, p, g, z0, z1); // t += s acc - m xs
      else
        group_zero_avx512<F>(w, p, g, z0, z1);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 xs = _mm512_set1_ps(a.xsum[(m0 + r) * a.xsum_ld + gi]);
        if constexpr (has_mins(F)) {
          t[r][0] = _mm512_fnmadd_ps(z0, xs, _mm512_fmadd_ps(s0, acc[0][r][0], t[r][0]));
          t[r][1] = _mm512_fnmadd_ps(z1, xs, _mm512_fmadd_ps(s1, acc[0][r][1], t[r][1]));
        } else {
          t[r][0] = _mm512_fmadd_ps(s0, _mm512_fnmadd_ps(z0, xs, acc[0][r][0]), t[r][0]);
          t[r][1] = _mm512_fmadd_ps(s1, _mm512_fnmadd_ps(z1, xs, acc[0][r][1]), t[r][1]);
        }
      }
    } else {
      for (int r = 0; r < R; ++r) {
        t[r][0] = _mm512_add_ps(t[r][0], acc[0][r][0]);
        t[r][1] = _mm512_add_ps(t[r][1], acc[0][r][1]);
      }
    }
  }
  store_rows_avx512(a, m0, R, p, t);
}

/// Single-row GEMV over S panels p..p+S-1 at once: S interleaved weight streams (one per panel,
/// panel_bytes apart), which a core reads faster from DRAM than one stream with prefetch. One
/// accumulator pair per panel (S >= 4 chains cover the FMA latency; fewer panels add sets).
template <WeightFormat F, int S>
TPULLM_TARGET_AVX512 void gemv_panels_avx512_r1(const LinearArgs& a, std::int64_t p) {
  constexpr int RG = static_cast<int>(row_group(F));
  constexpr int NA = S >= 4 ? 1 : S == 1 ? 4 : 2; // accumulator sets along K per panel
  constexpr int STEP = RG == 1 ? NA : RG;
  const PackedWeights& w = *a.v.w;
  const std::int64_t rb = row_bytes(F), pbytes = w.panel_bytes();
  const float* xr = a.x - a.v.k0;
  __m512 t[S][2];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s)
    t[s][0] = t[s][1] = _mm512_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m512 acc[NA][S][2];
#pragma GCC unroll 4
    for (int u = 0; u < NA; ++u)
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s)
        acc[u][s][0] = acc[u][s][1] = _mm512_setzero_ps();
    const std::uint8_t* row = panel_row(w, p, ks);
    std::int64_t k = ks;
    for (; k + STEP <= ke; k += STEP, row += STEP * rb) {
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s)
        for (std::int64_t b = 0; b < STEP * rb; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row + s * pbytes) + kGemvPf + b, _MM_HINT_T0);
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) {
        __m512 wv[STEP][2];
#pragma GCC unroll 8
        for (int u = 0; u < STEP; u += RG)
          decode_rows_avx512<F>(row + s * pbytes + u * rb, wv + u);
#pragma GCC unroll 8
        for (int u = 0; u < STEP; ++u) {
          const __m512 xb = _mm512_set1_ps(xr[k + u]);
          acc[u % NA][s][0] = _mm512_fmadd_ps(xb, wv[u][0], acc[u % NA][s][0]);
          acc[u % NA][s][1] = _mm512_fmadd_ps(xb, wv[u][1], acc[u % NA][s][1]);
        }
      }
    }
    if constexpr (RG == 1) {
      for (; k < ke; ++k, row += rb) {
        const __m512 xb = _mm512_set1_ps(xr[k]);
#pragma GCC unroll 8
        for (int s = 0; s < S; ++s) {
          __m512 wv[1][2];
          decode_rows_avx512<F>(row + s * pbytes, wv);
          acc[0][s][0] = _mm512_fmadd_ps(xb, wv[0][0], acc[0][s][0]);
          acc[0][s][1] = _mm512_fmadd_ps(xb, wv[0][1], acc[0][s][1]);
        }
      }
    }
#pragma GCC unroll 4
    for (int u = 1; u < NA; ++u)
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) {
        acc[0][s][0] = _mm512_add_ps(acc[0][s][0], acc[u][s][0]);
        acc[0][s][1] = _mm512_add_ps(acc[0][s][1], acc[u][s][1]);
      }
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      if constexpr (is_quantized(F)) {
        const std::int64_t g = ks / w.group_rows();
        __m512 sc0, sc1, z0, z1;
        group_scale_avx512(w, p + s, g, sc0, sc1);
        const __m512 xs = _mm512_set1_ps(a.xsum[gi]);
        if constexpr (has_mins(F)) { // t += s acc - m xs
          group_min_avx512(w, p + s, g, z0, z1);
          t[s][0] = _mm512_fnmadd_ps(z0, xs, _mm512_fmadd_ps(sc0, acc[0][s][0], t[s][0]));
          t[s][1] = _mm512_fnmadd_ps(z1, xs, _mm512_fmadd_ps(sc1, acc[0][s][1], t[s][1]));
        } else {
          group_zero_avx512<F>(w, p + s, g, z0, z1);
          t[s][0] = _mm512_fmadd_ps(sc0, _mm512_fnmadd_ps(z0, xs, acc[0][s][0]), t[s][0]);
          t[s][1] = _mm512_fmadd_ps(sc1, _mm512_fnmadd_ps(z1, xs, acc[0][s][1]), t[s][1]);
        }
      } else {
        t[s][0] = _mm512_add_ps(t[s][0], acc[0][s][0]);
        t[s][1] = _mm512_add_ps(t[s][1], acc[0][s][1]);
      }
    }
  }
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s)
    store_rows_avx512(a, 0, 1, p + s, t + s);
}

/// Single-row GEMV of `rem` (< S) panels at p: the widest instantiation that fits.
template <WeightFormat F, int S>
TPULLM_TARGET_AVX512 void gemv_r1_rest_avx512(const LinearArgs& a, std::int64_t p, int rem) {
  if constexpr (S >= 1) {
    if (rem == S)
      gemv_panels_avx512_r1<F, S>(a, p);
    else
      gemv_r1_rest_avx512<F, S - 1>(a, p, rem);
  }
}

template <WeightFormat F>
TPULLM_TARGET_AVX512 void gemv_avx512(const LinearArgs& a, std::int64_t pa, std::int64_t pb) {
  if constexpr (!is_quantized(F)) { // f32 / bf16 / f16: K-interleaved streams per panel
    gemv_float_avx512<F>(a, pa, pb);
    return;
  }
  if (a.M == 1) {
    constexpr int S = kGemvStreams;
    std::int64_t p = pa;
    for (; p + S <= pb; p += S)
      gemv_panels_avx512_r1<F, S>(a, p);
    if (p < pb)
      gemv_r1_rest_avx512<F, S - 1>(a, p, static_cast<int>(pb - p));
    return;
  }
  for (std::int64_t p = pa; p < pb; ++p) {
    std::int64_t m = 0;
    for (; m + 4 <= a.M; m += 4)
      gemv_panel_avx512<F, 4>(a, m, p);
    switch (a.M - m) {
    case 3:
      gemv_panel_avx512<F, 3>(a, m, p);
      break;
    case 2:
      gemv_panel_avx512<F, 2>(a, m, p);
      break;
    case 1:
      gemv_panel_avx512<F, 1>(a, m, p);
      break;
    }
  }
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
