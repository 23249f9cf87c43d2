#pragma once
/// Flash-decoding: attention of one query row (L_valid = 1) over a long KV cache, with the keys
/// split across cores and the partial softmax results merged at the end.
///
/// Work item = (key chunk, block of kv heads). Each item streams its key range for all its kv
/// heads (for a block of all heads the K and V rows of a key range are one contiguous run each)
/// and keeps, per query head, a running max m (log2 domain), denominator l and unnormalized
/// output o[d]. The merge: m* = max_c m_c, l = sum_c l_c 2^(m_c - m*), out = sum_c o_c 2^(m_c -
/// m*) / l. Scores are vectorized over 16 keys (d-vectorized dot products whose 16 partial-sum
/// vectors are reduced by a transposing add tree), so a small GQA group (MHA: 1 row) does not
/// leave vector lanes idle; P V is vectorized over d.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/kernels/detail/portable_simd.hpp"

namespace tpullm::kernels::detail {

/// Keys below which a chunk is not split further (the merge and the fork would cost more).
inline constexpr std::int64_t kFdMinChunkKeys = 256;
/// Keys per block of the decode loop.
inline constexpr std::int64_t kFdBlock = 16;
/// Software prefetch distance of the decode loop, in blocks.
inline constexpr std::int64_t kFdPrefetchBlocks = 4;
#ifndef TPULLM_FD_PREFETCH
#define TPULLM_FD_PREFETCH 0
#endif
inline constexpr bool kFdPrefetch = TPULLM_FD_PREFETCH;

/// One work item's arguments. qs: [q_heads, d] scaled by scale * log2(e); k, v: the cache;
/// m, l: [q_heads]; o: [q_heads, d] (this item's chunk slot; only heads of [h0, h1) written).
template <class KV>
struct FdItem {
  const float* qs = nullptr;
  const KV* k = nullptr;
  const KV* v = nullptr;
  std::int64_t H = 0, G = 0, d = 0;
  std::int64_t h0 = 0, h1 = 0, j0 = 0, j1 = 0;
  float* m = nullptr;
  float* l = nullptr;
  float* o = nullptr;
};

// ---- generic body (portable and AVX2 builds): 16-lane arrays GCC vectorizes --------------

template <class KV>
TPULLM_ALWAYS_INLINE void fd_item_generic(const FdItem<KV>& it) {
  const std::int64_t d = it.d, H = it.H, G = it.G;
  float s[kFdBlock], p[kFdBlock];
  for (std::int64_t h = it.h0; h < it.h1; ++h)
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t qh = h * G + g;
      const float* q = it.qs + qh * d;
      float m = -__builtin_inff(), l = 0.f;
      float* o = it.o + qh * d;
      for (std::int64_t x = 0; x < d; ++x)
        o[x] = 0.f;
      for (std::int64_t jb = it.j0; jb < it.j1; jb += kFdBlock) {
        const std::int64_t n = std::min(kFdBlock, it.j1 - jb);
        float bmax = -__builtin_inff();
        for (std::int64_t j = 0; j < n; ++j) {
          const KV* kr = it.k + ((jb + j) * H + h) * d;
          float lane[16] = {};
          std::int64_t x = 0;
          for (; x + 16 <= d; x += 16)
            for (int i = 0; i < 16; ++i)
              lane[i] += q[x + i] * to_f32(kr[x + i]);
          for (; x < d; ++x)
            lane[0] += q[x] * to_f32(kr[x]);
          float acc = 0.f;
          for (float e : lane)
            acc += e;
          s[j] = acc;
          bmax = acc > bmax ? acc : bmax;
        }
        const float mnew = bmax > m ? bmax : m;
        const float alpha = exp2_approx(m - mnew);
        float sum = 0.f;
        for (std::int64_t j = 0; j < n; ++j) {
          p[j] = exp2_approx(s[j] - mnew);
          sum += p[j];
        }
        l = l * alpha + sum;
        m = mnew;
        for (std::int64_t x = 0; x < d; ++x)
          o[x] *= alpha;
        for (std::int64_t j = 0; j < n; ++j) {
          const KV* vr = it.v + ((jb + j) * H + h) * d;
          const float pj = p[j];
          for (std::int64_t x = 0; x < d; ++x)
            o[x] += pj * to_f32(vr[x]);
        }
      }
      it.m[qh] = m;
      it.l[qh] = l;
    }
}

