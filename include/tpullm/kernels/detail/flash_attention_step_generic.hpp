#pragma once
/// One online-softmax tile step of the attention, generic code (portable and AVX2 builds).

#include "tpullm/kernels/detail/flash_attention_tile.hpp"
#include "tpullm/kernels/detail/portable_simd.hpp"

namespace tpullm::kernels::detail {

TPULLM_ALWAYS_INLINE void fa_step_generic(FaTile& t, const FaKeys& kk) {
  const std::int64_t br = t.br, d = t.d, nc = kk.ncols;
  // S^T[j, i] = sum_k K[j, k] * Q^T[k, i]
  for (std::int64_t j = 0; j < nc; ++j) {
    float* sj = t.s + j * br;
    for (std::int64_t i = 0; i < br; ++i)
      sj[i] = 0.f;
    const float* kr = kk.k + j * kk.stride;
    for (std::int64_t c = 0; c < d; ++c) {
      const float kv = kr[c];
      const float* q = t.qt + c * br;
      for (std::int64_t i = 0; i < br; ++i)
        sj[i] += kv * q[i];
    }
    if (kk.masked)
      for (std::int64_t i = 0; i < br; ++i)
        sj[i] = kk.j0 + j <= t.pos[i] && kk.j0 + j >= t.lo[i] ? sj[i] : -__builtin_inff();
  }
  // online softmax, one lane per row
  float mt[64];
  for (std::int64_t i = 0; i < br; ++i)
    mt[i] = t.m[i];
  for (std::int64_t j = 0; j < nc; ++j)
    for (std::int64_t i = 0; i < br; ++i)
      mt[i] = t.s[j * br + i] > mt[i] ? t.s[j * br + i] : mt[i];
  float sum[64];
  for (std::int64_t i = 0; i < br; ++i) {
    mt[i] = mt[i] == -__builtin_inff() ? 0.f : mt[i];
    t.alpha[i] = exp2_approx(t.m[i] - mt[i]);
    t.m[i] = mt[i];
    sum[i] = 0.f;
  }
  for (std::int64_t j = 0; j < nc; ++j)
    for (std::int64_t i = 0; i < br; ++i) {
      const float p = exp2_approx(t.s[j * br + i] - mt[i]);
      t.s[j * br + i] = p;
      sum[i] += p;
    }
  for (std::int64_t i = 0; i < br; ++i)
    t.l[i] = t.l[i] * t.alpha[i] + sum[i];
  // O = O * alpha + P V
  for (std::int64_t i = 0; i < t.nrows; ++i) {
    float* o = t.o + i * d;
    const float a = t.alpha[i];
    for (std::int64_t c = 0; c < d; ++c)
      o[c] *= a;
    for (std::int64_t j = 0; j < nc; ++j) {
      const float p = t.s[j * br + i];
      const float* vr = kk.v + j * kk.stride;
      for (std::int64_t c = 0; c < d; ++c)
        o[c] += p * vr[c];
    }
  }
}

TPULLM_TARGET_AVX2 inline void fa_step_avx2(FaTile& t, const FaKeys& kk) {
  fa_step_generic(t, kk);
}

/// The same step on the portable path's xsimd vectors: scores and the softmax vectorized over
/// the tile's query rows (br is a multiple of 16), P V over d.
inline void fa_step_portable(FaTile& t, const FaKeys& kk) {
  const std::int64_t br = t.br, d = t.d, nc = kk.ncols;
  constexpr std::int64_t IB = 4 * kPW; // rows per register block of the scores
  for (std::int64_t j = 0; j < nc; ++j) {
    float* sj = t.s + j * br;
    const float* kr = kk.k + j * kk.stride;
    for (std::int64_t i0 = 0; i0 < br; i0 += IB) {
      PVec acc[4] = {PVec(0.f), PVec(0.f), PVec(0.f), PVec(0.f)};
      const std::int64_t nv = std::min<std::int64_t>(4, (br - i0) / kPW);
      for (std::int64_t c = 0; c < d; ++c) {
        const PVec kv(kr[c]);
        const float* q = t.qt + c * br + i0;
        for (std::int64_t v = 0; v < nv; ++v)
          acc[v] = pv_fma(kv, pv_load(q + v * kPW), acc[v]);
      }
      for (std::int64_t v = 0; v < nv; ++v)
        pv_store(sj + i0 + v * kPW, acc[v]);
    }
    if (kk.masked)
      for (std::int64_t i = 0; i < br; ++i)
        sj[i] = kk.j0 + j <= t.pos[i] && kk.j0 + j >= t.lo[i] ? sj[i] : -__builtin_inff();
  }
  // online softmax, vectorized over rows
  for (std::int64_t i0 = 0; i0 < br; i0 += kPW) {
    PVec mx = pv_load(t.m + i0);
    for (std::int64_t j = 0; j < nc; ++j)
      mx = pv_max(mx, pv_load(t.s + j * br + i0));
    float mt[kPW];
    pv_store(mt, mx);
    for (std::int64_t l = 0; l < kPW; ++l)
      mt[l] = mt[l] == -__builtin_inff() ? 0.f : mt[l];
    mx = pv_load(mt);
    const PVec mold = pv_load(t.m + i0);
    const PVec alpha = pv_exp2(mold - mx);
    pv_store(t.alpha + i0, alpha);
    pv_store(t.m + i0, mx);
    PVec sum(0.f);
    for (std::int64_t j = 0; j < nc; ++j) {
      const PVec pj = pv_exp2(pv_load(t.s + j * br + i0) - mx);
      pv_store(t.s + j * br + i0, pj);
      sum = sum + pj;
    }
    pv_store(t.l + i0, pv_fma(pv_load(t.l + i0), alpha, sum));
  }
  // O = O * alpha + P V, vectorized over d
  const std::int64_t dv = d / kPW * kPW;
  for (std::int64_t i = 0; i < t.nrows; ++i) {
    float* o = t.o + i * d;
    const PVec a(t.alpha[i]);
    for (std::int64_t c = 0; c < dv; c += kPW)
      pv_store(o + c, pv_load(o + c) * a);
    for (std::int64_t c = dv; c < d; ++c)
      o[c] *= t.alpha[i];
    for (std::int64_t j = 0; j < nc; ++j) {
      const float pj = t.s[j * br + i];
      const PVec p(pj);
      const float* vr = kk.v + j * kk.stride;
      for (std::int64_t c = 0; c < dv; c += kPW)
        pv_store(o + c, pv_fma(p, pv_load(vr + c), pv_load(o + c)));
      for (std::int64_t c = dv; c < d; ++c)
        o[c] += pj * vr[c];
    }
  }
}

} // namespace tpullm::kernels::detail
