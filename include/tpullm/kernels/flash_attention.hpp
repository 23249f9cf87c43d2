#pragma once
/// Tiled causal attention with an online softmax (FlashAttention-2 style) for prefill,
/// prefill-with-history and decode.
///
/// Layouts (row-major): q, out: [L, q_heads, d]; k, v: [S, kv_heads, d] (a KV cache; slot j
/// holds position j); position_ids: [L] int32. GQA/MQA without expanding k/v: q head h reads kv
/// head h / (q_heads / kv_heads).
/// Causal rule: key slot j is visible to query i iff j <= position_ids[i] (and j < S_valid).
/// Only query rows [0, L_valid) are computed and written (rows past it are left untouched);
/// only key slots [0, S_valid) are read.
///
/// Work layout: for one kv head the G = q_heads / kv_heads query heads of every token form the
/// rows of one [L_valid * G, d] matrix (row r = token r / G, head kvh * G + r % G), so K and V
/// tiles are read once for the whole group. Rows are cut into q tiles of Br rows (a multiple of
/// 16) and keys into tiles of Bc; the scores tile is computed transposed, S^T [Bc, Br] =
/// K_tile Q_tile^T, so the softmax reductions over keys are vertical (one vector lane per query
/// row) and the causal mask is built per tile from the tile's positions (never an [L, S] mask).
/// Fully visible tiles skip masking; tiles past a q tile's last position are never visited.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"

namespace tpullm::kernels {

/// Problem shape of one attention call.
struct AttentionShape {
  std::int64_t L = 0;        ///< query rows in q/out
  std::int64_t L_valid = 0;  ///< rows [0, L_valid) are computed; the rest are don't-care
  std::int64_t S = 0;        ///< key slots in k/v (cache capacity)
  std::int64_t S_valid = 0;  ///< keys [0, S_valid) may be read; the rest never are
  std::int64_t q_heads = 0;  ///< query heads (a multiple of kv_heads)
  std::int64_t kv_heads = 0; ///< key/value heads
  std::int64_t head_dim = 0; ///< d
  float scale = 0.f;         ///< softmax scale, usually 1/sqrt(d)
  bool causal = true;        ///< apply the position rule (false: every valid key is visible)
};

/// Tile sizes of one call: Br query rows (of the grouped [L*G, d] matrix) x Bc keys.
struct AttentionTiles {
  std::int64_t q_rows = 64;  ///< Br, multiple of 16, <= 64
  std::int64_t k_cols = 128; ///< Bc, multiple of 16