#if TPULLM_X86
/// Head dimensions up to which the AVX2 16-bit decode item widens key blocks on the stack.
inline constexpr std::int64_t kFdWideMaxD = 256;

/// 8 elements of a 16-bit K / V row as f32: F16C for f16, a 16-bit shift for bf16.
template <class KV>
TPULLM_TARGET_AVX2 inline __m256 fd_widen8_avx2(const KV* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (std::is_same_v<KV, bf16_t>)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else
    return _mm256_cvtph_ps(h);
}

/// Sum of the 8 lanes of v.
TPULLM_TARGET_AVX2 inline float fd_hsum_avx2(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_hadd_ps(x, x);
  x = _mm_hadd_ps(x, x);
  return _mm_cvtss_f32(x);
}

/// One decode item over a 16-bit cache on AVX2: each block of kFdBlock keys of a kv head is
/// widened once (F16C / bf16 shift, 8 lanes at a time) into two small stack buffers that the
/// head's G query heads then read as f32, so every K / V byte is read from the cache once.
template <class KV>
TPULLM_TARGET_AVX2 void fd_item_avx2_kv16(const FdItem<KV>& it) {
  const std::int64_t d = it.d, H = it.H, G = it.G, d8 = d / 8 * 8;
  alignas(64) float kb[kFdBlock * kFdWideMaxD], vb[kFdBlock * kFdWideMaxD];
  float s[kFdBlock], p[kFdBlock];
  for (std::int64_t h = it.h0; h < it.h1; ++h) {
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t qh = h * G + g;
      it.m[qh] = -__builtin_inff();
      it.l[qh] = 0.f;
      std::fill(it.o + qh * d, it.o + (qh + 1) * d, 0.f);
    }
    for (std::int64_t jb = it.j0; jb < it.j1; jb += kFdBlock) {
      const std::int64_t n = std::min(kFdBlock, it.j1 - jb);
      for (std::int64_t j = 0; j < n; ++j) {
        const KV* kr = it.k + ((jb + j) * H + h) * d;
        const KV* vr = it.v + ((jb + j) * H + h) * d;
        std::int64_t x = 0;
        for (; x < d8; x += 8) {
          _mm256_storeu_ps(kb + j * d + x, fd_widen8_avx2(kr + x));
          _mm256_storeu_ps(vb + j * d + x, fd_widen8_avx2(vr + x));
        }
        for (; x < d; ++x) {
          kb[j * d + x] = to_f32(kr[x]);
          vb[j * d + x] = to_f32(vr[x]);
        }
      }
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t qh = h * G + g;
        const float* q = it.qs + qh * d;
        float bmax = -__builtin_inff();
        for (std::int64_t j = 0; j < n; ++j) {
          const float* kr = kb + j * d;
          __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
          std::int64_t x = 0;
          for (; x + 16 <= d8; x += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + x), _mm256_loadu_ps(kr + x), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + x + 8), _mm256_loadu_ps(kr + x + 8), a1);
          }
          for (; x < d8; x += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + x), _mm256_loadu_ps(kr + x), a0);
          float acc = fd_hsum_avx2(_mm256_add_ps(a0, a1));
          for (; x < d; ++x)
            acc += q[x] * kr[x];
          s[j] = acc;
          bmax = acc > bmax ? acc : bmax;
        }
        const float m = it.m[qh];
        const float mnew = bmax > m ? bmax : m;
        const float alpha = exp2_approx(m - mnew);
        float sum = 0.f;
        for (std::int64_t j = 0; j < n; ++j) {
          p[j] = exp2_approx(s[j] - mnew);
          sum += p[j];
        }
        it.l[qh] = it.l[qh] * alpha + sum;
        it.m[qh] = mnew;
        float* o = it.o + qh * d;
        const __m256 av = _mm256_set1_ps(alpha);
        std::int64_t x = 0;
        for (; x < d8; x += 8) {
          __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(o + x), av);
          for (std::int64_t j = 0; j < n; ++j)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(vb + j * d + x), acc);
          _mm256_storeu_ps(o + x, acc);
        }
        for (; x < d; ++x) {
          float acc = o[x] * alpha;
          for (std::int64_t j = 0; j < n; ++j)
            acc += p[j] * vb[j * d + x];
          o[x] = acc;
        }
      }
    }
  }
}
#endif

