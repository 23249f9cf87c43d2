#pragma once
/// Prefill flash attention of a bf16 KV cache on the tile unit, with every step around the tiles
/// in AVX-512 (the layouts and numerics of flash_attention_amx.hpp, whose scalar body remains
/// the emulator's):
///  - Q rows scaled by scale * log2 e and rounded to bf16 (RNE, as amx_bf16_rne) 16 lanes at a
///    time;
///  - a key tile's K^T B tiles as 16 x 16 dword transposes of the cache's rows (a dword is two
///    adjacent bf16 of d, so a bf16 row is already the pair layout), rows past the keys zero;
///  - its V B tiles as two keys' rows interleaved per dword (VPMOVZXWD, a shift and an OR);
///  - the causal / window mask, the running max, 2^(s - m) (exp2_avx512) and the row sums on
///    the two 16-lane halves of each score row, P rounded to bf16 by VCVTNE2PS2BF16;
///  - O rescaled by alpha on vectors of d only when its row's max moved, P V accumulated into
///    O's own C tiles, and the final O / l on vectors of d.
/// Results differ from the emulator's only by exp2_avx512 against exp2_approx and the order of
/// each row's sums (the row sum in 16 lanes, P V added onto O in the tile): within 1.2e-7 of it
/// on the scratch shapes of docs/kernels.md round 17, and tested against the AMX bound of
/// docs/guarantees.md. Head dims up to 64 take flash_attention_amx_resident.hpp instead (O kept
/// in tiles); the driver is flash_attention_amx_driver.hpp.

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tpullm/kernels/amx_tiles.hpp"
#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/kernels/detail/flash_attention_amx.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::kernels::detail {

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// 16 f32 lanes -> 16 bf16 bits, round to nearest even, NaN kept (quiet): amx_bf16_rne.
TPULLM_TARGET_AMX_AVX512 inline __m256i fa_hw_bf16_rne(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
  r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), u,
                           _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/// Transposes 16 rows of 16 dwords in place (r[i] lane j <-> r[j] lane i).
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void fa_hw_transpose16(__m512i* r) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // column 4L + j: lane g of it is lane L of u[4g + j]
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    r[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

/// K^T and V B tiles of keys [j0, j0 + nk) (nk <= 32) of kv head h: kt [dq / 32][2][16][16]
/// dwords, vt [dq / 16][16][16] dwords (flash_attention_amx.hpp's layouts), zero past the keys
/// and past d (d even).
TPULLM_TARGET_AMX_AVX512 inline void
fa_hw_stage_kv(const bf16_t* k, const bf16_t* v, std::int64_t kvs, std::int64_t d, std::int64_t dq,
               std::int64_t j0, std::int64_t nk, std::uint32_t* kt, std::uint32_t* vt) {
  const std::int64_t dw = d / 2; // dwords of a row
  for (std::int64_t sl = 0; sl < dq / 32; ++sl) {
    const std::int64_t left = std::clamp<std::int64_t>(dw - 16 * sl, 0, 16);
    const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
    for (std::int64_t kh = 0; kh < 2; ++kh) {
      __m512i r[16];
      for (std::int64_t n = 0; n < 16; ++n) {
        const std::int64_t key = 16 * kh + n;
        r[n] = key < nk ? _mm512_maskz_loadu_epi32(m, k + (j0 + key) * kvs + 32 * sl)
                        : _mm512_setzero_si512();
      }
      fa_hw_transpose16(r);
      std::uint32_t* dst = kt + sl * 512 + kh * 256;
      for (int i = 0; i < 16; ++i)
        _mm512_storeu_si512(dst + 16 * i, r[i]);
    }
  }
  for (std::int64_t c = 0; c < dq / 16; ++c) {
    const std::int64_t left = std::clamp<std::int64_t>(d - 16 * c, 0, 16);
    const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
    for (std::int64_t p = 0; p < 16; ++p) {
      const std::int64_t n = 2 * p;
      const __m256i lo = n < nk ? _mm256_maskz_loadu_epi16(m, v + (j0 + n) * kvs + 16 * c)
                                : _mm256_setzero_si256();
      const __m256i hi = n + 1 < nk ? _mm256_maskz_loadu_epi16(m, v + (j0 + n + 1) * kvs + 16 * c)
                                    : _mm256_setzero_si256();
      const __m512i w = _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                                        _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
      _mm512_storeu_si512(vt + c * 256 + p * 16, w);
    }
  }
}

/// The tile-unit items' scratch (a thread's FaAmxScratch), every buffer from a 64-byte boundary
/// so that no tile row straddles two cache lines: q [rows][dq] bf16, o [rows][dq] f32 and the
/// row sums lv [rows][16] zeroed, the maxima m [rows] at -inf; kt, vt, s and p of the sizes given
/// (q holds q_copies such arrays back to back).
struct FaHwBuffers {
  std::uint16_t* q;
  float* o;
  float* lv;
  float* m;
  std::uint8_t* kt;
  std::uint8_t* vt;
  float* s;
  std::uint16_t* p;
};
inline FaHwBuffers fa_hw_buffers(FaAmxScratch& w, std::int64_t rows, std::int64_t dq,
                                 std::size_t kt_bytes, std::size_t vt_bytes, std::size_t s_floats,
                                 std::size_t p_elems, std::size_t q_copies = 1) {
  const auto r = static_cast<std::size_t>(rows), rd = static_cast<std::size_t>(rows * dq);
  FaHwBuffers b{fa_amx_aligned(w.q, rd * q_copies), fa_amx_aligned(w.o, rd),
                fa_amx_aligned(w.lv, r * 16),       nullptr,
                fa_amx_aligned(w.kt, kt_bytes),     fa_amx_aligned(w.vt, vt_bytes),
                fa_amx_aligned(w.s, s_floats),      fa_amx_aligned(w.p, p_elems)};
  std::fill(b.o, b.o + rd, 0.f);
  std::fill(b.lv, b.lv + r * 16, 0.f);
  w.m.assign(r, -__builtin_inff());
  b.m = w.m.data();
  return b;
}

/// Q rows [row0, row0 + rows) of kv head h's grouped rows (row r = token r / G, head h G + r % G)
/// scaled by scale * log2 e and rounded to bf16 into dst [rows][dq] (zero past d and for the
/// padding rows past L_valid * G). With terms > 1, what each rounding left is rounded to bf16
/// again into the next [rows][dq] array after dst: the sum of 3 terms is the scaled row within
/// 2^-27 of it (each term's residual is at most 2^-9 of the last).
TPULLM_TARGET_AMX_AVX512 inline void fa_hw_stage_q(const float* q, const AttentionShape& s,
                                                   std::int64_t h, std::int64_t row0,
                                                   std::int64_t rows, std::int64_t dq,
                                                   std::uint16_t* dst, int terms = 1) {
  const std::int64_t d = s.head_dim, G = s.q_heads / s.kv_heads, M = s.L_valid * G;
  const __m512 qscale = _mm512_set1_ps(s.scale * 1.4426950408889634f);
  const std::int64_t plane = rows * dq;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t r = row0 + i;
    if (r >= M) {
      for (int t = 0; t < terms; ++t)
        std::fill(dst + t * plane + i * dq, dst + t * plane + i * dq + dq, std::uint16_t{0});
      continue;
    }
    const float* qr = q + ((r / G) * s.q_heads + h * G + r % G) * d;
    for (std::int64_t x = 0; x < dq; x += 16) {
      const std::int64_t left = std::clamp<std::int64_t>(d - x, 0, 16);
      __m512 qv = _mm512_mul_ps(
          _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1u), qr + x), qscale);
      for (int t = 0; t < terms; ++t) {
        const __m256i b = fa_hw_bf16_rne(qv);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + t * plane + i * dq + x), b);
        qv =
            _mm512_sub_ps(qv, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
      }
    }
  }
}

