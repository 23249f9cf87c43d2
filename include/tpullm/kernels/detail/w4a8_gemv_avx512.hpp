#pragma once
/// EXPERIMENT (issue 17), not used by kernels::linear: a W4A8 GEMV for one row of x. x is
/// quantized once per row to int8 (dynamic, as linear_w8a8's dynamic_row: q = round(x * 127 /
/// max|x|), s_x = max|x| / 127) and each weight group's nibbles u (int4_sym: z = 8; int4_asym:
/// the group's zero) are multiplied by q with one VPDPBUSD per 64 weight bytes and nibble half,
/// a third of the digit path's three VPDPBUSD (detail/matmul_gemv_vnni.hpp):
///   y[n] = s_x * sum_g scale_g[n] * (sum_{k in g} q[k] u[k][n] - z_g[n] * sum_{k in g} q[k])
///          + bias[n]
/// The group sums are exact int32; the loss against the exact f32 int4 product is the
/// activation rounding (|x - s_x q| <= s_x / 2 per element), far above the 1e-5-level bounds the
/// int4 tests demand of the default path, so this must not replace it silently.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/detail/int8_quantize.hpp"
#include "tpullm/kernels/detail/matmul_common.hpp"
#include "tpullm/support/error.hpp"
#if TPULLM_X86
#include "tpullm/kernels/detail/matmul_avx512_common.hpp"
#include "tpullm/kernels/detail/matmul_gemv_vnni.hpp"
#endif

namespace tpullm::kernels::detail {

/// x of one row for the W4A8 GEMV: signed codes q [Kp] and per-group sums of q.
struct W4A8Row {
  std::vector<std::int8_t> q;   ///< [Kp] (zero padded)
  std::vector<std::int32_t> Sq; ///< [G] sum of q over each weight group
  float sx = 0.0f;              ///< s_x
};

/// Quantizes x [K] for weights `w` (int4, natural row order) into r.
inline void w4a8_prepare(const float* x, const PackedWeights& w, W4A8Row& r) {
  QuantRows qr;
  QuantParams p;
  quantize_rows(x, w.K, 1, w.K, w.stored_rows(), p, active_isa(), qr);
  const std::int64_t Kp = w.stored_rows(), seg = w.group_rows(), G = (Kp + seg - 1) / seg;
  r.q.resize(static_cast<std::size_t>(Kp));
  r.Sq.assign(static_cast<std::size_t>(G), 0);
  for (std::int64_t k = 0; k < Kp; ++k) {
    r.q[static_cast<std::size_t>(k)] = static_cast<std::int8_t>(static_cast<int>(qr.code[k]) - 128);
    r.Sq[static_cast<std::size_t>(k / seg)] += r.q[static_cast<std::size_t>(k)];
  }
  r.sx = qr.scale[0];
}

/// Scalar reference of the formula above (double accumulation over groups): y [N].
inline void w4a8_gemv_ref(const W4A8Row& r, const PackedWeights& w, const float* bias, float* y) {
  const std::int64_t seg = w.group_rows();
  for (std::int64_t n = 0; n < w.N; ++n) {
    double acc = 0;
    for (std::int64_t g = 0; g * seg < w.stored_rows(); ++g) {
      std::int64_t dp = 0;
      for (std::int64_t k = g * seg; k < std::min(w.stored_rows(), (g + 1) * seg); ++k)
        dp += std::int64_t{r.q[static_cast<std::size_t>(k)]} * get_nibble(w, k, n);
      const std::int64_t i = ((n / kPanelCols) * w.groups() + g) * kPanelCols + n % kPanelCols;
      const double z = w.format == WeightFormat::int4_asym ? w.zeros[i] : 8.0;
      acc += double(w.scale_of(n / kPanelCols, g, n % kPanelCols)) *
             (double(dp) - z * r.Sq[static_cast<std::size_t>(g)]);
    }
    y[n] = static_cast<float>(acc * r.sx + (bias ? bias[n] : 0.0));
  }
}

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// S panels from p at once: per group 2 accumulators per panel (column halves; low and high
/// nibble rows share them).
template <WeightFormat F, int S>
TPULLM_TARGET_AVX512_VNNI void w4a8_panels_avx512(const W4A8Row& r, const PackedWeights& w,
                                                  const float* bias, float* y, std::int64_t p) {
  const std::int64_t pbytes = w.panel_bytes(), seg = w.group_rows(), Kp = w.stored_rows();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 t[S][2];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s)
    t[s][0] = t[s][1] = _mm512_setzero_ps();
  std::int64_t g = 0;
  for (std::int64_t ks = 0; ks < Kp; ks += seg, ++g) {
    const std::int64_t ke = std::min(Kp, ks + seg);
    __m512i acc[S][2];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s)
      acc[s][0] = acc[s][1] = _mm512_setzero_si512();
    const std::uint8_t* row = panel_row(w, p, ks);
    for (std::int64_t k = ks; k < ke; k += 8, row += 128) {
      const __m512i bl = bcast4(r.q.data() + k), bh = bcast4(r.q.data() + k + 4);
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        const std::uint8_t* src = row + s * pbytes;
        _mm_prefetch(reinterpret_cast<const char*>(src) + kGemvPf, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(src) + kGemvPf + 64, _MM_HINT_T0);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m512i v = _mm512_load_si512(src + 64 * h);
          dpbusd(acc[s][h], _mm512_and_si512(v, m4), bl);
          dpbusd(acc[s][h], _mm512_and_si512(_mm512_srli_epi32(v, 4), m4), bh);
        }
      }
    }
    const __m512 sq = _mm512_set1_ps(static_cast<float>(r.Sq[static_cast<std::size_t>(g)]));
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      __m512 sc[2], z[2];
      group_scale_avx512(w, p + s, g, sc[0], sc[1]);
      if constexpr (F == WeightFormat::int4_sym)
        z[0] = z[1] = _mm512_set1_ps(8.0f);
      else
        group_zero_avx512<F>(w, p + s, g, z[0], z[1]);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
        t[s][h] = _mm512_fmadd_ps(sc[h], _mm512_fnmadd_ps(z[h], sq, _mm512_cvtepi32_ps(acc[s][h])),
                                  t[s][h]);
    }
  }
  const __m512 sx = _mm512_set1_ps(r.sx);
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    const std::int64_t c0 = (p + s) * kPanelCols;
    const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, w.N - c0));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int n = std::clamp(nc - 16 * h, 0, 16);
      const __mmask16 mk = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1u);
      __m512 v = _mm512_mul_ps(t[s][h], sx);
      if (bias)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, bias + c0 + 16 * h));
      _mm512_mask_storeu_ps(y + c0 + 16 * h, mk, v);
    }
  }
}