  /// Local-memory bytes one core touches per tile step: Q^T tile, O accumulator, scores tile,
  /// K and V tiles (+ f32 copies of K/V tiles when the cache is 16-bit).
  static std::size_t bytes(std::int64_t br, std::int64_t bc, std::int64_t d, bool kv16) {
    const std::int64_t floats = 2 * br * d + br * bc + 2 * bc * d + (kv16 ? 2 * bc * d : 0);
    return static_cast<std::size_t>(floats) * sizeof(float) +
           static_cast<std::size_t>(5 * br) * sizeof(float);
  }
};

/// Largest tiles (Br <= 64 and <= rows rounded up to 16; Bc <= 128) whose working set fits
/// `local_memory_bytes`; throws std::invalid_argument when even 16 x 16 does not fit.
inline AttentionTiles choose_attention_tiles(std::int64_t rows, std::int64_t head_dim,
                                             std::size_t local_memory_bytes, bool kv16 = false) {
  const std::int64_t max_br = std::clamp<std::int64_t>((rows + 15) / 16 * 16, 16, 64);
  for (std::int64_t br = max_br; br >= 16; br -= 16)
    for (std::int64_t bc : {128, 64, 32, 16})
      if (AttentionTiles::bytes(br, bc, head_dim, kv16) <= local_memory_bytes)
        return {br, bc};
  throw std::invalid_argument("flash_attention: local memory budget of " +
                              std::to_string(local_memory_bytes) +
                              " bytes is below the smallest 16x16 tile (" +
                              std::to_string(AttentionTiles::bytes(16, 16, head_dim, kv16)) +
                              " bytes for head_dim " + std::to_string(head_dim) + ")");
}

namespace detail {

/// Per-q-tile state and scratch (all f32, 64-byte aligned pieces of one thread-local buffer).
struct FaTile {
  std::int64_t br = 0, bc = 0, d = 0;
  std::int64_t nrows = 0;      ///< valid rows in this tile (<= br)
  float* qt = nullptr;         ///< [d, br] Q^T, pre-scaled by scale * log2(e), pad rows 0
  float* o = nullptr;          ///< [br, d] unnormalized output accumulator
  float* s = nullptr;          ///< [bc, br] scores, then probabilities
  float* m = nullptr;          ///< [br] running max (log2 domain)
  float* l = nullptr;          ///< [br] running denominator
  float* alpha = nullptr;      ///< [br] rescale factor of the current key tile
  std::int32_t* pos = nullptr; ///< [br] query positions (INT32_MAX for pad rows)
  float* kbuf = nullptr;       ///< [bc, d] f32 copy of a 16-bit K tile
  float* vbuf = nullptr;       ///< [bc, d] f32 copy of a 16-bit V tile
};

/// One key tile: keys [j0, j0 + ncols), rows at k/v with `stride` floats between keys.
struct FaKeys {
  const float* k = nullptr;
  const float* v = nullptr;
  std::int64_t stride = 0;
  std::int64_t j0 = 0;
  std::int64_t ncols = 0;
  bool masked = false; ///< some key may be invisible to some row: apply the causal rule
};

// ---- generic path (portable, and compiled for AVX2) ------------------------------------------

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

// ---- AVX-512 path -----------------------------------------------------------------------------

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
    for (std::int64_t jj = 0; jj < nc; ++jj) {
      float* sp = t.s + jj * br + 16 * c;
      __m512 sv = _mm512_loadu_ps(sp);
      if (kk.masked) {
        const __mmask16 vis = _mm512_cmp_epi32_mask(_mm512_set1_epi32(static_cast<int>(kk.j0 + jj)),
                                                    pv, _MM_CMPINT_LE);
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

// ---- driver -----------------------------------------------------------------------------------

inline void fa_check(const AttentionShape& s, std::size_t q, std::size_t k, std::size_t v,
                     std::size_t pos, std::size_t out) {
  auto str = [](std::int64_t x) { return std::to_string(x); };
  if (s.L < 0 || s.S < 0 || s.q_heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0)
    throw std::invalid_argument("flash_attention: bad shape L=" + str(s.L) + " S=" + str(s.S) +
                                " q_heads=" + str(s.q_heads) + " kv_heads=" + str(s.kv_heads) +
                                " d=" + str(s.head_dim));
  if (s.q_heads % s.kv_heads != 0)
    throw std::invalid_argument("flash_attention: q_heads " + str(s.q_heads) +
                                " is not a multiple of kv_heads " + str(s.kv_heads));
  if (s.L_valid < 0 || s.L_valid > s.L)
    throw std::invalid_argument("flash_attention: L_valid " + str(s.L_valid) +
                                " outside [0, L=" + str(s.L) + "]");
  if (s.S_valid < 0 || s.S_valid > s.S)
    throw std::invalid_argument("flash_attention: S_valid " + str(s.S_valid) +
                                " outside [0, S=" + str(s.S) + "]");
  if (s.L_valid > 0 && s.S_valid == 0)
    throw std::invalid_argument("flash_attention: " + str(s.L_valid) +
                                " query rows but no valid key (S_valid = 0)");
  const auto qn = static_cast<std::size_t>(s.L * s.q_heads * s.head_dim);
  const auto kn = static_cast<std::size_t>(s.S * s.kv_heads * s.head_dim);
  if (q < qn || out < qn)
    throw std::invalid_argument("flash_attention: q (" + std::to_string(q) + ") or out (" +
                                std::to_string(out) +
                                ") smaller than L*q_heads*d = " + std::to_string(qn));
  if (k < kn || v < kn)
    throw std::invalid_argument("flash_attention: k (" + std::to_string(k) + ") or v (" +
                                std::to_string(v) +
                                ") smaller than S*kv_heads*d = " + std::to_string(kn));
  if (s.causal && pos < static_cast<std::size_t>(s.L_valid))
    throw std::invalid_argument("flash_attention: " + std::to_string(pos) +
                                " position ids for L_valid = " + str(s.L_valid) + " rows");
}

/// Thread-local scratch, grown on demand and reused across calls (no allocation in decode).
inline float* fa_scratch(std::size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats + 16)
    buf.resize(floats + 16);
  auto addr = reinterpret_cast<std::uintptr_t>(buf.data());
  return reinterpret_cast<float*>((addr + 63) & ~std::uintptr_t{63});
}

/// Q^T [d, br] from br row pointers (nullptr = pad row of zeros), scaled.
inline void fa_pack_qt_generic(const float* const* rows, std::int64_t br, std::int64_t d,
                               float scale, float* qt) {
  for (std::int64_t i = 0; i < br; ++i)
    for (std::int64_t x = 0; x < d; ++x)
      qt[x * br + i] = rows[i] ? rows[i][x] * scale : 0.f;
}

TPULLM_AVX512_BEGIN
/// Same as fa_pack_qt_generic, 16 x 16 blocks transposed in registers.
TPULLM_TARGET_AVX512 inline void fa_pack_qt_avx512(const float* const* rows, std::int64_t br,
                                                   std::int64_t d, float scale, float* qt) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (std::int64_t i0 = 0; i0 < br; i0 += 16)
    for (std::int64_t x0 = 0; x0 < d; x0 += 16) {
      const std::int64_t w = std::min<std::int64_t>(16, d - x0);
      const __mmask16 m = static_cast<__mmask16>(w == 16 ? 0xFFFF : (1u << w) - 1u);
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = rows[i0 + i] ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m, rows[i0 + i] + x0), sc)
                            : _mm512_setzero_ps();
      // 16x16 transpose: 32-bit, 64-bit, 128-bit, 256-bit interleave stages
      __m512 t[16];
      for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 16; i += 4)
        for (int j = 0; j < 2; ++j) {
          r[i + j] = _mm512_castpd_ps(
              _mm512_unpacklo_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
          r[i + j + 2] = _mm512_castpd_ps(
              _mm512_unpackhi_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
        }
      for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; ++j) {
          t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
          t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xDD);
        }
      for (int j = 0; j < 8; ++j) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
      }
      // r[k] now holds column x0 + perm(k) of the 16 rows
      static constexpr int kCol[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
      for (int k = 0; k < 16; ++k) {
        const int col = kCol[k];
        if (col < w)
          _mm512_storeu_ps(qt + (x0 + col) * br + i0, r[k]);
      }
    }
}
TPULLM_AVX512_END