template <class KV>
TPULLM_TARGET_AVX2 void fd_item_avx2(const FdItem<KV>& it) {
#if TPULLM_X86
  if constexpr (!std::is_same_v<KV, float>)
    if (it.d <= kFdWideMaxD)
      return fd_item_avx2_kv16(it);
#endif
  fd_item_generic(it);
}
/// One decode item on the portable path's xsimd vectors: dot products and P V over d (K / V
/// rows widened to f32 a vector at a time).
template <class KV>
void fd_item_portable(const FdItem<KV>& it) {
  const std::int64_t d = it.d, H = it.H, G = it.G;
  const std::int64_t dv = d / kPW * kPW;
  float s[kFdBlock], p[kFdBlock], wide[kPW];
  auto load = [&](const KV* src) {
    if constexpr (std::is_same_v<KV, float>) {
      return pv_load(src);
    } else {
      for (std::int64_t l = 0; l < kPW; ++l)
        wide[l] = to_f32(src[l]);
      return pv_load(wide);
    }
  };
  for (std::int64_t h = it.h0; h < it.h1; ++h)
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t qh = h * G + g;
      const float* q = it.qs + qh * d;
      float m = -__builtin_inff(), l = 0.f;
      float* o = it.o + qh * d;
      std::fill(o, o + d, 0.f);
      for (std::int64_t jb = it.j0; jb < it.j1; jb += kFdBlock) {
        const std::int64_t n = std::min(kFdBlock, it.j1 - jb);
        float bmax = -__builtin_inff();
        for (std::int64_t j = 0; j < n; ++j) {
          const KV* kr = it.k + ((jb + j) * H + h) * d;
          PVec a0(0.f), a1(0.f);
          std::int64_t x = 0;
          for (; x + 2 * kPW <= dv; x += 2 * kPW) {
            a0 = pv_fma(pv_load(q + x), load(kr + x), a0);
            a1 = pv_fma(pv_load(q + x + kPW), load(kr + x + kPW), a1);
          }
          for (; x < dv; x += kPW)
            a0 = pv_fma(pv_load(q + x), load(kr + x), a0);
          float acc = pv_sum(a0 + a1);
          for (; x < d; ++x)
            acc += q[x] * to_f32(kr[x]);
          s[j] = acc;
          bmax = acc > bmax ? acc : bmax;
        }
        const float mnew = bmax > m ? bmax : m;
        const float alpha = exp2_approx(m - mnew);
        float sum = 0.f;
        for (std::int64_t j = 0; j < n; ++j) {
          p[j] = exp2_approx(s[j] - mnew);
          sum += p[j];
        }
        l = l * alpha + sum;
        m = mnew;
        const PVec av(alpha);
        for (std::int64_t x = 0; x < dv; x += kPW)
          pv_store(o + x, pv_load(o + x) * av);
        for (std::int64_t x = dv; x < d; ++x)
          o[x] *= alpha;
        for (std::int64_t j = 0; j < n; ++j) {
          const KV* vr = it.v + ((jb + j) * H + h) * d;
          const PVec pj(p[j]);
          for (std::int64_t x = 0; x < dv; x += kPW)
            pv_store(o + x, pv_fma(pj, load(vr + x), pv_load(o + x)));
          for (std::int64_t x = dv; x < d; ++x)
            o[x] += p[j] * to_f32(vr[x]);
        }
      }
      it.m[qh] = m;
      it.l[qh] = l;
    }
}

// ---- AVX-512 ----------------------------------------------------------------------------

#if TPULLM_X86
TPULLM_AVX512_BEGIN

