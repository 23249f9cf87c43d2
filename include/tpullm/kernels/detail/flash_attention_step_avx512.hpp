#pragma once
/// One online-softmax tile step of the attention on AVX-512: register-blocked Q K^T and P V
/// micro-kernels.

#include "tpullm/kernels/detail/flash_attention_tile.hpp"

namespace tpullm::kernels::detail {

TPULLM_AVX512_BEGIN

/// R keys x C vectors (16 rows each) of S^T, accumulated over d in registers.
template <int R, int C>
TPULLM_TARGET_AVX512 inline void fa_qk_block(const float* qt, std::int64_t br, const float* k,
                                             std::int64_t stride, std::int64_t d, float* s) {
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      acc[r][c] = _mm512_setzero_ps();
  for (std::int64_t x = 0; x < d; ++x) {
    __m512 q[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      q[c] = _mm512_loadu_ps(qt + x * br + 16 * c);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 kb = _mm512_set1_ps(k[r * stride + x]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c)
        acc[r][c] = _mm512_fmadd_ps(kb, q[c], acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      _mm512_storeu_ps(s + r * br + 16 * c, acc[r][c]);
}

template <int C, int R>
TPULLM_TARGET_AVX512 inline void fa_qk_rem(int rem, const float* qt, std::int64_t br,
                                           const float* k, std::int64_t stride, std::int64_t d,
                                           float* s) {
  if constexpr (R >= 1) {
    if (rem == R)
      fa_qk_block<R, C>(qt, br, k, stride, d, s);
    else
      fa_qk_rem<C, R - 1>(rem, qt, br, k, stride, d, s);
  }
}

/// RR rows x DC vectors of O (columns [c0, c0 + 16*DC), last vector masked by `tail`).
template <int RR, int DC>
TPULLM_TARGET_AVX512 inline void fa_pv_block(const float* p, std::int64_t br, std::int64_t i0,
                                             std::int64_t nc, const float* v, std::int64_t stride,
                                             float* o, std::int64_t d, std::int64_t c0,
                                             __mmask16 tail, const float* alpha) {
  __m512 acc[RR][DC];
#pragma GCC unroll 16
  for (int r = 0; r < RR; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[i0 + r]);
#pragma GCC unroll 4
    for (int c = 0; c < DC; ++c) {
      const float* src = o + (i0 + r) * d + c0 + 16 * c;
      const __m512 ov = c == DC - 1 ? _mm512_maskz_loadu_ps(tail, src) : _mm512_loadu_ps(src);
      acc[r][c] = _mm512_mul_ps(ov, a);
    }
  }
  for (std::int64_t j = 0; j < nc; ++j) {
    __m512 vv[DC];
#pragma GCC unroll 4
    for (int c = 0; c < DC; ++c) {
      const float* src = v + j * stride + c0 + 16 * c;
      vv[c] = c == DC - 1 ? _mm512_maskz_loadu_ps(tail, src) : _mm512_loadu_ps(src);
    }
    const float* pj = p + j * br + i0;
#pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) {
      const __m512 pb = _mm512_set1_ps(pj[r]);
#pragma GCC unroll 4
      for (int c = 0; c < DC; ++c)
        acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < DC; ++c) {
      float* dst = o + (i0 + r) * d + c0 + 16 * c;
      if (c == DC - 1)
        _mm512_mask_storeu_ps(dst, tail, acc[r][c]);
      else
        _mm512_storeu_ps(dst, acc[r][c]);
    }
}

template <int DC, int RR>
TPULLM_TARGET_AVX512 inline void fa_pv_rem(int rem, const float* p, std::int64_t br,
                                           std::int64_t i0, std::int64_t nc, const float* v,
                                           std::int64_t stride, float* o, std::int64_t d,
                                           std::int64_t c0, __mmask16 tail, const float* alpha) {
  if constexpr (RR >= 1) {
    if (rem == RR)
      fa_pv_block<RR, DC>(p, br, i0, nc, v, stride, o, d, c0, tail, alpha);
    else
      fa_pv_rem<DC, RR - 1>(rem, p, br, i0, nc, v, stride, o, d, c0, tail, alpha);
  }
}

template <int DC>
TPULLM_TARGET_AVX512 inline void fa_pv_chunk(const FaTile& t, const FaKeys& kk, std::int64_t c0,
                                             __mmask16 tail) {
  constexpr int RM = DC >= 4 ? 6 : DC == 3 ? 7 : 12;
  std::int64_t i = 0;
  for (; i + RM <= t.nrows; i += RM)
    fa_pv_block<RM, DC>(t.s, t.br, i, kk.ncols, kk.v, kk.stride, t.o, t.d, c0, tail, t.alpha);
  if (i < t.nrows)
    fa_pv_rem<DC, RM - 1>(static_cast<int>(t.nrows - i), t.s, t.br, i, kk.ncols, kk.v, kk.stride,
                          t.o, t.d, c0, tail, t.alpha);
}

template <int C>
TPULLM_TARGET_AVX512 inline void fa_step_avx512_c(FaTile& t, const FaKeys& kk) {
  constexpr int R = C == 4 ? 6 : C == 3 ? 7 : C == 2 ? 11 : 14;
  const std::int64_t br = t.br, d = t.d, nc = kk.ncols;
  // scores S^T = K Q^T
  std::int64_t j = 0;
  for (; j + R <= nc; j += R)
    fa_qk_block<R, C>(t.qt, br, kk.k + j * kk.stride, kk.stride, d, t.s + j * br);
  if (j < nc)
    fa_qk_rem<C, R - 1>(static_cast<int>(nc - j), t.qt, br, kk.k + j * kk.stride, kk.stride, d,
                        t.s + j * br);
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  // causal mask + tile max, per 16-row vector
  __m512 mnew[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    __m512 mx = _mm512_loadu_ps(t.m + 16 * c);
    const __m512i pv = _mm512_loadu_si512(t.pos + 16 * c);
    const __m512i lov = _mm512_loadu_si512(t.lo + 16 * c);
    for (std::int64_t jj = 0; jj < nc; ++jj) {
      float* sp = t.s + jj * br + 16 * c;
      __m512 sv = _mm512_loadu_ps(sp);
      if (kk.masked) {
        const __m512i jv = _mm512_set1_epi32(static_cast<int>(kk.j0 + jj));
        const __mmask16 vis = _mm512_mask_cmp_epi32_mask(
            _mm512_cmp_epi32_mask(jv, pv, _MM_CMPINT_LE), lov, jv, _MM_CMPINT_LE);
        sv = _mm512_mask_blend_ps(vis, ninf, sv);
        _mm512_storeu_ps(sp, sv);
      }
      mx = _mm512_max_ps(mx, sv);
    }
    // rows that have seen no visible key yet keep a finite reference point
    mx = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ), mx, _mm512_setzero_ps());
    const __m512 mold = _mm512_loadu_ps(t.m + 16 * c);
    _mm512_storeu_ps(t.alpha + 16 * c, exp2_avx512(_mm512_sub_ps(mold, mx)));
    _mm512_storeu_ps(t.m + 16 * c, mx);
    mnew[c] = mx;
  }
  // probabilities and denominators
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    std::int64_t jj = 0;
    for (; jj + 2 <= nc; jj += 2) {
      float* s0 = t.s + jj * br + 16 * c;
      float* s1 = s0 + br;
      const __m512 p0 = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(s0), mnew[c]));
      const __m512 p1 = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(s1), mnew[c]));
      _mm512_storeu_ps(s0, p0);
      _mm512_storeu_ps(s1, p1);
      sum0 = _mm512_add_ps(sum0, p0);
      sum1 = _mm512_add_ps(sum1, p1);
    }
    if (jj < nc) {
      float* s0 = t.s + jj * br + 16 * c;
      const __m512 p0 = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(s0), mnew[c]));
      _mm512_storeu_ps(s0, p0);
      sum0 = _mm512_add_ps(sum0, p0);
    }
    const __m512 lv = _mm512_loadu_ps(t.l + 16 * c);
    _mm512_storeu_ps(t.l + 16 * c, _mm512_fmadd_ps(lv, _mm512_loadu_ps(t.alpha + 16 * c),
                                                   _mm512_add_ps(sum0, sum1)));
  }
  // O = O * alpha + P V over d in chunks of 64 columns
  for (std::int64_t c0 = 0; c0 < d; c0 += 64) {
    const std::int64_t w = std::min<std::int64_t>(64, d - c0);
    const int nv = static_cast<int>((w + 15) / 16);
    const int last = static_cast<int>(w - 16 * (nv - 1));
    const __mmask16 tail = static_cast<__mmask16>(last == 16 ? 0xFFFF : (1u << last) - 1u);
    switch (nv) {
    case 4:
      fa_pv_chunk<4>(t, kk, c0, tail);
      break;
    case 3:
      fa_pv_chunk<3>(t, kk, c0, tail);
      break;
    case 2:
      fa_pv_chunk<2>(t, kk, c0, tail);
      break;
    default:
      fa_pv_chunk<1>(t, kk, c0, tail);
      break;
    }
  }
}

TPULLM_TARGET_AVX512 inline void fa_step_avx512(FaTile& t, const FaKeys& kk) {
  switch (t.br / 16) {
  case 4:
    fa_step_avx512_c<4>(t, kk);
    return;
  case 3:
    fa_step_avx512_c<3>(t, kk);
    return;
  case 2:
    fa_step_avx512_c<2>(t, kk);
    return;
  default:
    fa_step_avx512_c<1>(t, kk);
    return;
  }
}

TPULLM_AVX512_END

} // namespace tpullm::kernels::detail
