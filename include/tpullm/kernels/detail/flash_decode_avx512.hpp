#pragma once
/// AVX-512 flash-decoding work item (see flash_decode.hpp for the split and the merge).
///
/// Per block of 16 keys of one kv head:
///  1. the block's K rows are widened to f32 once into a [16][dp] block (dp = d rounded up to
///     16), so a 16-bit row is converted once and then read by all G query rows of the GQA
///     group; an f32 cache, or a group of one row, reads K in place. V is widened as the P V
///     tiles read it (once per tile). The last block of an item (rows past its keys zero) and
///     head dims that are not a multiple of 16 (lanes past d zero) widen K and V into blocks;
///  2. per query row, 16 scores: one d-vectorized dot product per key (q in registers, K from
///     the block) and a transposing add tree (fd_reduce16) that leaves the 16 sums in key order;
///  3. online softmax on that 16-lane vector: the running max m moves only when a score exceeds
///     it (one compare; o and l are rescaled only then, which after the first blocks is rare),
///     p = 2^(s - m) on 16 lanes, l kept as 16 lane partial sums until the item ends;
///  4. P V in register tiles of up to 8 rows x 2-8 vectors of o: each V vector is loaded once per
///     tile and key and used by every row of the tile, p broadcast from memory.
/// Arithmetic per element is that of the reference loop (f32 products and sums, the exp2
/// polynomial of vec_math.hpp); only the summation order differs.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tpullm/kernels/detail/flash_decode_item.hpp"
#include "tpullm/kernels/vec_math.hpp"

namespace tpullm::kernels::detail {

#if TPULLM_X86
TPULLM_AVX512_BEGIN

/// 16 elements of a K / V row at p as f32 (masked unless Full: masked loads are slower on some
/// cores).
template <class KV, bool Full>
TPULLM_TARGET_AVX512 TPULLM_ALWAYS_INLINE __m512 fd_load(const KV* p, __mmask16 m) {
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

/// dst [16][dp] = rows [0, n) of src (row stride `stride` elements, d elements each) as f32,
/// lanes [d, dp) and rows [n, 16) zero.
/// For kv8_t each row is codes times the row's scale (kv8.hpp).
template <class KV>
TPULLM_TARGET_AVX512 TPULLM_ALWAYS_INLINE void fd_widen16_avx512(const KV* src, std::int64_t stride,
                                                                 std::int64_t n, std::int64_t d,
                                                                 std::int64_t dp, float* dst) {
  const std::int64_t full = d / 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (d % 16)) - 1u);
  if constexpr (std::is_same_v<KV, kv8_t>) {
    for (std::int64_t j = 0; j < n; ++j) {
      const KV* s = src + j * stride;
      const __m512 sc = _mm512_set1_ps(kv8_scale(s, d));
      float* t = dst + j * dp;
      for (std::int64_t c = 0; c < full; ++c) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16 * c));
        _mm512_store_ps(t + 16 * c, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), sc));
      }
      if (d % 16 != 0) {
        const __m128i b = _mm_maskz_loadu_epi8(tail, s + 16 * full);
        _mm512_store_ps(t + 16 * full,
                        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), sc));
      }
    }
  } else {
    for (std::int64_t j = 0; j < n; ++j) {
      const KV* s = src + j * stride;
      float* t = dst + j * dp;
      for (std::int64_t c = 0; c < full; ++c)
        _mm512_store_ps(t + 16 * c, fd_load<KV, true>(s + 16 * c, 0xFFFF));
      if (d % 16 != 0)
        _mm512_store_ps(t + 16 * full, fd_load<KV, false>(s + 16 * full, tail));
    }
  }
  for (std::int64_t j = n; j < kFdBlock; ++j)
    for (std::int64_t c = 0; c < dp; c += 16)
      _mm512_store_ps(dst + j * dp + c, _mm512_setzero_ps());
}

