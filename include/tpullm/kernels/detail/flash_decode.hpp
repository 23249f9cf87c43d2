#pragma once
/// Flash-decoding: attention of a few query rows (a decode step's one, or a short segment's,
/// each computed as its own decode step) over a long KV cache, with the keys split into chunks
/// across cores and the partial softmax results merged at the end.
///
/// Work item = (key chunk, block of kv heads). Each item streams its key range for all its kv
/// heads (for a block of all heads the K and V rows of a key range are one contiguous run each)
/// and keeps, per query head, a running max m (log2 domain), denominator l and unnormalized
/// output o[d]. The merge: m* = max_c m_c, l = sum_c l_c 2^(m_c - m*), out = sum_c o_c 2^(m_c -
/// m*) / l. The items per ISA: flash_decode_avx512.hpp and flash_decode_avx2.hpp (each 16-key
/// block of a kv head widened to f32 once and shared by the G query rows of its group, 16
/// scores per row in key order, the running max moved only when a score exceeds it, P V in
/// register tiles of rows x columns of o); the portable item below on xsimd vectors.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/kernels/detail/flash_decode_avx2.hpp"
#include "tpullm/kernels/detail/flash_decode_avx512.hpp"
#include "tpullm/kernels/detail/flash_decode_item.hpp"
#include "tpullm/kernels/detail/portable_simd.hpp"