/// How one call is cut into work items: tile sizes, and how many kv heads and q tiles one item
/// carries. Tiles of one item share each K/V key tile, so it is read (and copied) once for them.
struct FaPlan {
  AttentionTiles tiles;
  std::int64_t heads_per_item = 1;  ///< kv heads per item (decode: one stream over all heads)
  std::int64_t qtiles_per_item = 1; ///< q tiles per item (prefill: amortizes the K/V tile)
  std::int64_t q_tiles = 1;         ///< q tiles per kv head
};

/// Bytes of one q tile's private state (Q^T, O, row state) and of one head's K/V tile copies.
inline std::size_t fa_tile_bytes(std::int64_t br, std::int64_t d) {
  return static_cast<std::size_t>(2 * br * d + 5 * br) * sizeof(float);
}
inline std::size_t fa_kv_bytes(std::int64_t bc, std::int64_t d) {
  return static_cast<std::size_t>(2 * bc * d) * sizeof(float);
}

inline FaPlan fa_plan(const AttentionShape& s, std::int64_t parts, std::size_t budget, bool kv16) {
  const std::int64_t M = s.L_valid * (s.q_heads / s.kv_heads);
  FaPlan p;
  p.tiles = choose_attention_tiles(M, s.head_dim, budget, kv16);
  p.q_tiles = (M + p.tiles.q_rows - 1) / p.tiles.q_rows;
  const std::int64_t br = p.tiles.q_rows, d = s.head_dim;
  auto need = [&](std::int64_t heads, std::int64_t qts, std::int64_t bc) {
    return static_cast<std::size_t>(heads * qts) * fa_tile_bytes(br, d) +
           static_cast<std::size_t>(heads) * fa_kv_bytes(bc, d) +
           static_cast<std::size_t>(br * bc) * sizeof(float);
  };
  parts = std::max<std::int64_t>(parts, 1);
  if (p.q_tiles > 1) {
    // several q tiles of one head per item, keeping >= 2 items per core for balance
    const std::int64_t want = std::clamp<std::int64_t>(p.q_tiles * s.kv_heads / (2 * parts), 1, 4);
    for (std::int64_t n = std::min(want, p.q_tiles); n > 1; --n)
      if (need(1, n, p.tiles.k_cols) <= budget) {
        p.qtiles_per_item = n;
        break;
      }
    return p;
  }
  if (s.kv_heads == 1)
    return p;
  // one q tile per head (decode, short prefill): several kv heads per item so a key tile's
  // rows for all of them are read as one contiguous stream
  const std::int64_t want = (s.kv_heads + parts - 1) / parts;
  for (std::int64_t bc : {128, 64, 32})
    if (need(want, 1, bc) <= budget) {
      p.tiles.k_cols = std::min(p.tiles.k_cols, bc);
      p.heads_per_item = want;
      return p;
    }
  p.tiles.k_cols = std::min<std::int64_t>(p.tiles.k_cols, 32);
  const std::size_t per = fa_tile_bytes(br, d) + fa_kv_bytes(32, d);
  p.heads_per_item = std::clamp<std::int64_t>(static_cast<std::int64_t>(budget / per), 1, want);
  return p;
}

