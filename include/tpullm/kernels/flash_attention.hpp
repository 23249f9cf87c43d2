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
#include <string>
#include <vector>

#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/kernels/detail/flash_attention_item.hpp"
#include "tpullm/kernels/detail/flash_attention_plan.hpp"
#include "tpullm/kernels/detail/flash_attention_tile.hpp"
#include "tpullm/kernels/detail/flash_attention_amx_driver.hpp"
#include "tpullm/kernels/detail/flash_decode.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Causal multi-head attention, FlashAttention-2 tiling with an online softmax.
/// q: [L, q_heads, d]; k, v: [S, kv_heads, d] of f32/bf16/f16, or an int8 cache of kv8_t head
/// rows (kv8.hpp: S * kv_heads * (d + 4) bytes; widened with their scales as they are read)
/// (slot j = position j);
/// position_ids: [L] int32 (>= 0; may be empty when !shape.causal); out: [L, q_heads, d] f32.
/// Query rows past L_valid are neither read nor written; keys past S_valid are never read.
/// `split`: heads = kv heads divided across cores; rows = (kv heads, q tile) items dealt
/// round-robin (balances the causal triangle); none = calling thread; cols (keys) is rejected
/// for L_valid > kDecodeArithmeticRows. `local_memory_bytes` bounds a work item's working set (0 =
/// half the core's L2). On the amx Isa with a bf16 cache (or under amx::ScopedEmulation, any
/// float cache) prefill (L_valid > kDecodeArithmeticRows) computes Q K^T and P V on AMX-BF16 (q
/// and p rounded to bf16; softmax in f32; see docs/kernels.md for the bound); so does an int8
/// cache with an even head dim up to 64 (its codes exact in bf16, its scales applied in f32),
/// and an f16 cache of such head dims with every operand split into two bf16 terms (the vector
/// path's bound); an f32 cache, and f16 / int8 past d 64, keep the vector path, so a model's
/// precision is never lowered below its cache's. L_valid
/// <= kDecodeArithmeticRows (decode, and short segments such as a verify call's) runs
/// flash-decoding whatever the split's dimension, each row as the decode step at its position (for
/// a split of as many cores): the keys are cut into up to split.parts chunks of >= 256 (then blocks
/// of kv heads), all rows' items in one fork, and the partial softmax results are merged, so MQA
/// and small GQA groups use every core.
template <class KV>
void flash_attention(std::span<const float> q, std::span<const KV> k, std::span<const KV> v,
                     std::span<const std::int32_t> position_ids, std::span<float> out,
                     const AttentionShape& shape, const CoreSplit& split = {},
                     std::size_t local_memory_bytes = 0) {
  static_assert(is_float_storage_v<KV> || std::is_same_v<KV, kv8_t>,
                "k/v must be float, bf16_t, f16_t or kv8_t");
  detail::fa_check(shape, q.size(), k.size(), v.size(), position_ids.size(), out.size(),
                   kv_row_elems<KV>(shape.head_dim));
  if (shape.causal)
    for (std::int64_t i = 0; i < shape.L_valid; ++i) {
      const std::int64_t p = position_ids[static_cast<std::size_t>(i)];
      if (p < 0)
        throw_error(ErrorKind::invalid_input, "",
                    "flash_attention: position " + std::to_string(p) + " of row " +
                        std::to_string(i) + " is negative");
      if (first_visible_key(shape, p) >= shape.S_valid) // its window holds no valid key
        throw_error(ErrorKind::invalid_input, "",
                    "flash_attention: row " + std::to_string(i) + " at position " +
                        std::to_string(p) + " sees no key: its window of " +
                        std::to_string(shape.window) + " starts past the " +
                        std::to_string(shape.S_valid) + " valid keys");
    }
  if (shape.L_valid == 0)
    return;
  if (shape.L_valid <= kDecodeArithmeticRows) { // decode steps: flash-decoding over key chunks
    detail::flash_decode<KV>(q.data(), k.data(), v.data(), position_ids.data(), out.data(), shape,
                             split);
    return;
  }
  if (split.dim == SplitDim::cols)
    throw_error(
        ErrorKind::internal, "",
        "flash_attention: splitting keys (cols) across cores is not supported; use heads or rows");
  // Q K^T and P V on AMX-BF16 without changing a value the cache holds: a bf16 cache; an int8
  // or f16 cache with an even head dim up to 64 (codes and row scales; exact hi + lo terms, with
  // Q and P split too so that the f16 cache keeps the vector path's bound); the emulator takes
  // any float cache. An f32 cache, and f16 / int8 past d 64, keep the vector path.
  if constexpr (!std::is_same_v<KV, float> && !std::is_same_v<KV, bf16_t>) {
    if (!amx::emulation_forced() && active_isa() == Isa::amx &&
        detail::fa_amx_takes_resident<KV>(shape, false)) {
      detail::flash_attention_amx<KV>(q.data(), k.data(), v.data(), position_ids.data(), out.data(),
                                      shape, split, false);
      return;
    }
  }
  if constexpr (!std::is_same_v<KV, kv8_t>) {
    if (amx::emulation_forced() || (std::is_same_v<KV, bf16_t> && active_isa() == Isa::amx)) {
      detail::flash_attention_amx<KV>(q.data(), k.data(), v.data(), position_ids.data(), out.data(),
                                      shape, split, amx::emulation_forced());
      return;
    }
  }
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
    parallel_items(static_cast<int>(std::min(parts, items)), items,
                   [&](std::int64_t it) { run(it / nqt, it % nqt); });
    return;
  }
  }
}

} // namespace tpullm::kernels
