#pragma once
/// Prefill flash attention of a bf16 KV cache on the tile unit for head dims up to 64, with O
/// resident in C tiles (docs/kernels.md round 18). The layouts of flash_attention_amx.hpp, with:
///  - q tiles of 16 grouped rows, so that O [16][dq] f32 (dq = 32 or 64: 2 or 4 C tiles) stays
///    in tiles 0-3 across a chunk of keys; S takes tiles 4-5, the A and B operands 6 and 7;
///  - K^T and V staged (fa_hw_stage_kv) once per chunk of kFaResidentChunk keys and per item, and
///    reused by the item's q tiles;
///  - Q K^T of the next key tile issued before the softmax of this one and P V of the previous
///    one after it (two score and two P buffers), so that no product waits for the softmax that
///    just wrote its input (the products and the vector work still add up on the Xeon measured:
///    docs/kernels.md round 18);
///  - a lazy reference max: a row's reference moves only when a visible score exceeds it by more
///    than kFaResidentSlack (2^8), so P is at most 2^8 and O leaves the tiles (stored, scaled,
///    reloaded) only on those rare moves. O and the row sums share the reference, so the
///    normalized result does not depend on it beyond rounding;
///  - 2^x by a degree-3 polynomial on [-1/2, 1/2] (relative error 7.5e-5, a twenty-fifth of
///    the bf16 rounding P then takes) and VSCALEFPS; masked scores are zeroed after it.
/// The tile intrinsics are used directly (amx::Hw names C tiles 0-3 only).
/// Tested against the AMX bound of docs/guarantees.md (tests/kernels/test_amx.cpp).

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "tpullm/kernels/amx_tiles.hpp"
#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/kernels/detail/flash_attention_amx.hpp"
#include "tpullm/kernels/detail/flash_attention_amx_hw.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::kernels::detail {

/// Keys staged per chunk of the resident-O item (K^T and V of 128 keys at d 64: 32 KiB).
inline constexpr std::int64_t kFaResidentChunk = 128;
/// How far (log2 units) a visible score may exceed a row's reference max before it moves.
inline constexpr float kFaResidentSlack = 8.f;

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// 2^x for finite x (16 lanes): degree-3 minimax on the fraction to the nearest integer, then
/// VSCALEFPS (underflows to 0 for very negative x). Relative error <= 7.5e-5.
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE __m512 fa_res_exp2(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.055171667120042914f), f,
                             _mm512_set1_ps(0.24261112204626337f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.69326098581846529f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.99992807355749302f));
  return _mm512_scalef_ps(p, n);
}

/// S[16][32] f32 (row stride 32) = Q[16][DQ] bf16 (row stride DQ) x one key tile's K^T tiles
/// (DQ / 32 slices of 2 KiB); C tiles 4-5, operands 6-7.
template <int DQ>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void fa_res_qk(const std::uint16_t* q,
                                                             const std::uint8_t* kt, float* s) {
  _tile_zero(4);
  _tile_zero(5);
  for (int x = 0; x < DQ; x += 32) {
    const std::uint8_t* b = kt + x / 32 * 2048;
    _tile_loadd(6, q + x, DQ * 2);
    _tile_loadd(7, b, 64);
    _tile_dpbf16ps(4, 6, 7);
    _tile_loadd(7, b + 1024, 64);
    _tile_dpbf16ps(5, 6, 7);
  }
  _tile_stored(4, s, 128);
  _tile_stored(5, s + 16, 128);
}

/// O tiles 0 .. DQ / 16 - 1 <- / -> O[16][DQ] f32 (row stride DQ).
template <int DQ>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void fa_res_o_load(const float* o) {
  _tile_loadd(0, o, DQ * 4);
  _tile_loadd(1, o + 16, DQ * 4);
  if constexpr (DQ == 64) {
    _tile_loadd(2, o + 32, DQ * 4);
    _tile_loadd(3, o + 48, DQ * 4);
  }
}
template <int DQ>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void fa_res_o_store(float* o) {
  _tile_stored(0, o, DQ * 4);
  _tile_stored(1, o + 16, DQ * 4);
  if constexpr (DQ == 64) {
    _tile_stored(2, o + 32, DQ * 4);
    _tile_stored(3, o + 48, DQ * 4);
  }
}

/// O tiles += P[16][32] bf16 (row stride 32) x one key tile's V tiles (DQ / 16 of 1 KiB).
template <int DQ>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void fa_res_pv(const std::uint16_t* p,
                                                             const std::uint8_t* vt) {
  _tile_loadd(6, p, 64);
  _tile_loadd(7, vt, 64);
  _tile_dpbf16ps(0, 6, 7);
  _tile_loadd(7, vt + 1024, 64);
  _tile_dpbf16ps(1, 6, 7);
  if constexpr (DQ == 64) {
    _tile_loadd(7, vt + 2048, 64);
    _tile_dpbf16ps(2, 6, 7);
    _tile_loadd(7, vt + 3072, 64);
    _tile_dpbf16ps(3, 6, 7);
  }
}

