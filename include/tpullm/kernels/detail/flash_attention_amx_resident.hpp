#pragma once
/// Prefill flash attention of a bf16, f16 or int8 KV cache on the tile unit for head dims up to
/// 64, with O resident in C tiles (docs/kernels.md rounds 18-19). The layouts of
/// flash_attention_amx.hpp, with:
///  - q tiles of 16 grouped rows, so that O [16][dq] f32 (dq = 32 or 64: 2 or 4 C tiles) stays
///    in tiles 0-3 across a chunk of keys; S takes tiles 4-5, the A and B operands 6 and 7;
///  - K^T and V staged (fa_st_stage_kv) once per chunk of kFaResidentChunk keys and per item, and
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
///    the bf16 rounding P then takes) and VSCALEFPS; masked scores are zeroed after it;
///  - the cache's values unchanged (flash_attention_amx_stage.hpp): an int8 cache's codes with
///    its key scales applied to the scores and its value scales to P (the l sums take P
///    unscaled); an f16 cache as exact hi + lo bf16 terms. For both, Q is carried in three bf16
///    terms (within 2^-27 of its f32 value), P in two (2^-18) and 2^x by exp2_avx512, so they
///    keep the vector path's bound (2e-5 max|v|), not the bf16 one: Q K^T takes three products
///    (int8) or five (f16: all but q2 kl), P V two (int8) or three (f16).
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
#include "tpullm/kernels/detail/flash_attention_amx_stage.hpp"
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
/// VSCALEFPS (underflows to 0 for very negative x). Relative error <= 7.5e-5; Accurate (the f16
/// cache, held to the vector path's bound): exp2_avx512, relative error ~2e-7.
template <bool Accurate>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE __m512 fa_res_exp2(__m512 x) {
  if constexpr (Accurate)
    return exp2_avx512(x);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.055171667120042914f), f,
                             _mm512_set1_ps(0.24261112204626337f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.69326098581846529f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.99992807355749302f));
  return _mm512_scalef_ps(p, n);
}