/// r[i] = sum of all lanes of a[i] for 16 vectors, where a[i] holds key kFdPerm[i] (the 4x4
/// transpose of the key index): four halving stages of shuffles and adds leave the sums in key
/// order 0..15.
TPULLM_TARGET_AVX512 TPULLM_ALWAYS_INLINE __m512 fd_reduce16(const __m512* a) {
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

/// Key held by accumulator i of fd_reduce16 (the permutation is its own inverse).
inline constexpr int kFdPerm[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/// Scores of one query row (q: dp = 16 * nc floats, zero past d) against the 16 keys of a block
/// (kb: [16] rows of stride ks elements, f32 or the cache's 16-bit type widened as it is read),
/// in key order: per 16-element column c, the 16 keys' products accumulate into 16 independent
/// vectors (key j in accumulator kFdPerm[j]), reduced once at the end.
template <class T>
TPULLM_TARGET_AVX512 TPULLM_ALWAYS_INLINE __m512 fd_scores16_avx512(const float* q, const T* kb,
                                                                    std::int64_t ks,
                                                                    std::int64_t nc) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    acc[i] = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < nc; ++c) {
    const __m512 qc = _mm512_loadu_ps(q + 16 * c);
    const T* kc = kb + 16 * c;
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      acc[kFdPerm[j]] = _mm512_fmadd_ps(qc, fd_load<T, true>(kc + j * ks, 0xFFFF), acc[kFdPerm[j]]);
  }
  return fd_reduce16(acc);
}

/// One block of one kv head for its G query rows (q: [G][dp]; m: [G] running maxima; o: [G][dp];
/// p, lv: [G][16]): the 16 scores of each row (keys past the block's valid mask are -inf), the
/// running max moved and o, l rescaled only when a score exceeds it, p = 2^(s - m), l += p.
template <class T>
TPULLM_TARGET_AVX512 TPULLM_ALWAYS_INLINE void
fd_softmax_rows_avx512(const float* q, const T* kb, std::int64_t ks, std::int64_t nc,
                       std::int64_t G, __mmask16 valid, float* m, float* o, float* p, float* lv) {
  const std::int64_t dp = 16 * nc;
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  for (std::int64_t r = 0; r < G; ++r) {
    __m512 s = fd_scores16_avx512<T>(q + r * dp, kb, ks, nc);
    s = _mm512_mask_blend_ps(valid, ninf, s);
    float mr = m[r];
    float* lr = lv + r * kFdBlock;
    if (_mm512_cmp_ps_mask(s, _mm512_set1_ps(mr), _CMP_GT_OQ) != 0) {
      const float mnew = std::max(mr, _mm512_reduce_max_ps(s));
      const __m512 a = _mm512_set1_ps(exp2_approx(mr - mnew));
      float* orow = o + r * dp;
      for (std::int64_t c = 0; c < dp; c += 16)
        _mm512_storeu_ps(orow + c, _mm512_mul_ps(_mm512_loadu_ps(orow + c), a));
      _mm512_storeu_ps(lr, _mm512_mul_ps(_mm512_loadu_ps(lr), a));
      mr = mnew;
      m[r] = mr;
    }
    const __m512 pv = exp2_avx512(_mm512_sub_ps(s, _mm512_set1_ps(mr)));
    _mm512_storeu_ps(p + r * kFdBlock, pv);
    _mm512_storeu_ps(lr, _mm512_add_ps(_mm512_loadu_ps(lr), pv));
  }
}

/// o[r][0 .. 16*NC) += sum_j p[r][j] v_j[0 .. 16*NC) for RT rows (o row stride os floats, p
/// [RT][16]) and the 16 keys of a block (v row stride vs elements, f32 or 16-bit widened as it
/// is read: once per tile), o in registers.
template <class T, int RT, int NC>
TPULLM_TARGET_AVX512 TPULLM_ALWAYS_INLINE void
fd_pv_tile_avx512(float* o, std::int64_t os, const float* p, const T* v, std::int64_t vs) {
  __m512 acc[RT][NC];
#pragma GCC unroll 8
  for (int r = 0; r < RT; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c)
      acc[r][c] = _mm512_loadu_ps(o + r * os + 16 * c);
#pragma GCC unroll 4
  for (int j = 0; j < 16; ++j) {
    __m512 vv[NC];
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c)
      vv[c] = fd_load<T, true>(v + j * vs + 16 * c, 0xFFFF);
#pragma GCC unroll 8
    for (int r = 0; r < RT; ++r) {
      const __m512 pb = _mm512_set1_ps(p[r * kFdBlock + j]);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c)
        acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < RT; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c)
      _mm512_storeu_ps(o + r * os + 16 * c, acc[r][c]);
}