/// A row's reference max moves to the max of its visible scores `mx` (> the old one): the row
/// sum is rescaled, and so is O (by alpha[i], bit i of the returned mask) if it holds keys.
TPULLM_TARGET_AMX_AVX512 inline unsigned fa_res_move(float& m, float mx, float* lv, float* alpha,
                                                     int i) {
  const float mo = m;
  m = mx;
  if (mo == -__builtin_inff())
    return 0u; // O and the sum hold no key yet
  const float a = exp2_approx(mo - mx);
  alpha[i] = a;
  _mm512_storeu_ps(lv, _mm512_mul_ps(_mm512_loadu_ps(lv), _mm512_set1_ps(a)));
  return 1u << i;
}

/// The softmax of one 16 x 32 score block of a q tile against the key tile at j0: P[16][32]
/// bf16, the row sums (16 lanes a row) and reference maxima updated; returns the rows whose O
/// must be scaled by alpha[i] (their reference moved while O held keys).
TPULLM_TARGET_AMX_AVX512 inline unsigned fa_res_softmax(const float* sb, const AttentionShape& s,
                                                        const std::int32_t* pos, bool masked,
                                                        std::int64_t kend, std::int64_t j0,
                                                        float* m, float* lv, std::uint16_t* p,
                                                        float* alpha) {
  unsigned moved = 0;
  if (!masked) { // every score visible: the reference is finite after the check
    for (int i = 0; i < 16; ++i) {
      const __m512 s0 = _mm512_loadu_ps(sb + i * 32), s1 = _mm512_loadu_ps(sb + i * 32 + 16);
      const __m512 thr = _mm512_set1_ps(m[i] + kFaResidentSlack);
      if ((_mm512_cmp_ps_mask(s0, thr, _CMP_GT_OQ) | _mm512_cmp_ps_mask(s1, thr, _CMP_GT_OQ)) != 0)
        moved |=
            fa_res_move(m[i], _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)), lv + i * 16, alpha, i);
      const __m512 mv = _mm512_set1_ps(m[i]);
      const __m512 e0 = fa_res_exp2(_mm512_sub_ps(s0, mv));
      const __m512 e1 = fa_res_exp2(_mm512_sub_ps(s1, mv));
      _mm512_storeu_ps(lv + i * 16,
                       _mm512_add_ps(_mm512_loadu_ps(lv + i * 16), _mm512_add_ps(e0, e1)));
      _mm512_storeu_si512(p + i * 32, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    return moved;
  }
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i key0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(j0)), lane);
  const __m512i key1 = _mm512_add_epi32(key0, _mm512_set1_epi32(16));
  for (int i = 0; i < 16; ++i) {
    const __m512 s0 = _mm512_loadu_ps(sb + i * 32), s1 = _mm512_loadu_ps(sb + i * 32 + 16);
    // visible: key <= min(kend - 1, p) and key >= the row's first key (positions fit int32)
    const std::int64_t lo = fa_amx_row_first_key(s, pos[i]);
    const __m512i vhi =
        _mm512_set1_epi32(static_cast<int>(std::min<std::int64_t>(kend - 1, pos[i])));
    const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo));
    const __mmask16 v0 = _mm512_cmple_epi32_mask(key0, vhi) & _mm512_cmpge_epi32_mask(key0, vlo);
    const __mmask16 v1 = _mm512_cmple_epi32_mask(key1, vhi) & _mm512_cmpge_epi32_mask(key1, vlo);
    const __m512 thr = _mm512_set1_ps(m[i] + kFaResidentSlack);
    if ((_mm512_mask_cmp_ps_mask(v0, s0, thr, _CMP_GT_OQ) |
         _mm512_mask_cmp_ps_mask(v1, s1, thr, _CMP_GT_OQ)) != 0)
      moved |= fa_res_move(m[i],
                           _mm512_reduce_max_ps(_mm512_max_ps(_mm512_mask_mov_ps(ninf, v0, s0),
                                                              _mm512_mask_mov_ps(ninf, v1, s1))),
                           lv + i * 16, alpha, i);
    if (m[i] == -__builtin_inff()) { // no visible key yet, none in this tile
      _mm512_storeu_si512(p + i * 32, _mm512_setzero_si512());
      continue;
    }
    const __m512 mv = _mm512_set1_ps(m[i]);
    const __m512 e0 = _mm512_maskz_mov_ps(v0, fa_res_exp2(_mm512_sub_ps(s0, mv)));
    const __m512 e1 = _mm512_maskz_mov_ps(v1, fa_res_exp2(_mm512_sub_ps(s1, mv)));
    _mm512_storeu_ps(lv + i * 16,
                     _mm512_add_ps(_mm512_loadu_ps(lv + i * 16), _mm512_add_ps(e0, e1)));
    _mm512_storeu_si512(p + i * 32, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
  }
  return moved;
}