/// One work item: kv heads [hb, hb + nh) x q tiles [qb, qb + nq) (tiles of Br grouped rows).
template <class KV>
void fa_item(const float* q, const KV* k, const KV* v, const std::int32_t* pos_ids, float* out,
             const AttentionShape& s, const AttentionTiles& tiles, std::int64_t hb, std::int64_t nh,
             std::int64_t qb, std::int64_t nq, Isa isa) {
  const std::int64_t d = s.head_dim, G = s.q_heads / s.kv_heads;
  const std::int64_t M = s.L_valid * G;
  const std::int64_t br = tiles.q_rows, bc = tiles.k_cols;
  constexpr bool kv16 = !std::is_same_v<KV, float>;
  // copy K/V tiles into contiguous f32 buffers when the cache is 16-bit, when several heads
  // are read as one stream, or when rows are >= 2 KiB apart (L1 set conflicts, a TLB entry per
  // row); otherwise the tiles are read in place
  const bool copy =
      kv16 || nh > 1 || s.kv_heads * d * static_cast<std::int64_t>(sizeof(float)) >= 2048;
  auto round16 = [](std::int64_t n) { return (n + 15) / 16 * 16; };
  const std::int64_t per_tile = round16(d * br) + round16(br * d) + 4 * 64;
  const std::int64_t per_head = copy ? 2 * round16(bc * d) : 0;
  const std::int64_t shared = round16(bc * br);
  constexpr std::int64_t kMaxTiles = 64;
  const std::int64_t nt = nh * nq;
  float* base = fa_scratch(static_cast<std::size_t>(shared + nh * per_head + nt * per_tile));
  const float qscale = s.scale * 1.4426950408889634f;

  FaTile tl[kMaxTiles];
  std::int32_t tmin[kMaxTiles], tmax[kMaxTiles];
  std::int64_t tend[kMaxTiles];
  std::int64_t kend_all = 0;
  for (std::int64_t hh = 0; hh < nh; ++hh)
    for (std::int64_t qq = 0; qq < nq; ++qq) {
      const std::int64_t ti = hh * nq + qq, r0 = (qb + qq) * br, kvh = hb + hh;
      FaTile& t = tl[ti];
      float* tb = base + shared + nh * per_head + ti * per_tile;
      t.br = br;
      t.bc = bc;
      t.d = d;
      t.nrows = std::min(br, M - r0);
      t.qt = tb;
      t.o = t.qt + round16(d * br);
      t.m = t.o + round16(br * d);
      t.l = t.m + 64;
      t.alpha = t.l + 64;
      t.pos = reinterpret_cast<std::int32_t*>(t.alpha + 64);
      t.s = base;
      t.kbuf = base + shared + hh * per_head;
      t.vbuf = t.kbuf + round16(bc * d);
      std::int32_t mn = INT32_MAX, mx = INT32_MIN;
      const float* rows[64];
      for (std::int64_t i = 0; i < br; ++i) {
        const std::int64_t r = r0 + i;
        if (i < t.nrows) {
          const std::int32_t p = s.causal ? pos_ids[r / G] : INT32_MAX;
          t.pos[i] = p;
          mn = std::min(mn, p);
          mx = std::max(mx, p);
          rows[i] = q + ((r / G) * s.q_heads + kvh * G + r % G) * d;
        } else {
          t.pos[i] = INT32_MAX;
          rows[i] = nullptr;
        }
        t.m[i] = -__builtin_inff();
        t.l[i] = 0.f;
      }
      // Q^T scaled into the log2 domain; pad rows are 0
      switch (isa) {
      case Isa::avx512:
        fa_pack_qt_avx512(rows, br, d, qscale, t.qt);
        break;
      case Isa::avx2:
      case Isa::portable:
        fa_pack_qt_generic(rows, br, d, qscale, t.qt);
        break;
      }
      std::fill(t.o, t.o + br * d, 0.f);
      tmin[ti] = mn;
      tmax[ti] = mx;
      tend[ti] = s.causal ? std::min<std::int64_t>(s.S_valid, static_cast<std::int64_t>(mx) + 1)
                          : s.S_valid;
      kend_all = std::max(kend_all, tend[ti]);
    }

  const std::int64_t kv_stride = s.kv_heads * d;
  for (std::int64_t j0 = 0; j0 < kend_all; j0 += bc) {
    const std::int64_t ncopy = std::min(bc, kend_all - j0);
    if (copy) {
      // key-major so all heads of a key come in one stream; widens 16-bit caches
      for (std::int64_t j = 0; j < ncopy; ++j)
        for (std::int64_t hh = 0; hh < nh; ++hh) {
          const auto off = ((j0 + j) * s.kv_heads + hb + hh) * d;
          convert_row(k + off, tl[hh * nq].kbuf + j * d, d, isa);
          convert_row(v + off, tl[hh * nq].vbuf + j * d, d, isa);
        }
    }
    for (std::int64_t ti = 0; ti < nt; ++ti) {
      if (j0 >= tend[ti])
        continue;
      FaTile& t = tl[ti];
      FaKeys kk;
      kk.j0 = j0;
      kk.ncols = std::min(bc, tend[ti] - j0);
      kk.masked = s.causal && j0 + kk.ncols - 1 > tmin[ti];
      if (copy) {
        kk.k = t.kbuf;
        kk.v = t.vbuf;
        kk.stride = d;
      } else {
        const auto off = (j0 * s.kv_heads + hb + ti / nq) * d;
        kk.k = reinterpret_cast<const float*>(k + off);
        kk.v = reinterpret_cast<const float*>(v + off);
        kk.stride = kv_stride;
      }
      switch (isa) {
      case Isa::avx512:
        fa_step_avx512(t, kk);
        break;
      case Isa::avx2:
        fa_step_avx2(t, kk);
        break;
      case Isa::portable:
        fa_step_portable(t, kk);
        break;
      }
    }
  }
  (void)tmax;

  // normalize and scatter rows back to [L, q_heads, d]
  for (std::int64_t ti = 0; ti < nt; ++ti) {
    const FaTile& t = tl[ti];
    const std::int64_t r0 = (qb + ti % nq) * br, kvh = hb + ti / nq;
    for (std::int64_t i = 0; i < t.nrows; ++i) {
      const std::int64_t r = r0 + i, tok = r / G, h = kvh * G + r % G;
      float* dst = out + (tok * s.q_heads + h) * d;
      const float inv = 1.0f / t.l[i];
      const float* o = t.o + i * d;
      for (std::int64_t x = 0; x < d; ++x)
        dst[x] = o[x] * inv;
    }
  }
}

} // namespace detail