/// 16 elements of a K/V row at p (masked unless Full: masked loads are slower on some cores) as
/// f32.
template <class KV, bool Full = false>
TPULLM_TARGET_AVX512 inline __m512 fd_load(const KV* p, __mmask16 m) {
  if constexpr (Full) {
    if constexpr (std::is_same_v<KV, float>) {
      return _mm512_loadu_ps(p);
    } else if constexpr (std::is_same_v<KV, bf16_t>) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
  } else if constexpr (std::is_same_v<KV, float>) {
    return _mm512_maskz_loadu_ps(m, p);
  } else if constexpr (std::is_same_v<KV, bf16_t>) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
}

/// r[i] = sum of all lanes of a[i] for 16 vectors, where a[i] holds key kFdPerm[i] (the 4x4
/// transpose of the key index): four halving stages of shuffles and adds leave the sums in key
/// order 0..15.
TPULLM_TARGET_AVX512 inline __m512 fd_reduce16(const __m512* a) {
  __m512 b[8], c[4], e[2];
  for (int j = 0; j < 8; ++j) // [a2j.lo256 + a2j.hi256 | a2j+1.lo256 + a2j+1.hi256]
    b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xEE));
  for (int j = 0; j < 4; ++j) // one 128-bit lane per vector of a
    c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], 0x88),
                         _mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], 0xDD));
  for (int j = 0; j < 2; ++j) // two floats per vector of a in every lane
    e[j] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * j], c[2 * j + 1], 0x44),
                         _mm512_shuffle_ps(c[2 * j], c[2 * j + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x88), _mm512_shuffle_ps(e[0], e[1], 0xDD));
}

/// Key held by accumulator i of fd_reduce16 (so that its output is in key order).
inline constexpr int kFdPerm[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/// o[c0 .. c0 + 16*NC) = o * alpha + sum_j p[j] v_j over n keys, in registers. U independent
/// accumulator sets (keys j % U) keep the FMA chains short: the o chain runs through every block.
template <class KV, int NC, bool Full>
TPULLM_TARGET_AVX512 inline void fd_pv_avx512(float* o, const KV* v, std::int64_t vstride,
                                              const float* p, std::int64_t n, __m512 alpha,
                                              std::int64_t d, std::int64_t c0) {
  constexpr int U = NC >= 8 ? 2 : NC >= 4 ? 4 : NC >= 2 ? 6 : 8;
  __m512 acc[U][NC];
  __mmask16 mk[NC];
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
    const std::int64_t w = std::min<std::int64_t>(16, d - c0 - 16 * c);
    mk[c] = static_cast<__mmask16>(w >= 16 ? 0xFFFF : (1u << w) - 1u);
    acc[0][c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[c], o + c0 + 16 * c), alpha);
#pragma GCC unroll 8
    for (int u = 1; u < U; ++u)
      acc[u][c] = _mm512_setzero_ps();
  }
  std::int64_t j = 0;
  for (; j + U <= n; j += U)
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      const __m512 pb = _mm512_set1_ps(p[j + u]);
      const KV* vr = v + (j + u) * vstride + c0;
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c)
        acc[u][c] = _mm512_fmadd_ps(pb, fd_load<KV, Full>(vr + 16 * c, mk[c]), acc[u][c]);
    }
  for (; j < n; ++j) {
    const __m512 pb = _mm512_set1_ps(p[j]);
    const KV* vr = v + j * vstride + c0;
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c)
      acc[0][c] = _mm512_fmadd_ps(pb, fd_load<KV, Full>(vr + 16 * c, mk[c]), acc[0][c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
#pragma GCC unroll 8
    for (int u = 1; u < U; ++u)
      acc[0][c] = _mm512_add_ps(acc[0][c], acc[u][c]);
    _mm512_mask_storeu_ps(o + c0 + 16 * c, mk[c], acc[0][c]);
  }
}

