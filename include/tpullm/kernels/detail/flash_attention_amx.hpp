#pragma once
/// Prefill flash attention with Q K^T and P V on AMX-BF16 and the online softmax in f32, written
/// against kernels/amx_tiles.hpp (tile unit or emulator).
///
/// Per kv head, the grouped rows (row r = token r / G, head h G + r % G) are cut into q tiles of
/// 32 rows and the keys into tiles of 32. Q (scaled by scale * log2 e) is rounded to bf16 once;
/// each key tile's K and V rows are rounded to bf16 and re-laid once per work item into B tiles
/// (K^T: dword (r, n) = K[n][2r] | K[n][2r + 1] << 16 per 32-wide slice of d; V: dword (r, c) =
/// V[2r][c] | V[2r + 1][c] << 16 per 16 columns of d) and reused by every q tile of the item.
/// S = Q K^T accumulates in four f32 C tiles (2 row halves x 2 key halves) over d; the causal
/// mask, running max / sum and P (rounded to bf16) are f32 / bf16 row-major work; P V goes to
/// C tiles 32 columns of d at a time and O = O * alpha + P V in f32.
/// This body is scalar around the tiles: it is the emulator's, and the tile unit's for a cache
/// other than bf16 or an odd head dim (a bf16 cache runs flash_attention_amx_resident.hpp up to
/// d 64 and flash_attention_amx_hw.hpp past it; the driver is flash_attention_amx_driver.hpp).

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tpullm/kernels/amx_tiles.hpp"
#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/kernels/detail/matmul_amx.hpp"

namespace tpullm::kernels::detail {

/// S[32][32] f32 = Q[32][dq] (bf16, row stride dq) x K^T tiles (dq / 32 slices of 2 KiB).
template <class Tiles>
TPULLM_TARGET_AMX void fa_amx_qk(const std::uint16_t* q, std::int64_t dq, const std::uint8_t* kt,
                                 float* s) {
  Tiles::template zero<0>();
  Tiles::template zero<1>();
  Tiles::template zero<2>();
  Tiles::template zero<3>();
  for (std::int64_t x = 0; x < dq; x += 32) {
    const std::uint8_t* b = kt + x / 32 * 2048;
    Tiles::template load<4>(q + x, dq * 2);
    Tiles::template load<5>(q + 16 * dq + x, dq * 2);
    Tiles::template load<6>(b, 64);
    Tiles::template load<7>(b + 1024, 64);
    Tiles::template dpbf16ps<0, 4, 6>();
    Tiles::template dpbf16ps<1, 4, 7>();
    Tiles::template dpbf16ps<2, 5, 6>();
    Tiles::template dpbf16ps<3, 5, 7>();
  }
  Tiles::template store<0>(s, 128);
  Tiles::template store<1>(s + 16, 128);
  Tiles::template store<2>(s + 512, 128);
  Tiles::template store<3>(s + 512 + 16, 128);
}

/// C[32][dq] f32 = P[32][32] (bf16) x V tiles (dq / 16 tiles of 1 KiB, 16 columns each).
template <class Tiles>
TPULLM_TARGET_AMX void fa_amx_pv(const std::uint16_t* p, const std::uint8_t* vt, std::int64_t dq,
                                 float* c) {
  Tiles::template load<4>(p, 64);
  Tiles::template load<5>(p + 16 * 32, 64);
  for (std::int64_t x = 0; x < dq; x += 32) {
    const std::uint8_t* b = vt + x / 16 * 1024;
    Tiles::template zero<0>();
    Tiles::template zero<1>();
    Tiles::template zero<2>();
    Tiles::template zero<3>();
    Tiles::template load<6>(b, 64);
    Tiles::template load<7>(b + 1024, 64);
    Tiles::template dpbf16ps<0, 4, 6>();
    Tiles::template dpbf16ps<1, 4, 7>();
    Tiles::template dpbf16ps<2, 5, 6>();
    Tiles::template dpbf16ps<3, 5, 7>();
    Tiles::template store<0>(c + x, dq * 4);
    Tiles::template store<1>(c + x + 16, dq * 4);
    Tiles::template store<2>(c + 16 * dq + x, dq * 4);
    Tiles::template store<3>(c + 16 * dq + x + 16, dq * 4);
  }
}

/// Per-thread scratch of the AMX attention.
struct FaAmxScratch {
  std::vector<std::uint16_t> q;  ///< [nq][32][dq] bf16 Q tiles
  std::vector<float> o;          ///< [nq][32][dq] f32 output accumulators
  std::vector<float> m, l;       ///< [nq][32]
  std::vector<std::int32_t> pos; ///< [nq][32] row positions (INT32_MAX for pad rows)
  std::vector<std::uint8_t> kt;  ///< K^T tiles of one key tile
  std::vector<std::uint8_t> vt;  ///< V tiles of one key tile
  std::vector<float> s, c;       ///< [32][32] scores, [32][dq] P V
  std::vector<std::uint16_t> p;  ///< [32][32] bf16 probabilities
  std::vector<float> lv;         ///< [nq][32][16] row sums as 16 lane sums (the tile unit's path)
};

/// `n` elements of `v` from a 64-byte boundary, so that no tile row straddles two cache lines (v
/// grows by up to 64 bytes to hold them).
template <class T>
T* fa_amx_aligned(std::vector<T>& v, std::size_t n) {
  v.resize(n + 64 / sizeof(T));
  const auto a = reinterpret_cast<std::uintptr_t>(v.data());
  return v.data() + (64 - a % 64) % 64 / sizeof(T);
}

inline FaAmxScratch& fa_amx_scratch() {
  thread_local FaAmxScratch s;
  return s;
}

/// Which keys the q tiles of one work item see (row r = token r / G, head h G + r % G; rows past
/// L_valid * G are padding): per tile the end of its visible keys and its lowest and highest
/// position, and the item's key range [kstart, kend).
struct FaAmxItemPlan {
  std::vector<std::int64_t> tend, tmin, tmax;
  std::int64_t kstart = INT64_MAX, kend = 0;

