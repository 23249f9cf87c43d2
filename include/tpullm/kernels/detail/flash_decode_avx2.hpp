#pragma once
/// AVX2 flash-decoding work item (see flash_decode.hpp for the split and the merge): the
/// AVX-512 item's steps (flash_decode_avx512.hpp) on 8-lane vectors and 16 registers.
///
/// Per block of 16 keys of one kv head: K and V rows widened to f32 once into [16][dp] blocks
/// (F16C / a 16-bit shift / a copy for f32, so every stride is the compile-time dp);
/// per query row, two groups of 8 scores (8 d-vectorized dot products reduced by a hadd tree
/// into key order); the online softmax on those 16 scores with the running max moved (and o, l
/// rescaled) only when a score exceeds it; P V in register tiles of up to 4 rows x 2-4 vectors
/// of o, each V vector loaded once per tile and key, p broadcast.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tpullm/kernels/detail/flash_decode_item.hpp"
#include "tpullm/kernels/vec_math.hpp"

namespace tpullm::kernels::detail {

#if TPULLM_X86

/// 8 elements of a K / V row as f32: F16C for f16, a 16-bit shift for bf16, a load for f32.
template <class KV>
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE __m256 fd_widen8_avx2(const KV* p) {
  if constexpr (std::is_same_v<KV, float>) {
    return _mm256_loadu_ps(p);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (std::is_same_v<KV, bf16_t>)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    else
      return _mm256_cvtph_ps(h);
  }
}

/// dst [16][dp] = rows [0, n) of src (row stride `stride` elements, d elements each) as f32,
/// lanes [d, dp) and rows [n, 16) zero.
/// For kv8_t each row is codes times the row's scale (kv8.hpp).
template <class KV>
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE void fd_widen16_avx2(const KV* src, std::int64_t stride,
                                                             std::int64_t n, std::int64_t d,
                                                             std::int64_t dp, float* dst) {
  const std::int64_t d8 = d / 8 * 8;
  for (std::int64_t j = 0; j < n; ++j) {
    const KV* s = src + j * stride;
    float* t = dst + j * dp;
    std::int64_t x = 0;
    if constexpr (std::is_same_v<KV, kv8_t>) {
      const float sc = kv8_scale(s, d);
      const __m256 scv = _mm256_set1_ps(sc);
      for (; x < d8; x += 8) {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + x));
        _mm256_storeu_ps(t + x, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), scv));
      }
      for (; x < d; ++x)
        t[x] = static_cast<float>(s[x].code) * sc;
    } else {
      for (; x < d8; x += 8)
        _mm256_storeu_ps(t + x, fd_widen8_avx2(s + x));
      for (; x < d; ++x)
        t[x] = to_f32(s[x]);
    }
    for (; x < dp; ++x)
      t[x] = 0.f;
  }
  for (std::int64_t j = n; j < kFdBlock; ++j)
    for (std::int64_t x = 0; x < dp; x += 8)
      _mm256_storeu_ps(dst + j * dp + x, _mm256_setzero_ps());
}