/// out rows of grouped rows [row0, row0 + rows) (padding rows skipped) = O / l: O [rows][dq]
/// f32, l as 16 lane sums a row, lv [rows][16].
TPULLM_TARGET_AMX_AVX512 inline void fa_hw_write_out(const float* o, const float* lv,
                                                     const AttentionShape& s, std::int64_t h,
                                                     std::int64_t row0, std::int64_t rows,
                                                     std::int64_t dq, float* out) {
  const std::int64_t d = s.head_dim, G = s.q_heads / s.kv_heads, M = s.L_valid * G;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t r = row0 + i;
    if (r >= M)
      continue;
    float* dst = out + ((r / G) * s.q_heads + h * G + r % G) * d;
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_loadu_ps(lv + i * 16)));
    for (std::int64_t x = 0; x < d; x += 16) {
      const std::int64_t left = std::min<std::int64_t>(d - x, 16);
      _mm512_mask_storeu_ps(dst + x, static_cast<__mmask16>((1u << left) - 1u),
                            _mm512_mul_ps(_mm512_loadu_ps(o + i * dq + x), inv));
    }
  }
}

/// O[32][dq] f32 += P[32][32] (bf16) x V tiles (dq / 16 tiles of 1 KiB), O's C tiles loaded and
/// stored in place (row stride dq floats): fa_amx_pv accumulating into O instead of a fresh C.
TPULLM_TARGET_AMX_AVX512 inline void fa_hw_pv_into(const std::uint16_t* p, const std::uint8_t* vt,
                                                   std::int64_t dq, float* o) {
  using T = amx::Hw;
  T::load<4>(p, 64);
  T::load<5>(p + 16 * 32, 64);
  for (std::int64_t x = 0; x < dq; x += 32) {
    const std::uint8_t* b = vt + x / 16 * 1024;
    T::load<0>(o + x, dq * 4);
    T::load<1>(o + x + 16, dq * 4);
    T::load<2>(o + 16 * dq + x, dq * 4);
    T::load<3>(o + 16 * dq + x + 16, dq * 4);
    T::load<6>(b, 64);
    T::load<7>(b + 1024, 64);
    T::dpbf16ps<0, 4, 6>();
    T::dpbf16ps<1, 4, 7>();
    T::dpbf16ps<2, 5, 6>();
    T::dpbf16ps<3, 5, 7>();
    T::store<0>(o + x, dq * 4);
    T::store<1>(o + x + 16, dq * 4);
    T::store<2>(o + 16 * dq + x, dq * 4);
    T::store<3>(o + 16 * dq + x + 16, dq * 4);
  }
}