  /// Whether q tile t sees no key of the key tile at j0.
  bool skips(const AttentionShape& s, std::int64_t t, std::int64_t j0) const {
    const auto ts = static_cast<std::size_t>(t);
    return j0 >= tend[ts] || j0 + 32 <= first_visible_key(s, tmin[ts]);
  }
  /// Whether some score of q tile t against the key tile at j0 is masked (causal, window or
  /// past the valid keys); when not, all 32 keys are visible to all 32 rows.
  bool masked(const AttentionShape& s, std::int64_t t, std::int64_t j0) const {
    const auto ts = static_cast<std::size_t>(t);
    return j0 + 31 > tmin[ts] || j0 + 32 > tend[ts] || j0 < first_visible_key(s, tmax[ts]);
  }
};

/// The plan of q tiles [qt0, qt0 + nq) of `rows` rows each (32, or 16 for the resident-O item)
/// and their rows' positions: pos [nq][rows] (INT32_MAX for padding rows, and for every row of a
/// non-causal shape). Key tiles are 32 keys whatever `rows`.
inline FaAmxItemPlan fa_amx_item_plan(const AttentionShape& s, const std::int32_t* pos_ids,
                                      std::int64_t qt0, std::int64_t nq,
                                      std::vector<std::int32_t>& pos, std::int64_t rows = 32) {
  const std::int64_t G = s.q_heads / s.kv_heads, M = s.L_valid * G;
  FaAmxItemPlan plan;
  plan.tend.resize(static_cast<std::size_t>(nq));
  plan.tmin.resize(plan.tend.size());
  plan.tmax.resize(plan.tend.size());
  pos.assign(static_cast<std::size_t>(nq * rows), INT32_MAX);
  for (std::int64_t t = 0; t < nq; ++t) {
    std::int64_t mx = -1, mn = INT64_MAX;
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t r = (qt0 + t) * rows + i;
      if (r >= M)
        continue;
      const std::int32_t p = s.causal ? pos_ids[r / G] : INT32_MAX;
      pos[static_cast<std::size_t>(t * rows + i)] = p;
      mx = std::max<std::int64_t>(mx, p);
      mn = std::min<std::int64_t>(mn, p);
    }
    const auto ts = static_cast<std::size_t>(t);
    plan.tend[ts] = s.causal ? std::min(s.S_valid, mx + 1) : s.S_valid;
    plan.tmin[ts] = mn;
    plan.tmax[ts] = mx;
    plan.kend = std::max(plan.kend, plan.tend[ts]);
    plan.kstart = std::min(plan.kstart, first_visible_key(s, mn));
  }
  return plan;
}