/// 2^x for x <= 0 on 8 lanes (the polynomial of exp2_approx): results below 2^-126 flush to 0,
/// so -inf gives 0.
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE __m256 fd_exp2_avx2(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-160.f));
  const __m256 fl = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, fl);
  __m256 p = _mm256_set1_ps(1.525273380405984e-05f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381606e-4f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_add_epi32(
      _mm256_max_epi32(_mm256_cvtps_epi32(fl), _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
  return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
}

/// r[i] = sum of the 8 lanes of a[i], i = 0..7 (a hadd tree, then the two 128-bit halves).
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE __m256 fd_reduce8_avx2(const __m256* a) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/// Scores of one query row (q: dp floats, zero past d) against 8 keys (kb: rows of stride ks
/// floats), in key order.
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE __m256 fd_scores8_avx2(const float* q, const float* kb,
                                                               std::int64_t ks, std::int64_t dp) {
  __m256 acc[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j)
    acc[j] = _mm256_setzero_ps();
  for (std::int64_t x = 0; x < dp; x += 8) {
    const __m256 qc = _mm256_loadu_ps(q + x);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
      acc[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kb + j * ks + x), acc[j]);
  }
  return fd_reduce8_avx2(acc);
}

/// o[r][0 .. 8*NC) += sum_j p[r][j] v_j[0 .. 8*NC) for RT rows (o row stride os floats, p
/// [RT][16]) and the 16 keys of a block (v row stride vs floats), o in registers.
template <int RT, int NC>
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE void
fd_pv_tile_avx2(float* o, std::int64_t os, const float* p, const float* v, std::int64_t vs) {
  __m256 acc[RT][NC];
#pragma GCC unroll 4
  for (int r = 0; r < RT; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
      acc[r][c] = _mm256_loadu_ps(o + r * os + 8 * c);
#pragma GCC unroll 4
  for (int j = 0; j < 16; ++j) {
    __m256 vv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
      vv[c] = _mm256_loadu_ps(v + j * vs + 8 * c);
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) {
      const __m256 pb = _mm256_broadcast_ss(p + r * kFdBlock + j);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm256_fmadd_ps(pb, vv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RT; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
      _mm256_storeu_ps(o + r * os + 8 * c, acc[r][c]);
}

/// P V of RT rows over all dp floats of o: tiles of NC vectors (RT * NC <= 8 accumulators),
/// then single vectors.
template <int RT>
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE void fd_pv_rows_avx2(float* o, std::int64_t os,
                                                             const float* p, const float* v,
                                                             std::int64_t vs, std::int64_t dp) {
  constexpr int NC = RT <= 2 ? 4 : 2;
  const std::int64_t n8 = dp / 8;
  std::int64_t c = 0;
  for (; c + NC <= n8; c += NC)
    fd_pv_tile_avx2<RT, NC>(o + 8 * c, os, p, v + 8 * c, vs);
  for (; c < n8; ++c)
    fd_pv_tile_avx2<RT, 1>(o + 8 * c, os, p, v + 8 * c, vs);
}

/// P V of `rows` rows (o: [rows][os], p: [rows][16]) in row tiles of up to 4.
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE void fd_pv_avx2(float* o, std::int64_t os, const float* p,
                                                        const float* v, std::int64_t vs,
                                                        std::int64_t rows, std::int64_t dp) {
  for (std::int64_t r = 0; r < rows; r += 4) {
    float* orow = o + r * os;
    const float* prow = p + r * kFdBlock;
    switch (std::min<std::int64_t>(4, rows - r)) {
    case 4:
      fd_pv_rows_avx2<4>(orow, os, prow, v, vs, dp);
      break;
    case 3:
      fd_pv_rows_avx2<3>(orow, os, prow, v, vs, dp);
      break;
    case 2:
      fd_pv_rows_avx2<2>(orow, os, prow, v, vs, dp);
      break;
    default:
      fd_pv_rows_avx2<1>(orow, os, prow, v, vs, dp);
      break;
    }
  }
}

/// Largest of the 8 lanes of v.
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE float fd_hmax_avx2(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

/// Sum of the 8 lanes of v.
TPULLM_TARGET_AVX2 TPULLM_ALWAYS_INLINE float fd_hsum_avx2(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

/// One decode work item on AVX2 (the steps are in the file comment); DP = d when it is a
/// compile-time width (the common head dims), 0 = the run-time width of the item.
template <class KV, int DP>
TPULLM_TARGET_AVX2 void fd_item_avx2_t(const FdItem<KV>& it) {
  const std::int64_t dp = DP > 0 ? DP : it.dp;
  const std::int64_t d = DP > 0 ? dp : it.d, H = it.H, G = it.G, row = kv_row_elems<KV>(d);
  const std::int64_t stride = H * row;
  const std::int64_t r0 = it.h0 * G, R = (it.h1 - it.h0) * G;
  const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // kb, vb [16][dp]; o [R][dp]; p [R][16]; l [R][16] (8 lane partial sums used)
  thread_local std::vector<float> buf;
  buf.resize(static_cast<std::size_t>(2 * kFdBlock * dp + R * dp + 2 * R * kFdBlock + 16));
  float* kb = fd_align64(buf.data());
  float* vb = kb + kFdBlock * dp;
  float* o = vb + kFdBlock * dp;
  float* p = o + R * dp;
  float* lv = p + R * kFdBlock;
  std::fill(o, lv + R * kFdBlock, 0.f);
  for (std::int64_t r = 0; r < R; ++r)
    it.m[r0 + r] = -__builtin_inff();
  for (std::int64_t jb = it.j0; jb < it.j1; jb += kFdBlock) {
    const std::int64_t n = std::min(kFdBlock, it.j1 - jb);
    const __m256 valid0 =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane));
    const __m256 valid1 =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n) - 8), lane));
    for (std::int64_t h = it.h0; h < it.h1; ++h) {
      fd_widen16_avx2(it.k + (jb * H + h) * row, stride, n, d, dp, kb);
      fd_widen16_avx2(it.v + (jb * H + h) * row, stride, n, d, dp, vb);
      const std::int64_t hr = (h - it.h0) * G; // the head's first row in the item
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t r = hr + g;
        const float* q = it.qp + (r0 + r) * dp;
        __m256 s0 = fd_scores8_avx2(q, kb, dp, dp);
        __m256 s1 = fd_scores8_avx2(q, kb + 8 * dp, dp, dp);
        if (n < kFdBlock) {
          s0 = _mm256_blendv_ps(ninf, s0, valid0);
          s1 = _mm256_blendv_ps(ninf, s1, valid1);
        }
        float m = it.m[r0 + r];
        const __m256 mb = _mm256_set1_ps(m);
        if (_mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(s0, mb, _CMP_GT_OQ),
                                            _mm256_cmp_ps(s1, mb, _CMP_GT_OQ))) != 0) {
          const float mnew = std::max(m, fd_hmax_avx2(_mm256_max_ps(s0, s1)));
          const __m256 a = _mm256_set1_ps(exp2_approx(m - mnew));
          float* orow = o + r * dp;
          for (std::int64_t x = 0; x < dp; x += 8)
            _mm256_storeu_ps(orow + x, _mm256_mul_ps(_mm256_loadu_ps(orow + x), a));
          _mm256_storeu_ps(lv + r * kFdBlock, _mm256_mul_ps(_mm256_loadu_ps(lv + r * kFdBlock), a));
          m = mnew;
          it.m[r0 + r] = m;
        }
        const __m256 mv = _mm256_set1_ps(m);
        const __m256 p0 = fd_exp2_avx2(_mm256_sub_ps(s0, mv));
        const __m256 p1 = fd_exp2_avx2(_mm256_sub_ps(s1, mv));
        _mm256_storeu_ps(p + r * kFdBlock, p0);
        _mm256_storeu_ps(p + r * kFdBlock + 8, p1);
        _mm256_storeu_ps(lv + r * kFdBlock,
                         _mm256_add_ps(_mm256_loadu_ps(lv + r * kFdBlock), _mm256_add_ps(p0, p1)));
      }
      fd_pv_avx2(o + hr * dp, dp, p + hr * kFdBlock, vb, dp, G, dp);
    }
  }
  for (std::int64_t r = 0; r < R; ++r) {
    it.l[r0 + r] = fd_hsum_avx2(_mm256_loadu_ps(lv + r * kFdBlock));
    std::copy(o + r * dp, o + r * dp + d, it.o + (r0 + r) * d);
  }
}

/// One decode work item on AVX2: head dims 64, 128 and 256 on their compiled-in widths, any
/// other on the run-time one.
template <class KV>
TPULLM_TARGET_AVX2 void fd_item_avx2(const FdItem<KV>& it) {
  switch (it.d == it.dp ? it.dp : 0) {
  case 64:
    return fd_item_avx2_t<KV, 64>(it);
  case 128:
    return fd_item_avx2_t<KV, 128>(it);
  case 256:
    return fd_item_avx2_t<KV, 256>(it);
  default:
    return fd_item_avx2_t<KV, 0>(it);
  }
}

#endif

} // namespace tpullm::kernels::detail