/// S[16][32] f32 (row stride 32) = Q[16][DQ] bf16 (row stride DQ) x one key tile's K^T tiles
/// (DQ / 32 slices of 2 KiB); C tiles 4-5, operands 6-7. Exact: Q = q + q1 + q2 (the terms
/// `q_plane` elements apart), each term times K; KSplit: K = kh + kl (kl `lo_off` bytes past kh),
/// and S = (q + q1 + q2) kh + (q + q1) kl: all but q2 kl (<= 2^-27 |q| |k|).
template <int DQ, bool Exact, bool KSplit>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void
fa_res_qk(const std::uint16_t* q, std::int64_t q_plane, const std::uint8_t* kt, std::int64_t lo_off,
          float* s) {
  _tile_zero(4);
  _tile_zero(5);
  for (int x = 0; x < DQ; x += 32) {
    const std::uint8_t* b = kt + x / 32 * 2048;
    for (int t = 0; t < (Exact ? 3 : 1); ++t) {
      _tile_loadd(6, q + t * q_plane + x, DQ * 2);
      _tile_loadd(7, b, 64);
      _tile_dpbf16ps(4, 6, 7);
      _tile_loadd(7, b + 1024, 64);
      _tile_dpbf16ps(5, 6, 7);
      if (KSplit && t < 2) {
        _tile_loadd(7, b + lo_off, 64);
        _tile_dpbf16ps(4, 6, 7);
        _tile_loadd(7, b + lo_off + 1024, 64);
        _tile_dpbf16ps(5, 6, 7);
      }
    }
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

/// O tiles += P[16][32] bf16 (row stride 32) x the V tiles at vt (DQ / 16 of 1 KiB).
template <int DQ>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void fa_res_pv1(const std::uint8_t* vt) {
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

/// O tiles += P[16][32] bf16 (row stride 32) x one key tile's V tiles (DQ / 16 of 1 KiB).
/// Exact: P = p + pl, each term times V; VSplit: V = vt + vt_lo (`lo_off` bytes past), and
/// O += p vt + p vt_lo + pl vt.
template <int DQ, bool Exact, bool VSplit>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void
fa_res_pv(const std::uint16_t* p, const std::uint16_t* pl, const std::uint8_t* vt,
          std::int64_t lo_off) {
  _tile_loadd(6, p, 64);
  fa_res_pv1<DQ>(vt);
  if constexpr (VSplit)
    fa_res_pv1<DQ>(vt + lo_off);
  if constexpr (Exact) {
    _tile_loadd(6, pl, 64);
    fa_res_pv1<DQ>(vt);
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

/// Row i of P (e0, e1: its 32 weights in f32) into p (and its remainder into pl when Exact),
/// each weight times its key's value scale first when Scaled.
template <bool Scaled, bool Exact>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void
fa_res_store_p(__m512 e0, __m512 e1, __m512 vs0, __m512 vs1, std::uint16_t* p, std::uint16_t* pl) {
  if constexpr (Scaled) {
    e0 = _mm512_mul_ps(e0, vs0);
    e1 = _mm512_mul_ps(e1, vs1);
  }
  const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);
  _mm512_storeu_si512(p, h);
  if constexpr (Exact) {
    const __m512 h0 = fa_st_bf16_f32(_mm512_castsi512_si256(h));
    const __m512 h1 = fa_st_bf16_f32(_mm512_extracti64x4_epi64(h, 1));
    _mm512_storeu_si512(pl,
                        (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(e1, h1), _mm512_sub_ps(e0, h0)));
  }
  (void)pl;
  (void)vs0;
  (void)vs1;
}

/// A row's 32 scores (times the keys' scales when Scaled).
template <bool Scaled>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void
fa_res_load_s(const float* row, __m512 ks0, __m512 ks1, __m512& s0, __m512& s1) {
  s0 = _mm512_loadu_ps(row);
  s1 = _mm512_loadu_ps(row + 16);
  if constexpr (Scaled) {
    s0 = _mm512_mul_ps(s0, ks0);
    s1 = _mm512_mul_ps(s1, ks1);
  }
  (void)ks0;
  (void)ks1;
}

/// The softmax of one 16 x 32 score block of a q tile against the key tile at j0: P[16][32]
/// bf16, the row sums (16 lanes a row) and reference maxima updated; returns the rows whose O
/// must be scaled by alpha[i] (their reference moved while O held keys). Scaled: the scores are
/// multiplied by the keys' scales ks[32] first and P by the values' scales vs[32] (int8 cache);
/// Exact: the accurate exp2, and P's remainder goes to pl (f16 and int8 caches).
template <bool Scaled, bool Exact>
TPULLM_TARGET_AMX_AVX512 inline unsigned
fa_res_softmax(const float* sb, const AttentionShape& s, const std::int32_t* pos, bool masked,
               std::int64_t kend, std::int64_t j0, float* m, float* lv, std::uint16_t* p,
               std::uint16_t* pl, const float* ks, const float* vs, float* alpha) {
  unsigned moved = 0;
  __m512 ks0 = _mm512_setzero_ps(), ks1 = ks0, vs0 = ks0, vs1 = ks0;
  if constexpr (Scaled) {
    ks0 = _mm512_loadu_ps(ks);
    ks1 = _mm512_loadu_ps(ks + 16);
    vs0 = _mm512_loadu_ps(vs);
    vs1 = _mm512_loadu_ps(vs + 16);
  }
  (void)ks;
  (void)vs;
  if (!masked) { // every score visible: the reference is finite after the check
    for (int i = 0; i < 16; ++i) {
      __m512 s0, s1;
      fa_res_load_s<Scaled>(sb + i * 32, ks0, ks1, s0, s1);
      const __m512 thr = _mm512_set1_ps(m[i] + kFaResidentSlack);
      if ((_mm512_cmp_ps_mask(s0, thr, _CMP_GT_OQ) | _mm512_cmp_ps_mask(s1, thr, _CMP_GT_OQ)) != 0)
        moved |=
            fa_res_move(m[i], _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)), lv + i * 16, alpha, i);
      const __m512 mv = _mm512_set1_ps(m[i]);
      const __m512 e0 = fa_res_exp2<Exact>(_mm512_sub_ps(s0, mv));
      const __m512 e1 = fa_res_exp2<Exact>(_mm512_sub_ps(s1, mv));
      _mm512_storeu_ps(lv + i * 16,
                       _mm512_add_ps(_mm512_loadu_ps(lv + i * 16), _mm512_add_ps(e0, e1)));
      fa_res_store_p<Scaled, Exact>(e0, e1, vs0, vs1, p + i * 32, Exact ? pl + i * 32 : nullptr);
    }
    return moved;
  }
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i key0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(j0)), lane);
  const __m512i key1 = _mm512_add_epi32(key0, _mm512_set1_epi32(16));
  for (int i = 0; i < 16; ++i) {
    __m512 s0, s1;
    fa_res_load_s<Scaled>(sb + i * 32, ks0, ks1, s0, s1);
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
      if constexpr (Exact)
        _mm512_storeu_si512(pl + i * 32, _mm512_setzero_si512());
      continue;
    }
    const __m512 mv = _mm512_set1_ps(m[i]);
    const __m512 e0 = _mm512_maskz_mov_ps(v0, fa_res_exp2<Exact>(_mm512_sub_ps(s0, mv)));
    const __m512 e1 = _mm512_maskz_mov_ps(v1, fa_res_exp2<Exact>(_mm512_sub_ps(s1, mv)));
    _mm512_storeu_ps(lv + i * 16,
                     _mm512_add_ps(_mm512_loadu_ps(lv + i * 16), _mm512_add_ps(e0, e1)));
    fa_res_store_p<Scaled, Exact>(e0, e1, vs0, vs1, p + i * 32, Exact ? pl + i * 32 : nullptr);
  }
  return moved;
}

