#pragma once
/// One attention work item: kv heads x q tiles, streamed over key tiles with the online softmax.

#include "tpullm/kernels/detail/flash_attention_tile.hpp"
#include "tpullm/kernels/detail/flash_attention_step_generic.hpp"
#if TPULLM_X86
#include "tpullm/kernels/detail/flash_attention_step_avx512.hpp"
#endif
#include "tpullm/kernels/detail/flash_attention_pack_q.hpp"
#include "tpullm/kernels/detail/flash_attention_plan.hpp"

namespace tpullm::kernels::detail {

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
  const std::int64_t per_tile = round16(d * br) + round16(br * d) + 5 * 64;
  const std::int64_t per_head = copy ? 2 * round16(bc * d) : 0;
  const std::int64_t shared = round16(bc * br);
  constexpr std::int64_t kMaxTiles = 64;
  const std::int64_t nt = nh * nq;
  float* base = fa_scratch(static_cast<std::size_t>(shared + nh * per_head + nt * per_tile));
  const float qscale = s.scale * 1.4426950408889634f;

  FaTile tl[kMaxTiles];
  std::int32_t tmin[kMaxTiles], tmax[kMaxTiles];
  std::int64_t tstart[kMaxTiles], tend[kMaxTiles];
  std::int64_t kend_all = 0, kstart_all = INT64_MAX;
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
      t.lo = t.pos + 64;
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
          t.lo[i] = static_cast<std::int32_t>(first_visible_key(s, p));
          mn = std::min(mn, p);
          mx = std::max(mx, p);
          rows[i] = q + ((r / G) * s.q_heads + kvh * G + r % G) * d;
        } else {
          t.pos[i] = INT32_MAX;
          t.lo[i] = 0;
          rows[i] = nullptr;
        }
        t.m[i] = -__builtin_inff();
        t.l[i] = 0.f;
      }
      // Q^T scaled into the log2 domain; pad rows are 0
      switch (isa) {
#if TPULLM_X86
      case Isa::amx:
      case Isa::avx512:
        fa_pack_qt_avx512(rows, br, d, qscale, t.qt);
        break;
#else
      case Isa::amx:
      case Isa::avx512:
#endif
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
      // keys before the window of the tile's earliest row are visible to none of its rows
      tstart[ti] = first_visible_key(s, mn);
      kend_all = std::max(kend_all, tend[ti]);
      kstart_all = std::min(kstart_all, tstart[ti]);
    }

  const std::int64_t kv_stride = s.kv_heads * d;
  for (std::int64_t j0 = kstart_all / bc * bc; j0 < kend_all; j0 += bc) {
    const std::int64_t ncopy = std::min(bc, kend_all - j0);
    if (copy) {
      // key-major so all heads of a key come in one stream; widens 16-bit caches
      for (std::int64_t j = 0; j < ncopy; ++j)
        for (std::int64_t hh = 0; hh < nh; ++hh) {
          const auto off = ((j0 + j) * s.kv_heads + hb + hh) * kv_row_elems<KV>(d);
          convert_row(k + off, tl[hh * nq].kbuf + j * d, d, isa);
          convert_row(v + off, tl[hh * nq].vbuf + j * d, d, isa);
        }
    }
    for (std::int64_t ti = 0; ti < nt; ++ti) {
      if (j0 >= tend[ti] || j0 + bc <= tstart[ti])
        continue;
      FaTile& t = tl[ti];
      FaKeys kk;
      kk.j0 = j0;
      kk.ncols = std::min(bc, tend[ti] - j0);
      // masked when a key is past the earliest row's position or before the latest row's window
      kk.masked = s.causal && (j0 + kk.ncols - 1 > tmin[ti] || j0 < first_visible_key(s, tmax[ti]));
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
#if TPULLM_X86
      case Isa::amx:
      case Isa::avx512:
        fa_step_avx512(t, kk);
        break;
      case Isa::avx2:
        fa_step_avx2(t, kk);
        break;
#else
      case Isa::amx:
      case Isa::avx512:
      case Isa::avx2:
#endif
      case Isa::portable:
        fa_step_portable(t, kk);
        break;
      }
    }
  }

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

} // namespace tpullm::kernels::detail
