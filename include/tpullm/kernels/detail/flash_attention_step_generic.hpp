#pragma once
/// One online-softmax tile step of the attention, generic code (portable and AVX2 builds).

#include "tpullm/kernels/detail/flash_attention_tile.hpp"

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
        sj[i] = kk.j0 + j <= t.pos[i] ? sj[i] : -__builtin_inff();
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
inline void fa_step_portable(FaTile& t, const FaKeys& kk) {
  fa_step_generic(t, kk);
}

} // namespace tpullm::kernels::detail