/// P V of RT rows over all nc vectors of o: tiles of NC vectors (RT * NC <= 16 accumulators),
/// then single vectors.
template <class T, int RT>
TPULLM_TARGET_AVX512 TPULLM_ALWAYS_INLINE void fd_pv_rows_avx512(float* o, std::int64_t os,
                                                                 const float* p, const T* v,
                                                                 std::int64_t vs, std::int64_t nc) {
  constexpr int NC = RT <= 2 ? 8 : RT <= 4 ? 4 : 2;
  std::int64_t c = 0;
  for (; c + NC <= nc; c += NC)
    fd_pv_tile_avx512<T, RT, NC>(o + 16 * c, os, p, v + 16 * c, vs);
  for (; c < nc; ++c)
    fd_pv_tile_avx512<T, RT, 1>(o + 16 * c, os, p, v + 16 * c, vs);
}

/// P V of `rows` rows (o: [rows][os], p: [rows][16]) in row tiles of up to 8.
template <class T>
TPULLM_TARGET_AVX512 TPULLM_ALWAYS_INLINE void
fd_pv_avx512(float* o, std::int64_t os, const float* p, const T* v, std::int64_t vs,
             std::int64_t rows, std::int64_t nc) {
  for (std::int64_t r = 0; r < rows; r += 8) {
    float* orow = o + r * os;
    const float* prow = p + r * kFdBlock;
    switch (std::min<std::int64_t>(8, rows - r)) {
    case 8:
      fd_pv_rows_avx512<T, 8>(orow, os, prow, v, vs, nc);
      break;
    case 7:
      fd_pv_rows_avx512<T, 7>(orow, os, prow, v, vs, nc);
      break;
    case 6:
      fd_pv_rows_avx512<T, 6>(orow, os, prow, v, vs, nc);
      break;
    case 5:
      fd_pv_rows_avx512<T, 5>(orow, os, prow, v, vs, nc);
      break;
    case 4:
      fd_pv_rows_avx512<T, 4>(orow, os, prow, v, vs, nc);
      break;
    case 3:
      fd_pv_rows_avx512<T, 3>(orow, os, prow, v, vs, nc);
      break;
    case 2:
      fd_pv_rows_avx512<T, 2>(orow, os, prow, v, vs, nc);
      break;
    default:
      fd_pv_rows_avx512<T, 1>(orow, os, prow, v, vs, nc);
      break;
    }
  }
}

/// Prefetches [p, p + bytes) into L1 (one hint per 64-byte line).
TPULLM_TARGET_AVX512 inline void fd_prefetch(const void* p, std::int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (std::int64_t b = 0; b < bytes; b += 64)
    _mm_prefetch(c + b, _MM_HINT_T0);
}