/// Causal multi-head attention, FlashAttention-2 tiling with an online softmax.
/// q: [L, q_heads, d]; k, v: [S, kv_heads, d] of f32/bf16/f16 (slot j = position j);
/// position_ids: [L] int32 (>= 0; may be empty when !shape.causal); out: [L, q_heads, d] f32.
/// Query rows past L_valid are neither read nor written; keys past S_valid are never read.
/// `split`: heads = kv heads divided across cores; rows = (kv heads, q tile) items dealt
/// round-robin (balances the causal triangle); none = calling thread. `local_memory_bytes`
/// bounds a work item's working set (0 = half the core's L2).
template <class KV>
void flash_attention(std::span<const float> q, std::span<const KV> k, std::span<const KV> v,
                     std::span<const std::int32_t> position_ids, std::span<float> out,
                     const AttentionShape& shape, const CoreSplit& split = {},
                     std::size_t local_memory_bytes = 0) {
  static_assert(is_float_storage_v<KV>, "k/v must be float, bf16_t or f16_t");
  detail::fa_check(shape, q.size(), k.size(), v.size(), position_ids.size(), out.size());
  if (shape.causal)
    for (std::int64_t i = 0; i < shape.L_valid; ++i)
      if (position_ids[static_cast<std::size_t>(i)] < 0)
        throw std::invalid_argument("flash_attention: position " +
                                    std::to_string(position_ids[static_cast<std::size_t>(i)]) +
                                    " of row " + std::to_string(i) + " is negative");
  if (shape.L_valid == 0)
    return;
  if (split.dim == SplitDim::cols)
    throw std::invalid_argument(
        "flash_attention: splitting keys (cols) across cores is not supported; use heads or rows");
  const std::int64_t parts = split.dim == SplitDim::none ? 1 : std::max(1, split.parts);
  const detail::FaPlan plan = detail::fa_plan(
      shape, parts, local_memory_bytes ? local_memory_bytes : default_local_memory_bytes() / 2,
      !std::is_same_v<KV, float>);
  const std::int64_t nh = std::min<std::int64_t>(plan.heads_per_item, 64);
  const std::int64_t nq = std::min<std::int64_t>(plan.qtiles_per_item, 64 / nh);
  const std::int64_t groups = (shape.kv_heads + nh - 1) / nh;
  const std::int64_t nqt = (plan.q_tiles + nq - 1) / nq; // q-tile groups per head group
  const Isa isa = active_isa();
  auto run = [&](std::int64_t g, std::int64_t qg) {
    const std::int64_t hb = g * nh, n = std::min(nh, shape.kv_heads - hb);
    const std::int64_t qb = qg * nq, m = std::min(nq, plan.q_tiles - qb);
    detail::fa_item<KV>(q.data(), k.data(), v.data(), position_ids.data(), out.data(), shape,
                        plan.tiles, hb, n, qb, m, isa);
  };
  switch (split.dim) {
  case SplitDim::none:
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t t = 0; t < nqt; ++t)
        run(g, t);
    return;
  case SplitDim::heads:
    parallel_for(split, groups, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t g = b; g < e; ++g)
        for (std::int64_t t = 0; t < nqt; ++t)
          run(g, t);
    });
    return;
  case SplitDim::rows:
  case SplitDim::cols: {
    const std::int64_t items = groups * nqt;
    const std::int64_t p = std::min(parts, items);
    parallel_for(CoreSplit{SplitDim::rows, static_cast<int>(p)}, p, 1,
                 [&](std::int64_t b, std::int64_t e) {
                   for (std::int64_t w = b; w < e; ++w)
                     for (std::int64_t it = w; it < items; it += p)
                       run(it / nqt, it % nqt);
                 });
    return;
  }
  }
}

} // namespace tpullm::kernels