template <WeightFormat F>
void w4a8_range_avx512(const W4A8Row& r, const PackedWeights& w, const float* bias, float* y,
                       std::int64_t pa, std::int64_t pb) {
  std::int64_t p = pa;
  for (; p + 4 <= pb; p += 4)
    w4a8_panels_avx512<F, 4>(r, w, bias, y, p);
  for (; p < pb; ++p)
    w4a8_panels_avx512<F, 1>(r, w, bias, y, p);
}

#pragma GCC diagnostic pop
#endif

/// The experiment's entry: y [N] = W4A8(x [K]) · w + bias for int4_sym / int4_asym weights in
/// natural row order, panels split as `split` says. Needs AVX-512 VNNI; throws
/// Error(unsupported) elsewhere, Error(internal) for other formats (int4_min included: its f32 mins
/// are not part of this experiment's integer formula).
inline void w4a8_gemv_experimental(const float* x, const PackedWeights& w, const float* bias,
                                   float* y, const CoreSplit& split, W4A8Row& r) {
  if ((w.format != WeightFormat::int4_sym && w.format != WeightFormat::int4_asym) ||
      !w.k_perm.empty())
    throw_error(ErrorKind::internal, "",
                "w4a8_gemv_experimental: needs int4_sym or int4_asym weights in "
                "natural row order, got " +
                    std::string(format_name(w.format)));
  if (!(TPULLM_X86 && vector_isa(active_isa()) == Isa::avx512 && cpu_features().avx512_vnni))
    throw_error(ErrorKind::unsupported, "", "w4a8_gemv_experimental: needs AVX-512 VNNI");
  w4a8_prepare(x, w, r);
#if TPULLM_X86
  parallel_for(split, w.panels(), 4, [&](std::int64_t b, std::int64_t e) {
    if (w.format == WeightFormat::int4_sym)
      w4a8_range_avx512<WeightFormat::int4_sym>(r, w, bias, y, b, e);
    else
      w4a8_range_avx512<WeightFormat::int4_asym>(r, w, bias, y, b, e);
  });
#else
  (void)bias;
  (void)y;
  (void)split;
#endif
}

} // namespace tpullm::kernels::detail