namespace tpullm::kernels::detail {

/// One decode item on the portable path's xsimd vectors: dot products and P V over d (K / V
/// rows widened to f32 a vector at a time; an int8 cache's rows widened whole, with their scale).
template <class KV>
void fd_item_portable(const FdItem<KV>& it) {
  const std::int64_t d = it.d, H = it.H, G = it.G, row = kv_row_elems<KV>(d);
  const std::int64_t dv = d / kPW * kPW;
  constexpr bool kInt8 = std::is_same_v<KV, kv8_t>;
  float s[kFdBlock], p[kFdBlock], wide[kPW];
  thread_local std::vector<float> widened; // an int8 row as f32
  if constexpr (kInt8)
    widened.resize(static_cast<std::size_t>(d));
  auto load = [&](const auto* src) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    if constexpr (std::is_same_v<T, float>) {
      return pv_load(src);
    } else {
      for (std::int64_t l = 0; l < kPW; ++l)
        wide[l] = to_f32(src[l]);
      return pv_load(wide);
    }
  };
  // a row of the cache as something load() and to_f32() read: an int8 row widened first
  auto values = [&](const KV* r) {
    if constexpr (kInt8) {
      kv8_dequantize_row(r, widened.data(), d);
      return static_cast<const float*>(widened.data());
    } else {
      return r;
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
          const auto* kr = values(it.k + ((jb + j) * H + h) * row);
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
          const auto* vr = values(it.v + ((jb + j) * H + h) * row);
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

/// How one query row's decode attention is cut: C key chunks x HB blocks of kv heads, over the
/// keys [first, first + keys).
struct FdPlan {
  std::int64_t chunks = 1, head_blocks = 1, keys = 0, first = 0;
};

/// Chunks of at least kFdMinChunkKeys keys, no more than `parts` (nor kFdMaxChunks); leftover
/// cores take blocks of kv heads (which do not change the sums). A row's sums depend on its keys
/// and `parts` only, so a decode step and a verify segment's row at the same position agree bit
/// for bit when their splits name the same number of cores. (Chunks cut by the keys alone, at
/// most 64, measured 20-40% slower at 1-3k keys on 2 cores: more items, more merging.)
inline FdPlan fd_plan(std::int64_t keys, std::int64_t kv_heads, std::int64_t parts) {
  FdPlan p;
  p.keys = keys;
  parts = std::max<std::int64_t>(1, parts);
  p.chunks = std::clamp<std::int64_t>(keys / kFdMinChunkKeys, 1,
                                      std::min<std::int64_t>(parts, kFdMaxChunks));
  p.head_blocks = std::clamp<std::int64_t>(parts / p.chunks, 1, kv_heads);
  return p;
}

/// Decode attention of shape.L_valid (1 .. kDecodeArithmeticRows, checked by the caller) query
/// rows, each computed as the decode step at its position would compute it: q: [L, q_heads, d],
/// k, v: [S, kv_heads, d] (kv8_t: head rows of d codes and a scale), out rows [0, L_valid):
/// [q_heads, d]. The work items of every row (key chunks x blocks of kv heads, fd_plan) run in
/// one fork on split.parts cores whatever the split's dimension; each row's chunks are merged
/// in chunk order.
template <class KV>
void flash_decode(const float* q, const KV* k, const KV* v, const std::int32_t* pos, float* out,
                  const AttentionShape& s, const CoreSplit& split) {
  const std::int64_t d = s.head_dim, H = s.kv_heads, G = s.q_heads / s.kv_heads, QH = s.q_heads;
  const std::int64_t rows = s.L_valid;
  const std::int64_t parts = split.dim == SplitDim::none ? 1 : std::max(1, split.parts);
  const std::int64_t dp = (d + 15) / 16 * 16, per_chunk = QH * (d + 2);
  // per row: its plan, its first item and its scratch (scaled q [QH, d], the same padded
  // [QH, dp], then per chunk m [QH], l [QH], o [QH, d])
  FdPlan plan[kDecodeArithmeticRows];
  std::int64_t first_item[kDecodeArithmeticRows + 1], base[kDecodeArithmeticRows + 1];
  first_item[0] = 0;
  base[0] = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t end =
        s.causal ? std::min<std::int64_t>(s.S_valid, static_cast<std::int64_t>(pos[r]) + 1)
                 : s.S_valid;
    // (flash_attention refused a row whose window starts at or past `end`)
    const std::int64_t first = s.causal ? first_visible_key(s, pos[r]) : 0;
    plan[r] = fd_plan(end - first, H, parts);
    plan[r].first = first;
    first_item[r + 1] = first_item[r] + plan[r].chunks * plan[r].head_blocks;
    base[r + 1] = base[r] + QH * (d + dp) + plan[r].chunks * per_chunk;
  }
  const std::int64_t items = first_item[rows];
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<std::size_t>(base[rows]));
  float* const sb = scratch.data(); // the workers see this thread's buffer through sb only
  const float qscale = s.scale * 1.4426950408889634f;
  for (std::int64_t r = 0; r < rows; ++r) {
    float* qs = sb + base[r];
    float* qp = qs + QH * d;
    const float* qr = q + r * QH * d;
    for (std::int64_t h = 0; h < QH; ++h) {
      for (std::int64_t x = 0; x < d; ++x)
        qp[h * dp + x] = qs[h * d + x] = qr[h * d + x] * qscale;
      std::fill(qp + h * dp + d, qp + (h + 1) * dp, 0.f);
    }
  }
  const Isa isa = active_isa();
  auto run = [&](std::int64_t item) {
    std::int64_t r = 0;
    while (item >= first_item[r + 1])
      ++r;
    const FdPlan& pl = plan[r];
    const std::int64_t local = item - first_item[r];
    const std::int64_t c = local / pl.head_blocks, hb = local % pl.head_blocks;
    FdItem<KV> it;
    it.qs = sb + base[r];
    it.qp = it.qs + QH * d;
    it.k = k;
    it.v = v;
    it.H = H;
    it.G = G;
    it.d = d;
    it.dp = dp;
    const auto [h0, h1] = split_range(H, static_cast<int>(hb), static_cast<int>(pl.head_blocks));
    const auto [j0, j1] =
        split_range(pl.keys, static_cast<int>(c), static_cast<int>(pl.chunks), kFdBlock);
    it.h0 = h0;
    it.h1 = h1;
    it.j0 = pl.first + j0;
    it.j1 = pl.first + j1;
    float* chunk = sb + base[r] + QH * (d + dp) + c * per_chunk;
    it.m = chunk;
    it.l = chunk + QH;
    it.o = chunk + 2 * QH;
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
  // merge each row's chunks (a chunk without keys, possible only when keys < C * 16, has l = 0)
  for (std::int64_t r = 0; r < rows; ++r) {
    const FdPlan& pl = plan[r];
    const std::int64_t C = pl.chunks;
    const float* part = sb + base[r] + QH * (d + dp);
    for (std::int64_t qh = 0; qh < QH; ++qh) {
      float mx = -__builtin_inff();
      for (std::int64_t c = 0; c < C; ++c) {
        const auto [j0, j1] =
            split_range(pl.keys, static_cast<int>(c), static_cast<int>(C), kFdBlock);
        if (j0 < j1)
          mx = std::max(mx, part[c * per_chunk + qh]);
      }
      float l = 0.f;
      float w[kFdMaxChunks];
      for (std::int64_t c = 0; c < C; ++c) {
        const float* chunk = part + c * per_chunk;
        const auto [j0, j1] =
            split_range(pl.keys, static_cast<int>(c), static_cast<int>(C), kFdBlock);
        w[c] = j0 < j1 ? exp2_approx(chunk[qh] - mx) : 0.f;
        l += w[c] * chunk[QH + qh];
      }
      const float inv = 1.0f / l;
      float* dst = out + (r * QH + qh) * d;
      for (std::int64_t x = 0; x < d; ++x) {
        float acc = 0.f;
        for (std::int64_t c = 0; c < C; ++c)
          if (w[c] != 0.f)
            acc += w[c] * part[c * per_chunk + 2 * QH + qh * d + x];
        dst[x] = acc * inv;
      }
    }
  }
}

} // namespace tpullm::kernels::detail