/// One item on AVX-512. Per block of 16 keys, three passes over all query rows of the item
/// (scores, softmax update, P V): the rows are independent, so the long dependency chain of one
/// row's softmax (reduction tree, max, exp2, sum) overlaps other rows' work instead of stalling.
template <class KV, bool Full>
TPULLM_TARGET_AVX512 void fd_item_avx512_t(const FdItem<KV>& it) {
  const std::int64_t d = it.d, H = it.H, G = it.G, stride = H * d;
  const std::int64_t nc = (d + 15) / 16;
  const __mmask16 tail = static_cast<__mmask16>(d % 16 == 0 ? 0xFFFF : (1u << (d % 16)) - 1u);
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const std::int64_t r0 = it.h0 * G, r1 = it.h1 * G, R = r1 - r0;
  thread_local std::vector<float> buf;
  buf.resize(static_cast<std::size_t>(R * (kFdBlock + 1) + 16));
  float* p = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(buf.data()) + 63) &
                                      ~std::uintptr_t{63}); // [R][16] scores, then p
  float* alpha = p + R * kFdBlock;                          // [R]
  for (std::int64_t r = r0; r < r1; ++r) {
    it.m[r] = -__builtin_inff();
    it.l[r] = 0.f;
    std::fill(it.o + r * d, it.o + (r + 1) * d, 0.f);
  }
  const std::int64_t row_bytes = d * static_cast<std::int64_t>(sizeof(KV));
  for (std::int64_t jb = it.j0; jb < it.j1; jb += kFdBlock) {
    const std::int64_t n = std::min(kFdBlock, it.j1 - jb);
    const __mmask16 valid = _mm512_cmplt_epi32_mask(lane, _mm512_set1_epi32(static_cast<int>(n)));
    // rows of the item's heads kFdPrefetchBlocks blocks ahead (never past the item's keys)
    const std::int64_t jpf = jb + kFdPrefetchBlocks * kFdBlock;
    if (kFdPrefetch && jpf < it.j1)
      for (std::int64_t j = jpf; j < std::min(it.j1, jpf + kFdBlock); ++j) {
        const char* kp = reinterpret_cast<const char*>(it.k + (j * H + it.h0) * d);
        const char* vp = reinterpret_cast<const char*>(it.v + (j * H + it.h0) * d);
        for (std::int64_t b = 0; b < (it.h1 - it.h0) * row_bytes; b += 64) {
          _mm_prefetch(kp + b, _MM_HINT_T0);
          _mm_prefetch(vp + b, _MM_HINT_T0);
        }
      }
    // pass 1: scores of every row (16 keys, reduced in key order)
    for (std::int64_t r = r0; r < r1; ++r) {
      const KV* kh = it.k + (jb * H + r / G) * d;
      const float* q = it.qs + r * d;
      __m512 acc[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        acc[i] = _mm512_setzero_ps();
      if (n == kFdBlock && nc <= 8) {
        // keys in order (one pointer stepping by the row stride), q in registers; key j goes to
        // accumulator kFdPerm[j] (the permutation is its own inverse)
        __m512 qv[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c)
          qv[c] = c < nc ? _mm512_maskz_loadu_ps(
                               c == nc - 1 ? tail : static_cast<__mmask16>(0xFFFF), q + 16 * c)
                         : _mm512_setzero_ps();
        const KV* kp = kh;
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j, kp += stride)
#pragma GCC unroll 8
          for (int c = 0; c < 8; ++c)
            if (c < nc)
              acc[kFdPerm[j]] = _mm512_fmadd_ps(
                  qv[c],
                  fd_load<KV, Full>(kp + 16 * c,
                                    c == nc - 1 ? tail : static_cast<__mmask16>(0xFFFF)),
                  acc[kFdPerm[j]]);
      } else if (n == kFdBlock) {
        for (std::int64_t c = 0; c < nc; ++c) {
          const __mmask16 mk = c == nc - 1 ? tail : static_cast<__mmask16>(0xFFFF);
          const __m512 qc = _mm512_maskz_loadu_ps(mk, q + 16 * c);
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i)
            acc[i] = _mm512_fmadd_ps(qc, fd_load<KV, Full>(kh + kFdPerm[i] * stride + 16 * c, mk),
                                     acc[i]);
        }
      } else {
        for (std::int64_t c = 0; c < nc; ++c) {
          const __mmask16 mk = c == nc - 1 ? tail : static_cast<__mmask16>(0xFFFF);
          const __m512 qc = _mm512_maskz_loadu_ps(mk, q + 16 * c);
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i)
            if (kFdPerm[i] < n)
              acc[i] = _mm512_fmadd_ps(qc, fd_load<KV, Full>(kh + kFdPerm[i] * stride + 16 * c, mk),
                                       acc[i]);
        }
      }
      _mm512_store_ps(p + (r - r0) * kFdBlock, _mm512_mask_blend_ps(valid, ninf, fd_reduce16(acc)));
    }
    // pass 2: online softmax update of every row
    for (std::int64_t r = r0; r < r1; ++r) {
      float* pr = p + (r - r0) * kFdBlock;
      const __m512 sv = _mm512_load_ps(pr);
      const float mold = it.m[r];
      const float bmax = _mm512_reduce_max_ps(sv);
      const float mnew = bmax > mold ? bmax : mold;
      const __m512 pv = exp2_avx512(_mm512_sub_ps(sv, _mm512_set1_ps(mnew)));
      _mm512_store_ps(pr, pv);
      const float a = exp2_approx(mold - mnew);
      alpha[r - r0] = a;
      it.l[r] = it.l[r] * a + _mm512_reduce_add_ps(pv);
      it.m[r] = mnew;
    }
    // pass 3: o = o * alpha + P V for every row
    for (std::int64_t r = r0; r < r1; ++r) {
      const KV* vh = it.v + (jb * H + r / G) * d;
      const float* pr = p + (r - r0) * kFdBlock;
      const __m512 av = _mm512_set1_ps(alpha[r - r0]);
      float* o = it.o + r * d;
      for (std::int64_t c0 = 0; c0 < d; c0 += 128) {
        switch (std::min<std::int64_t>(8, (d - c0 + 15) / 16)) {
        case 8:
          fd_pv_avx512<KV, 8, Full>(o, vh, stride, pr, n, av, d, c0);
          break;
        case 7:
          fd_pv_avx512<KV, 7, Full>(o, vh, stride, pr, n, av, d, c0);
          break;
        case 6:
          fd_pv_avx512<KV, 6, Full>(o, vh, stride, pr, n, av, d, c0);
          break;
        case 5:
          fd_pv_avx512<KV, 5, Full>(o, vh, stride, pr, n, av, d, c0);
          break;
        case 4:
          fd_pv_avx512<KV, 4, Full>(o, vh, stride, pr, n, av, d, c0);
          break;
        case 3:
          fd_pv_avx512<KV, 3, Full>(o, vh, stride, pr, n, av, d, c0);
          break;
        case 2:
          fd_pv_avx512<KV, 2, Full>(o, vh, stride, pr, n, av, d, c0);
          break;
        default:
          fd_pv_avx512<KV, 1, Full>(o, vh, stride, pr, n, av, d, c0);
          break;
        }
      }
    }
  }
}