/// The first key a row at position p sees (padding rows, p = INT32_MAX: 0).
inline std::int64_t fa_amx_row_first_key(const AttentionShape& s, std::int32_t p) {
  return p == INT32_MAX ? 0 : first_visible_key(s, p);
}

/// One work item: kv head h, q tiles [qt0, qt1) of 32 grouped rows.
template <class KV, class Tiles>
TPULLM_ALWAYS_INLINE void
fa_amx_item_body(const float* q, const KV* k, const KV* v, const std::int32_t* pos_ids, float* out,
                 const AttentionShape& s, std::int64_t h, std::int64_t qt0, std::int64_t qt1) {
  const std::int64_t d = s.head_dim, G = s.q_heads / s.kv_heads, M = s.L_valid * G;
  const std::int64_t dq = (d + 31) / 32 * 32, nq = qt1 - qt0;
  FaAmxScratch& w = fa_amx_scratch();
  w.q.assign(static_cast<std::size_t>(nq * 32 * dq), 0);
  w.o.assign(static_cast<std::size_t>(nq * 32 * dq), 0.f);
  w.m.assign(static_cast<std::size_t>(nq * 32), -__builtin_inff());
  w.l.assign(static_cast<std::size_t>(nq * 32), 0.f);
  w.kt.resize(static_cast<std::size_t>(dq / 32 * 2048));
  w.vt.resize(static_cast<std::size_t>(dq / 16 * 1024));
  w.s.resize(32 * 32);
  w.c.resize(static_cast<std::size_t>(32 * dq));
  w.p.resize(32 * 32);
  const float qscale = s.scale * 1.4426950408889634f;
  const FaAmxItemPlan plan = fa_amx_item_plan(s, pos_ids, qt0, nq, w.pos);
  for (std::int64_t t = 0; t < nq; ++t)
    for (std::int64_t i = 0; i < 32; ++i) {
      const std::int64_t r = (qt0 + t) * 32 + i;
      if (r >= M)
        continue;
      const float* qr = q + ((r / G) * s.q_heads + h * G + r % G) * d;
      std::uint16_t* dst = w.q.data() + (t * 32 + i) * dq;
      for (std::int64_t x = 0; x < d; ++x)
        dst[x] = amx_bf16_rne(qr[x] * qscale);
    }
  amx_configure<Tiles>(amx_bf16_config());
  const std::int64_t kvs = s.kv_heads * d;
  for (std::int64_t j0 = plan.kstart / 32 * 32; j0 < plan.kend; j0 += 32) {
    const std::int64_t nk = std::min<std::int64_t>(32, plan.kend - j0);
    // K^T tiles: slice x / 32, key half kh, pair row r, key n: K[j0 + 16 kh + n][x + 2r, +1]
    std::memset(w.kt.data(), 0, w.kt.size());
    std::memset(w.vt.data(), 0, w.vt.size());
    std::uint32_t* kt = reinterpret_cast<std::uint32_t*>(w.kt.data());
    std::uint32_t* vt = reinterpret_cast<std::uint32_t*>(w.vt.data());
    for (std::int64_t n = 0; n < nk; ++n) {
      const KV* kr = k + (j0 + n) * kvs + h * d;
      const KV* vr = v + (j0 + n) * kvs + h * d;
      for (std::int64_t x = 0; x < d; x += 2) {
        const std::uint32_t lo = amx_bf16_rne(to_f32(kr[x]));
        const std::uint32_t hi = x + 1 < d ? amx_bf16_rne(to_f32(kr[x + 1])) : 0u;
        kt[(x / 32) * 512 + (n / 16) * 256 + ((x % 32) / 2) * 16 + n % 16] = lo | hi << 16;
      }
      // V tiles: column chunk c / 16, pair row n / 2, column c % 16; key n is the low (even) or
      // high (odd) half of the dword
      for (std::int64_t x = 0; x < d; ++x) {
        const std::uint32_t b = amx_bf16_rne(to_f32(vr[x]));
        std::uint32_t& dw = vt[(x / 16) * 256 + (n / 2) * 16 + x % 16];
        dw |= (n % 2 == 0) ? b : b << 16;
      }
    }
    for (std::int64_t t = 0; t < nq; ++t) {
      if (plan.skips(s, t, j0))
        continue;
      const std::int64_t kend = plan.tend[static_cast<std::size_t>(t)];
      fa_amx_qk<Tiles>(w.q.data() + t * 32 * dq, dq, w.kt.data(), w.s.data());
      const bool masked = plan.masked(s, t, j0);
      float* m = w.m.data() + t * 32;
      float* l = w.l.data() + t * 32;
      float* o = w.o.data() + t * 32 * dq;
      float alpha[32];
      for (std::int64_t i = 0; i < 32; ++i) {
        float* sr = w.s.data() + i * 32;
        const std::int32_t p = w.pos[static_cast<std::size_t>(t * 32 + i)];
        const std::int64_t lo = fa_amx_row_first_key(s, p);
        if (masked)
          for (std::int64_t n = 0; n < 32; ++n)
            sr[n] = (j0 + n < kend && j0 + n <= p && j0 + n >= lo) ? sr[n] : -__builtin_inff();
        float mx = m[i];
        for (std::int64_t n = 0; n < 32; ++n)
          mx = sr[n] > mx ? sr[n] : mx;
        mx = mx == -__builtin_inff() ? 0.f : mx; // no visible key yet: keep a finite reference
        alpha[i] = exp2_approx(m[i] - mx);
        m[i] = mx;
        float sum = 0.f;
        std::uint16_t* pr = w.p.data() + i * 32;
        for (std::int64_t n = 0; n < 32; ++n) {
          const float e = exp2_approx(sr[n] - mx);
          sum += e;
          pr[n] = amx_bf16_rne(e);
        }
        l[i] = l[i] * alpha[i] + sum;
      }
      fa_amx_pv<Tiles>(w.p.data(), w.vt.data(), dq, w.c.data());
      for (std::int64_t i = 0; i < 32; ++i)
        for (std::int64_t x = 0; x < dq; ++x)
          o[i * dq + x] = o[i * dq + x] * alpha[i] + w.c[static_cast<std::size_t>(i * dq + x)];
    }
  }
  amx_release<Tiles>();
  for (std::int64_t t = 0; t < nq; ++t)
    for (std::int64_t i = 0; i < 32; ++i) {
      const std::int64_t r = (qt0 + t) * 32 + i;
      if (r >= M)
        continue;
      float* dst = out + ((r / G) * s.q_heads + h * G + r % G) * d;
      const float inv = 1.0f / w.l[static_cast<std::size_t>(t * 32 + i)];
      const float* o = w.o.data() + (t * 32 + i) * dq;
      for (std::int64_t x = 0; x < d; ++x)
        dst[x] = o[x] * inv;
    }
}

template <class KV>
void fa_amx_item_emu(const float* q, const KV* k, const KV* v, const std::int32_t* pos, float* out,
                     const AttentionShape& s, std::int64_t h, std::int64_t qt0, std::int64_t qt1) {
  fa_amx_item_body<KV, amx::Emu>(q, k, v, pos, out, s, h, qt0, qt1);
}

#if TPULLM_X86
template <class KV>
TPULLM_TARGET_AVX512 void
fa_amx_item_hw(const float* q, const KV* k, const KV* v, const std::int32_t* pos, float* out,
               const AttentionShape& s, std::int64_t h, std::int64_t qt0, std::int64_t qt1) {
  fa_amx_item_body<KV, amx::Hw>(q, k, v, pos, out, s, h, qt0, qt1);
}
#endif

} // namespace tpullm::kernels::detail