/// One decode work item on AVX-512 (the steps are in the file comment). NC = dp / 16 when d is
/// 16 * NC, a compile-time width (the common head dims: strides and trip counts fold, and full
/// blocks read V, and K where no group shares it, in place); 0 = the run-time width of the item,
/// every block widened.
template <class KV, int NC>
TPULLM_TARGET_AVX512 void fd_item_avx512_t(const FdItem<KV>& it) {
  const std::int64_t nc = NC > 0 ? NC : it.dp / 16, dp = 16 * nc;
  const std::int64_t d = NC > 0 ? dp : it.d, H = it.H, G = it.G, row = kv_row_elems<KV>(d);
  const std::int64_t stride = H * row;
  const std::int64_t r0 = it.h0 * G, R = (it.h1 - it.h0) * G;
  constexpr bool kF32 = std::is_same_v<KV, float>;
  constexpr bool kInt8 = std::is_same_v<KV, kv8_t>; // widened with its scales, every block
  // kb, vb [16][dp]; o [R][dp]; p, l [R][16]
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
  const std::int64_t block_bytes =
      kFdBlock * (it.h1 - it.h0) * row * static_cast<std::int64_t>(sizeof(KV));
  for (std::int64_t jb = it.j0; jb < it.j1; jb += kFdBlock) {
    const std::int64_t n = std::min(kFdBlock, it.j1 - jb);
    const __mmask16 valid = static_cast<__mmask16>(n == kFdBlock ? 0xFFFF : (1u << n) - 1u);
    // the item's heads are contiguous in a key row only when it has them all
    if (kFdPrefetch && it.h1 - it.h0 == H && jb + (kFdPrefetchBlocks + 1) * kFdBlock <= it.j1) {
      const std::int64_t off = (jb + kFdPrefetchBlocks * kFdBlock) * stride;
      fd_prefetch(it.k + off, block_bytes);
      fd_prefetch(it.v + off, block_bytes);
    }
    for (std::int64_t h = it.h0; h < it.h1; ++h) {
      const KV* kh = it.k + (jb * H + h) * row;
      const KV* vh = it.v + (jb * H + h) * row;
      const std::int64_t hr = (h - it.h0) * G; // the head's first row in the item
      const float* q = it.qp + (r0 + hr) * dp;
      float* m = it.m + r0 + hr;
      if constexpr (!kInt8) {
        if (NC > 0 && n == kFdBlock) {
          // full block, d == dp: V (and K when only one row reads it, or when it is f32) read
          // in place, K of a GQA group widened once
          if (kF32 || G == 1) {
            fd_softmax_rows_avx512<KV>(q, kh, stride, nc, G, valid, m, o + hr * dp,
                                       p + hr * kFdBlock, lv + hr * kFdBlock);
          } else {
            fd_widen16_avx512(kh, stride, n, d, dp, kb);
            fd_softmax_rows_avx512<float>(q, kb, dp, nc, G, valid, m, o + hr * dp,
                                          p + hr * kFdBlock, lv + hr * kFdBlock);
          }
          fd_pv_avx512<KV>(o + hr * dp, dp, p + hr * kFdBlock, vh, stride, G, nc);
          continue;
        }
      }
      {
        // the last block of the item (rows past it zero), a run-time width (lanes past d zero)
        // or an int8 cache (codes times their row's scale)
        fd_widen16_avx512(kh, stride, n, d, dp, kb);
        fd_widen16_avx512(vh, stride, n, d, dp, vb);
        fd_softmax_rows_avx512<float>(q, kb, dp, nc, G, valid, m, o + hr * dp, p + hr * kFdBlock,
                                      lv + hr * kFdBlock);
        fd_pv_avx512<float>(o + hr * dp, dp, p + hr * kFdBlock, vb, dp, G, nc);
      }
    }
  }
  for (std::int64_t r = 0; r < R; ++r) {
    it.l[r0 + r] = _mm512_reduce_add_ps(_mm512_loadu_ps(lv + r * kFdBlock));
    std::copy(o + r * dp, o + r * dp + d, it.o + (r0 + r) * d);
  }
}

/// One decode work item on AVX-512: head dims 64, 128 and 256 on their compiled-in widths, any
/// other on the run-time one.
template <class KV>
TPULLM_TARGET_AVX512 void fd_item_avx512(const FdItem<KV>& it) {
  switch (it.d == it.dp ? it.dp : 0) {
  case 64:
    return fd_item_avx512_t<KV, 4>(it);
  case 128:
    return fd_item_avx512_t<KV, 8>(it);
  case 256:
    return fd_item_avx512_t<KV, 16>(it);
  default:
    return fd_item_avx512_t<KV, 0>(it);
  }
}

TPULLM_AVX512_END
#endif

} // namespace tpullm::kernels::detail