template <class KV>
TPULLM_TARGET_AVX512 void fd_item_avx512(const FdItem<KV>& it) {
  if (it.d % 16 == 0)
    fd_item_avx512_t<KV, true>(it);
  else
    fd_item_avx512_t<KV, false>(it);
}

TPULLM_AVX512_END
#endif

template <class KV>
void fd_item(const FdItem<KV>& it, Isa isa) {
  switch (isa) {
#if TPULLM_X86
  case Isa::amx:
  case Isa::avx512:
    fd_item_avx512(it);
    return;
  case Isa::avx2:
    fd_item_avx2(it);
    return;
#else
  case Isa::amx:
  case Isa::avx512:
  case Isa::avx2:
#endif
  case Isa::portable:
    fd_item_portable(it);
    return;
  }
}

/// How a decode call is cut: C key chunks x HB blocks of kv heads.
struct FdPlan {
  std::int64_t chunks = 1, head_blocks = 1, keys = 0;
};

/// Chunks of at least kFdMinChunkKeys keys, no more than `parts`; leftover cores take blocks of
/// kv heads.
inline FdPlan fd_plan(std::int64_t keys, std::int64_t kv_heads, std::int64_t parts) {
  FdPlan p;
  p.keys = keys;
  parts = std::max<std::int64_t>(1, parts);
  p.chunks = std::clamp<std::int64_t>(keys / kFdMinChunkKeys, 1, std::min<std::int64_t>(parts, 64));
  p.head_blocks = std::clamp<std::int64_t>(parts / p.chunks, 1, kv_heads);
  return p;
}