/// One work item on the tile unit (kv head h, q tiles [qt0, qt1) of 32 grouped rows; the item of
/// flash_attention_amx.hpp, same scratch and tile configuration). d must be even.
TPULLM_TARGET_AMX_AVX512 inline void fa_amx_item_bf16_hw(const float* q, const bf16_t* k,
                                                         const bf16_t* v,
                                                         const std::int32_t* pos_ids, float* out,
                                                         const AttentionShape& s, std::int64_t h,
                                                         std::int64_t qt0, std::int64_t qt1) {
  using Tiles = amx::Hw;
  const std::int64_t d = s.head_dim;
  const std::int64_t dq = (d + 31) / 32 * 32, nq = qt1 - qt0;
  FaAmxScratch& w = fa_amx_scratch();
  const FaHwBuffers b = fa_hw_buffers(w, nq * 32, dq, static_cast<std::size_t>(dq / 32 * 2048),
                                      static_cast<std::size_t>(dq / 16 * 1024), 32 * 32, 32 * 32);
  std::uint16_t* const qb = b.q;
  float* const ob = b.o;
  float* const lvb = b.lv;
  std::uint8_t* const ktb = b.kt;
  std::uint8_t* const vtb = b.vt;
  float* const sb = b.s;
  std::uint16_t* const pb = b.p;
  const FaAmxItemPlan plan = fa_amx_item_plan(s, pos_ids, qt0, nq, w.pos);
  fa_hw_stage_q(q, s, h, qt0 * 32, nq * 32, dq, qb);
  amx_configure<Tiles>(amx_bf16_config());
  const std::int64_t kvs = s.kv_heads * d;
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  auto* kt = reinterpret_cast<std::uint32_t*>(ktb);
  auto* vt = reinterpret_cast<std::uint32_t*>(vtb);
  for (std::int64_t j0 = plan.kstart / 32 * 32; j0 < plan.kend; j0 += 32) {
    const std::int64_t nk = std::min<std::int64_t>(32, plan.kend - j0);
    fa_hw_stage_kv(k + h * d, v + h * d, kvs, d, dq, j0, nk, kt, vt);
    for (std::int64_t t = 0; t < nq; ++t) {
      if (plan.skips(s, t, j0))
        continue;
      const std::int64_t kend = plan.tend[static_cast<std::size_t>(t)];
      fa_amx_qk<Tiles>(qb + t * 32 * dq, dq, ktb, sb);
      const bool masked = plan.masked(s, t, j0);
      float* m = b.m + t * 32;
      float* lv = lvb + t * 32 * 16;
      float* o = ob + t * 32 * dq;
      const __m512i key0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(j0)), lane);
      const __m512i key1 = _mm512_add_epi32(key0, _mm512_set1_epi32(16));
      for (std::int64_t i = 0; i < 32; ++i) {
        const float* sr = sb + i * 32;
        __m512 s0 = _mm512_loadu_ps(sr), s1 = _mm512_loadu_ps(sr + 16);
        if (masked) {
          const std::int32_t p = w.pos[static_cast<std::size_t>(t * 32 + i)];
          const std::int64_t lo = fa_amx_row_first_key(s, p);
          // visible: key <= min(kend - 1, p) and key >= lo (positions fit int32)
          const __m512i vhi =
              _mm512_set1_epi32(static_cast<int>(std::min<std::int64_t>(kend - 1, p)));
          const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo));
          s0 = _mm512_mask_blend_ps(
              _mm512_cmple_epi32_mask(key0, vhi) & _mm512_cmpge_epi32_mask(key0, vlo), ninf, s0);
          s1 = _mm512_mask_blend_ps(
              _mm512_cmple_epi32_mask(key1, vhi) & _mm512_cmpge_epi32_mask(key1, vlo), ninf, s1);
        }
        // the running max moves only when a score exceeds it; O and the sums are rescaled then
        const float mo = m[i];
        const __m512 mov = _mm512_set1_ps(mo);
        float mx = mo;
        if ((_mm512_cmp_ps_mask(s0, mov, _CMP_GT_OQ) | _mm512_cmp_ps_mask(s1, mov, _CMP_GT_OQ)) !=
            0)
          mx = std::max(mo, _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)));
        mx = mx == -__builtin_inff() ? 0.f : mx; // no visible key yet: keep a finite reference
        if (mx != mo) {
          const __m512 a = _mm512_set1_ps(exp2_approx(mo - mx));
          float* orow = o + i * dq;
          for (std::int64_t x = 0; x < dq; x += 16)
            _mm512_storeu_ps(orow + x, _mm512_mul_ps(_mm512_loadu_ps(orow + x), a));
          _mm512_storeu_ps(lv + i * 16, _mm512_mul_ps(_mm512_loadu_ps(lv + i * 16), a));
          m[i] = mx;
        }
        const __m512 mv = _mm512_set1_ps(mx);
        const __m512 e0 = exp2_avx512(_mm512_sub_ps(s0, mv));
        const __m512 e1 = exp2_avx512(_mm512_sub_ps(s1, mv));
        _mm512_storeu_ps(lv + i * 16,
                         _mm512_add_ps(_mm512_loadu_ps(lv + i * 16), _mm512_add_ps(e0, e1)));
        _mm512_storeu_si512(pb + i * 32, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
      }
      fa_hw_pv_into(pb, vtb, dq, o);
    }
  }
  amx_release<Tiles>();
  fa_hw_write_out(ob, lvb, s, h, qt0 * 32, nq * 32, dq, out);
}

#pragma GCC diagnostic pop
#endif

} // namespace tpullm::kernels::detail
