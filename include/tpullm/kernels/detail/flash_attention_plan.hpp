#pragma once
/// Argument checks of one attention call and its cut into work items (FaPlan).

#include "tpullm/kernels/detail/flash_attention_tile.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels::detail {

inline void fa_check(const AttentionShape& s, std::size_t q, std::size_t k, std::size_t v,
                     std::size_t pos, std::size_t out, std::int64_t kv_row_elems) {
  auto str = [](std::int64_t x) { return std::to_string(x); };
  if (s.L < 0 || s.S < 0 || s.q_heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0)
    throw_error(ErrorKind::internal, "",
                "flash_attention: bad shape L=" + str(s.L) + " S=" + str(s.S) + " q_heads=" +
                    str(s.q_heads) + " kv_heads=" + str(s.kv_heads) + " d=" + str(s.head_dim));
  if (s.q_heads % s.kv_heads != 0)
    throw_error(ErrorKind::internal, "",
                "flash_attention: q_heads " + str(s.q_heads) + " is not a multiple of kv_heads " +
                    str(s.kv_heads));
  if (s.window < 0 || (s.window > 0 && !s.causal))
    throw_error(ErrorKind::internal, "",
                "flash_attention: window " + str(s.window) +
                    " must be >= 0, and 0 unless attention is causal");
  if (s.L_valid < 0 || s.L_valid > s.L)
    throw_error(ErrorKind::internal, "",
                "flash_attention: L_valid " + str(s.L_valid) + " outside [0, L=" + str(s.L) + "]");
  if (s.S_valid < 0 || s.S_valid > s.S)
    throw_error(ErrorKind::internal, "",
                "flash_attention: S_valid " + str(s.S_valid) + " outside [0, S=" + str(s.S) + "]");
  if (s.L_valid > 0 && s.S_valid == 0)
    throw_error(ErrorKind::internal, "",
                "flash_attention: " + str(s.L_valid) +
                    " query rows but no valid key (S_valid = 0)");
  const auto qn = static_cast<std::size_t>(s.L * s.q_heads * s.head_dim);
  const auto kn = static_cast<std::size_t>(s.S * s.kv_heads * kv_row_elems);
  if (q < qn || out < qn)
    throw_error(ErrorKind::internal, "",
                "flash_attention: q (" + std::to_string(q) + ") or out (" + std::to_string(out) +
                    ") smaller than L*q_heads*d = " + std::to_string(qn));
  if (k < kn || v < kn)
    throw_error(ErrorKind::internal, "",
                "flash_attention: k (" + std::to_string(k) + ") or v (" + std::to_string(v) +
                    ") smaller than S*kv_heads*row = " + std::to_string(kn));
  if (s.causal && pos < static_cast<std::size_t>(s.L_valid))
    throw_error(ErrorKind::internal, "",
                "flash_attention: " + std::to_string(pos) +
                    " position ids for L_valid = " + str(s.L_valid) + " rows");
}

/// How one call is cut into work items: tile sizes, and how many kv heads and q tiles one item
/// carries. Tiles of one item share each K/V key tile, so it is read (and copied) once for them.
struct FaPlan {
  AttentionTiles tiles;
  std::int64_t heads_per_item = 1;  ///< kv heads per item (decode: one stream over all heads)
  std::int64_t qtiles_per_item = 1; ///< q tiles per item (prefill: amortizes the K/V tile)
  std::int64_t q_tiles = 1;         ///< q tiles per kv head
};

/// Bytes of one q tile's private state (Q^T, O, row state) and of one head's K/V tile copies.
inline std::size_t fa_tile_bytes(std::int64_t br, std::int64_t d) {
  return static_cast<std::size_t>(2 * br * d + 6 * br) * sizeof(float);
}
inline std::size_t fa_kv_bytes(std::int64_t bc, std::int64_t d) {
  return static_cast<std::size_t>(2 * bc * d) * sizeof(float);
}

inline FaPlan fa_plan(const AttentionShape& s, std::int64_t parts, std::size_t budget, bool kv16) {
  const std::int64_t M = s.L_valid * (s.q_heads / s.kv_heads);
  FaPlan p;
  p.tiles = choose_attention_tiles(M, s.head_dim, budget, kv16);
  p.q_tiles = (M + p.tiles.q_rows - 1) / p.tiles.q_rows;
  const std::int64_t br = p.tiles.q_rows, d = s.head_dim;
  auto need = [&](std::int64_t heads, std::int64_t qts, std::int64_t bc) {
    return static_cast<std::size_t>(heads * qts) * fa_tile_bytes(br, d) +
           static_cast<std::size_t>(heads) * fa_kv_bytes(bc, d) +
           static_cast<std::size_t>(br * bc) * sizeof(float);
  };
  parts = std::max<std::int64_t>(parts, 1);
  if (p.q_tiles > 1) {
    // several q tiles of one head per item, keeping >= 2 items per core for balance
    const std::int64_t want = std::clamp<std::int64_t>(p.q_tiles * s.kv_heads / (2 * parts), 1, 4);
    for (std::int64_t n = std::min(want, p.q_tiles); n > 1; --n)
      if (need(1, n, p.tiles.k_cols) <= budget) {
        p.qtiles_per_item = n;
        break;
      }
    return p;
  }
  if (s.kv_heads == 1)
    return p;
  // one q tile per head (decode, short prefill): several kv heads per item so a key tile's
  // rows for all of them are read as one contiguous stream
  const std::int64_t want = (s.kv_heads + parts - 1) / parts;
  for (std::int64_t bc : {128, 64, 32})
    if (need(want, 1, bc) <= budget) {
      p.tiles.k_cols = std::min(p.tiles.k_cols, bc);
      p.heads_per_item = want;
      return p;
    }
  p.tiles.k_cols = std::min<std::int64_t>(p.tiles.k_cols, 32);
  const std::size_t per = fa_tile_bytes(br, d) + fa_kv_bytes(32, d);
  p.heads_per_item = std::clamp<std::int64_t>(static_cast<std::int64_t>(budget / per), 1, want);
  return p;
}

} // namespace tpullm::kernels::detail