/// Decode attention (shape.L_valid == 1, checked by the caller): q: [L, q_heads, d] (row 0),
/// k, v: [S, kv_heads, d], out row 0: [q_heads, d]. Uses split.parts cores whatever the split's
/// dimension (keys first, then kv heads).
template <class KV>
void flash_decode(const float* q, const KV* k, const KV* v, const std::int32_t* pos, float* out,
                  const AttentionShape& s, const CoreSplit& split) {
  const std::int64_t d = s.head_dim, H = s.kv_heads, G = s.q_heads / s.kv_heads, QH = s.q_heads;
  const std::int64_t keys =
      s.causal ? std::min<std::int64_t>(s.S_valid, static_cast<std::int64_t>(pos[0]) + 1)
               : s.S_valid;
  const std::int64_t parts = split.dim == SplitDim::none ? 1 : std::max(1, split.parts);
  const FdPlan plan = fd_plan(keys, H, parts);
  const std::int64_t C = plan.chunks, HB = plan.head_blocks, items = C * HB;
  // scratch: scaled q [QH, d], then per chunk m [QH], l [QH], o [QH, d]
  thread_local std::vector<float> scratch;
  const std::int64_t per_chunk = QH * (d + 2);
  scratch.resize(static_cast<std::size_t>(QH * d + C * per_chunk));
  float* qs = scratch.data();
  const float qscale = s.scale * 1.4426950408889634f;
  for (std::int64_t i = 0; i < QH * d; ++i)
    qs[i] = q[i] * qscale;
  float* part = qs + QH * d;
  const Isa isa = active_isa();
  auto run = [&](std::int64_t item) {
    const std::int64_t c = item / HB, hb = item % HB;
    FdItem<KV> it;
    it.qs = qs;
    it.k = k;
    it.v = v;
    it.H = H;
    it.G = G;
    it.d = d;
    const auto [h0, h1] = split_range(H, static_cast<int>(hb), static_cast<int>(HB));
    const auto [j0, j1] = split_range(keys, static_cast<int>(c), static_cast<int>(C), kFdBlock);
    it.h0 = h0;
    it.h1 = h1;
    it.j0 = j0;
    it.j1 = j1;
    float* base = part + c * per_chunk;
    it.m = base;
    it.l = base + QH;
    it.o = base + 2 * QH;
    if (j0 < j1 && h0 < h1)
      fd_item(it, isa);
  };
  const std::int64_t threads = std::min(parts, items);
  if (threads <= 1) {
    for (std::int64_t i = 0; i < items; ++i)
      run(i);
  } else {
    parallel_items(static_cast<int>(threads), items, run);
  }
  // merge the chunks (a chunk without keys, possible only when keys < C * 16, has l = 0)
  for (std::int64_t qh = 0; qh < QH; ++qh) {
    float mx = -__builtin_inff();
    for (std::int64_t c = 0; c < C; ++c) {
      const float* base = part + c * per_chunk;
      const auto [j0, j1] = split_range(keys, static_cast<int>(c), static_cast<int>(C), kFdBlock);
      if (j0 < j1)
        mx = std::max(mx, base[qh]);
    }
    float l = 0.f;
    float w[64];
    for (std::int64_t c = 0; c < C; ++c) {
      const float* base = part + c * per_chunk;
      const auto [j0, j1] = split_range(keys, static_cast<int>(c), static_cast<int>(C), kFdBlock);
      w[c] = j0 < j1 ? exp2_approx(base[qh] - mx) : 0.f;
      l += w[c] * base[QH + qh];
    }
    const float inv = 1.0f / l;
    float* dst = out + qh * d;
    for (std::int64_t x = 0; x < d; ++x) {
      float acc = 0.f;
      for (std::int64_t c = 0; c < C; ++c)
        if (w[c] != 0.f)
          acc += w[c] * part[c * per_chunk + 2 * QH + qh * d + x];
      dst[x] = acc * inv;
    }
  }
}

} // namespace tpullm::kernels::detail
