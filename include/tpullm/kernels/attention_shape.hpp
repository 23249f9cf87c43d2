#pragma once
/// Public shape types of kernels/flash_attention.hpp: the problem shape of one attention call,
/// the tile sizes and the choice of the largest tiles that fit a local-memory budget.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Query rows up to which flash_attention computes each row as a decode step at its position
/// would (flash-decoding; the same sums bit for bit for a split of as many cores): a
/// speculative verify segment of up to this many rows gives the logits plain decoding gives.
inline constexpr std::int64_t kDecodeArithmeticRows = 16;

/// Problem shape of one attention call.
struct AttentionShape {
  std::int64_t L = 0;        ///< query rows in q/out
  std::int64_t L_valid = 0;  ///< rows [0, L_valid) are computed; the rest are don't-care
  std::int64_t S = 0;        ///< key slots in k/v (cache capacity)
  std::int64_t S_valid = 0;  ///< keys [0, S_valid) may be read; the rest never are
  std::int64_t q_heads = 0;  ///< query heads (a multiple of kv_heads)
  std::int64_t kv_heads = 0; ///< key/value heads
  std::int64_t head_dim = 0; ///< d
  float scale = 0.f;         ///< softmax scale, usually 1/sqrt(d)
  bool causal = true;        ///< apply the position rule (false: every valid key is visible)
  /// Sliding window (causal only; 0: none): a query at position p sees keys p - window < j <= p,
  /// the `window` latest positions including its own (transformers' sliding_window).
  std::int64_t window = 0;
};

/// First key a query at position `p` may see: p - window + 1 under a sliding window (never below
/// 0), else 0.
inline std::int64_t first_visible_key(const AttentionShape& s, std::int64_t p) {
  return s.causal && s.window > 0 ? std::max<std::int64_t>(0, p - s.window + 1) : 0;
}

/// Tile sizes of one call: Br query rows (of the grouped [L*G, d] matrix) x Bc keys.
struct AttentionTiles {
  std::int64_t q_rows = 64;  ///< Br, multiple of 16, <= 64
  std::int64_t k_cols = 128; ///< Bc, multiple of 16

  /// Local-memory bytes one core touches per tile step: Q^T tile, O accumulator, scores tile,
  /// K and V tiles (+ f32 copies of K/V tiles when the cache is 16-bit).
  static std::size_t bytes(std::int64_t br, std::int64_t bc, std::int64_t d, bool kv16) {
    const std::int64_t floats = 2 * br * d + br * bc + 2 * bc * d + (kv16 ? 2 * bc * d : 0);
    return static_cast<std::size_t>(floats) * sizeof(float) +
           static_cast<std::size_t>(5 * br) * sizeof(float);
  }
};

/// Largest tiles (Br <= 64 and <= rows rounded up to 16; Bc <= 128) whose working set fits
/// `local_memory_bytes`; throws Error(internal) when even 16 x 16 does not fit.
inline AttentionTiles choose_attention_tiles(std::int64_t rows, std::int64_t head_dim,
                                             std::size_t local_memory_bytes, bool kv16 = false) {
  const std::int64_t max_br = std::clamp<std::int64_t>((rows + 15) / 16 * 16, 16, 64);
  for (std::int64_t br = max_br; br >= 16; br -= 16)
    for (std::int64_t bc : {128, 64, 32, 16})
      if (AttentionTiles::bytes(br, bc, head_dim, kv16) <= local_memory_bytes)
        return {br, bc};
  throw_error(ErrorKind::internal, "",
              "flash_attention: local memory budget of " + std::to_string(local_memory_bytes) +
                  " bytes is below the smallest 16x16 tile (" +
                  std::to_string(AttentionTiles::bytes(16, 16, head_dim, kv16)) +
                  " bytes for head_dim " + std::to_string(head_dim) + ")");
}

} // namespace tpullm::kernels