/// One work item on the tile unit with O resident (kv head h, q tiles [qt0, qt1) of 32 grouped
/// rows, the driver's items, run as 16-row tiles); d even and <= 64, DQ = d rounded up to 32.
/// KV: bf16_t, f16_t or kv8_t (k, v: the whole cache, [S][kv_heads] head rows).
template <int DQ, class KV>
TPULLM_TARGET_AMX_AVX512 void fa_amx_item_resident(const float* q, const KV* k, const KV* v,
                                                   const std::int32_t* pos_ids, float* out,
                                                   const AttentionShape& s, std::int64_t h,
                                                   std::int64_t qt0, std::int64_t qt1) {
  static_assert(DQ == 32 || DQ == 64, "the resident-O item takes head dims up to 64");
  constexpr bool split = kFaResSplit<KV>, scaled = kFaResScaled<KV>, exact = kFaResExact<KV>;
  constexpr std::int64_t terms = split ? 2 : 1;
  const std::int64_t d = s.head_dim;
  const std::int64_t nq = 2 * (qt1 - qt0), row0 = qt0 * 32; // 16-row tiles
  constexpr std::int64_t kt_bytes = DQ / 32 * 2048, vt_bytes = DQ / 16 * 1024;
  constexpr std::int64_t kt_chunk = kFaResidentChunk / 32 * kt_bytes; // a chunk's hi K^T tiles
  constexpr std::int64_t vt_chunk = kFaResidentChunk / 32 * vt_bytes;
  constexpr std::int64_t scale_bytes = scaled ? 2 * kFaResidentChunk * 4 : 0;
  FaAmxScratch& w = fa_amx_scratch();
  // two score and two P buffers (P's remainders after them when exact); an int8 cache's key and
  // value scales of the chunk after its V tiles
  const FaHwBuffers b =
      fa_hw_buffers(w, nq * 16, DQ, terms * kt_chunk, terms * vt_chunk + scale_bytes, 2 * 16 * 32,
                    (exact ? 2 : 1) * 2 * 16 * 32, exact ? 3 : 1);
  std::uint16_t* const qb = b.q;
  float* const ob = b.o;
  float* const lvb = b.lv;
  std::uint8_t* const kt = b.kt;
  std::uint8_t* const vt = b.vt;
  // the scales (int8) and lo tiles (f16) exist only for their cache types
  float* const ksb = scaled ? reinterpret_cast<float*>(vt + terms * vt_chunk) : nullptr;
  float* const vsb = scaled ? ksb + kFaResidentChunk : nullptr;
  auto at = [](auto* base, std::int64_t off, bool used) { return used ? base + off : nullptr; };
  float* const sb = b.s;
  std::uint16_t* const pb = b.p;
  const FaAmxItemPlan plan = fa_amx_item_plan(s, pos_ids, 2 * qt0, nq, w.pos, 16);
  fa_hw_stage_q(q, s, h, row0, nq * 16, DQ, qb, exact ? 3 : 1);
  amx_configure<amx::Hw>(amx_bf16_config());
  const std::int64_t row = kv_row_elems<KV>(d), kvs = s.kv_heads * row;
  float alpha[16];
  for (std::int64_t c0 = plan.kstart / 32 * 32; c0 < plan.kend; c0 += kFaResidentChunk) {
    const std::int64_t c1 = std::min(c0 + kFaResidentChunk, plan.kend);
    for (std::int64_t j0 = c0; j0 < c1; j0 += 32) {
      const std::int64_t kt_at = (j0 - c0) / 32 * kt_bytes, vt_at = (j0 - c0) / 32 * vt_bytes;
      fa_st_stage_kv<KV>(k + h * row, v + h * row, kvs, d, DQ, j0,
                         std::min<std::int64_t>(32, c1 - j0),
                         reinterpret_cast<std::uint32_t*>(kt + kt_at),
                         reinterpret_cast<std::uint32_t*>(vt + vt_at),
                         reinterpret_cast<std::uint32_t*>(at(kt, kt_chunk + kt_at, split)),
                         reinterpret_cast<std::uint32_t*>(at(vt, vt_chunk + vt_at, split)),
                         at(ksb, j0 - c0, scaled), at(vsb, j0 - c0, scaled));
    }
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
      fa_res_qk<DQ, exact, split>(qt, nq * 16 * DQ, kt + (jb - c0) / 32 * kt_bytes, kt_chunk, sb);
      int cur = 0;
      const std::uint8_t* pending =
          nullptr; // V tiles of the key tile whose P is in the other buffer
      for (std::int64_t j0 = jb; j0 < je; j0 += 32, cur ^= 1) {
        if (j0 + 32 < je) // the next tile's scores, issued before this one's softmax
          fa_res_qk<DQ, exact, split>(qt, nq * 16 * DQ, kt + (j0 + 32 - c0) / 32 * kt_bytes,
                                      kt_chunk, sb + (cur ^ 1) * 512);
        const unsigned moved = fa_res_softmax<scaled, exact>(
            sb + cur * 512, s, pos, plan.masked(s, t, j0), kend, j0, m, lv, pb + cur * 512,
            at(pb, 1024 + cur * 512, exact), at(ksb, j0 - c0, scaled), at(vsb, j0 - c0, scaled),
            alpha);
        if (pending != nullptr) // the previous tile's P V, a softmax after its P was written
          fa_res_pv<DQ, exact, split>(pb + (cur ^ 1) * 512, at(pb, 1024 + (cur ^ 1) * 512, exact),
                                      pending, vt_chunk);
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
      fa_res_pv<DQ, exact, split>(pb + (cur ^ 1) * 512, at(pb, 1024 + (cur ^ 1) * 512, exact),
                                  pending, vt_chunk);
      fa_res_o_store<DQ>(o);
    }
  }
  amx_release<amx::Hw>();
  fa_hw_write_out(ob, lvb, s, h, row0, nq * 16, DQ, out);
}

#pragma GCC diagnostic pop
#endif

} // namespace tpullm::kernels::detail