/// One work item on the tile unit with O resident (kv head h, q tiles [qt0, qt1) of 32 grouped
/// rows, the driver's items, run as 16-row tiles); d even and <= 64, DQ = d rounded up to 32.
template <int DQ>
TPULLM_TARGET_AMX_AVX512 void
fa_amx_item_bf16_resident(const float* q, const bf16_t* k, const bf16_t* v,
                          const std::int32_t* pos_ids, float* out, const AttentionShape& s,
                          std::int64_t h, std::int64_t qt0, std::int64_t qt1) {
  static_assert(DQ == 32 || DQ == 64, "the resident-O item takes head dims up to 64");
  const std::int64_t d = s.head_dim;
  const std::int64_t nq = 2 * (qt1 - qt0), row0 = qt0 * 32; // 16-row tiles
  constexpr std::int64_t kt_bytes = DQ / 32 * 2048, vt_bytes = DQ / 16 * 1024;
  FaAmxScratch& w = fa_amx_scratch();
  // two score and two P buffers
  const FaHwBuffers b = fa_hw_buffers(w, nq * 16, DQ, kFaResidentChunk / 32 * kt_bytes,
                                      kFaResidentChunk / 32 * vt_bytes, 2 * 16 * 32, 2 * 16 * 32);
  std::uint16_t* const qb = b.q;
  float* const ob = b.o;
  float* const lvb = b.lv;
  std::uint8_t* const kt = b.kt;
  std::uint8_t* const vt = b.vt;
  float* const sb = b.s;
  std::uint16_t* const pb = b.p;
  const FaAmxItemPlan plan = fa_amx_item_plan(s, pos_ids, 2 * qt0, nq, w.pos, 16);
  fa_hw_stage_q(q, s, h, row0, nq * 16, DQ, qb);
  amx_configure<amx::Hw>(amx_bf16_config());
  const std::int64_t kvs = s.kv_heads * d;
  float alpha[16];
  for (std::int64_t c0 = plan.kstart / 32 * 32; c0 < plan.kend; c0 += kFaResidentChunk) {
    const std::int64_t c1 = std::min(c0 + kFaResidentChunk, plan.kend);
    for (std::int64_t j0 = c0; j0 < c1; j0 += 32)
      fa_hw_stage_kv(k + h * d, v + h * d, kvs, d, DQ, j0, std::min<std::int64_t>(32, c1 - j0),
                     reinterpret_cast<std::uint32_t*>(kt + (j0 - c0) / 32 * kt_bytes),
                     reinterpret_cast<std::uint32_t*>(vt + (j0 - c0) / 32 * vt_bytes));
    for (std::int64_t t = 0; t < nq; ++t) {
      // the tile's visible key tiles in this chunk are contiguous
      std::int64_t jb = c0;
      while (jb < c1 && plan.skips(s, t, jb))
        jb += 32;
      std::int64_t je = jb;
      while (je < c1 && !plan.skips(s, t, je))
        je += 32;
      if (jb == je)
        continue;
      const std::uint16_t* qt = qb + t * 16 * DQ;
      float* o = ob + t * 16 * DQ;
      float* m = b.m + t * 16;
      float* lv = lvb + t * 16 * 16;
      const std::int32_t* pos = w.pos.data() + t * 16;
      const std::int64_t kend = plan.tend[static_cast<std::size_t>(t)];
      fa_res_o_load<DQ>(o);
      fa_res_qk<DQ>(qt, kt + (jb - c0) / 32 * kt_bytes, sb);
      int cur = 0;
      const std::uint8_t* pending =
          nullptr; // V tiles of the key tile whose P is in the other buffer
      for (std::int64_t j0 = jb; j0 < je; j0 += 32, cur ^= 1) {
        if (j0 + 32 < je) // the next tile's scores, issued before this one's softmax
          fa_res_qk<DQ>(qt, kt + (j0 + 32 - c0) / 32 * kt_bytes, sb + (cur ^ 1) * 512);
        const unsigned moved = fa_res_softmax(sb + cur * 512, s, pos, plan.masked(s, t, j0), kend,
                                              j0, m, lv, pb + cur * 512, alpha);
        if (pending != nullptr) // the previous tile's P V, a softmax after its P was written
          fa_res_pv<DQ>(pb + (cur ^ 1) * 512, pending);
        if (moved != 0) {
          fa_res_o_store<DQ>(o);
          for (int i = 0; i < 16; ++i)
            if (moved >> i & 1u)
              for (int x = 0; x < DQ; x += 16)
                _mm512_storeu_ps(o + i * DQ + x, _mm512_mul_ps(_mm512_loadu_ps(o + i * DQ + x),
                                                               _mm512_set1_ps(alpha[i])));
          fa_res_o_load<DQ>(o);
        }
        pending = vt + (j0 - c0) / 32 * vt_bytes;
      }
      fa_res_pv<DQ>(pb + (cur ^ 1) * 512, pending);
      fa_res_o_store<DQ>(o);
    }
  }
  amx_release<amx::Hw>();
  fa_hw_write_out(ob, lvb, s, h, row0, nq * 16, DQ, out);
}

#pragma GCC diagnostic pop
#endif

} // namespace tpullm::kernels::detail
