#pragma once
/// The driver of prefill attention on AMX: flash_attention_amx cuts the grouped rows into work
/// items (kv head, up to kFaAmxTilesPerItem q tiles of 32 rows) and runs each on the tile unit
/// (a bf16, f16 or int8 cache with an even head dim up to 64: flash_attention_amx_resident.hpp;
/// a bf16 cache past d 64: flash_attention_amx_hw.hpp; another float cache: the scalar body of
/// flash_attention_amx.hpp on the tile unit) or on the emulator (float caches).

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/kv8.hpp"
#include "tpullm/kernels/detail/flash_attention_amx.hpp"
#include "tpullm/kernels/detail/flash_attention_amx_hw.hpp"
#include "tpullm/kernels/detail/flash_attention_amx_resident.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::kernels::detail {

/// Q tiles (32 rows) per AMX work item: K / V tile conversion is shared by an item's tiles.
inline constexpr std::int64_t kFaAmxTilesPerItem = 8;
/// Up to this many q tiles per item of the resident-O path (flash_attention_amx_resident.hpp).
/// An item stages each chunk of keys once, so larger items stage less, but every q tile of an
/// item that sees a chunk reads its Q and O (7 KiB) again from L2: against a 32k-token history,
/// items of 28 / 56 / 112 tiles ran 1192-1196 / 1225-1267 / 1274-1283 GFLOP/s, while a causal
/// 4096-token prefill ran 1076-1086 / 1035-1072 / 957-997 at caps of 32 / 64 / 128
/// (docs/kernels.md round 18).
inline constexpr std::int64_t kFaResidentTilesPerItem = 64;

/// Whether a call of this cache type and shape takes the resident-O item on the tile unit: a
/// bf16, f16 or int8 cache (flash_attention_amx_stage.hpp) with an even head dim up to 64.
template <class KV>
bool fa_amx_takes_resident(const AttentionShape& s, bool emulated) {
#if TPULLM_X86
  return (std::is_same_v<KV, bf16_t> || std::is_same_v<KV, f16_t> ||
          std::is_same_v<KV, kv8_t>)&&!emulated &&
         s.head_dim % 2 == 0 && s.head_dim <= 64;
#else
  (void)s;
  (void)emulated;
  return false;
#endif
}

/// Prefill attention on AMX (L_valid > kDecodeArithmeticRows; checks done by the caller).
/// `emulated`: run the tile emulator instead of the tile unit. Items (kv head, up to 8 q tiles;
/// on the resident-O path up to 64 in equal shares, a multiple of the parts where that takes
/// fewer than 4 items per part) follow
/// `split` like the AVX-512 path: heads -> kv heads across cores, rows / none -> items
/// round-robin / in order.
template <class KV>
void flash_attention_amx(const float* q, const KV* k, const KV* v, const std::int32_t* pos,
                         float* out, const AttentionShape& s, const CoreSplit& split,
                         bool emulated) {
  const std::int64_t M = s.L_valid * (s.q_heads / s.kv_heads), tiles = (M + 31) / 32;
  const std::int64_t parts = split.dim == SplitDim::none ? 1 : std::max(1, split.parts);
  std::int64_t per_item = kFaAmxTilesPerItem;
  if (fa_amx_takes_resident<KV>(s, emulated)) {
    // items per kv head: as few as the cap allows, then more until the parts get as many each
    // (a head's items are equal in rows; round-robin then balances a causal call too)
    std::int64_t n =
        std::max<std::int64_t>(1, (tiles + kFaResidentTilesPerItem - 1) / kFaResidentTilesPerItem);
    while (n < tiles && (s.kv_heads * n) % parts != 0 && s.kv_heads * n < 4 * parts)
      ++n;
    per_item = std::max<std::int64_t>(1, (tiles + n - 1) / n);
  }
  const std::int64_t per_head = (tiles + per_item - 1) / per_item;
  const std::int64_t items = s.kv_heads * per_head;
  auto run = [&](std::int64_t it) {
    const std::int64_t h = it / per_head, c = it % per_head;
    const std::int64_t t0 = c * per_item, t1 = std::min(tiles, t0 + per_item);
#if TPULLM_X86
    if (!emulated) {
      if constexpr (!std::is_same_v<KV, float>) {
        if (fa_amx_takes_resident<KV>(s, emulated)) {
          if (s.head_dim <= 32)
            fa_amx_item_resident<32, KV>(q, k, v, pos, out, s, h, t0, t1);
          else
            fa_amx_item_resident<64, KV>(q, k, v, pos, out, s, h, t0, t1);
          return;
        }
      }
      if constexpr (std::is_same_v<KV, bf16_t>) {
        if (s.head_dim % 2 == 0) { // the hardware path's cache (flash_attention.hpp)
          fa_amx_item_bf16_hw(q, k, v, pos, out, s, h, t0, t1);
          return;
        }
      }
      if constexpr (!std::is_same_v<KV, kv8_t>) {
        fa_amx_item_hw<KV>(q, k, v, pos, out, s, h, t0, t1);
        return;
      }
    }
#endif
    if constexpr (std::is_same_v<KV, kv8_t>)
      throw_error(ErrorKind::internal, "",
                  "flash_attention: an int8 cache reached the tile unit's driver off its resident "
                  "path");
    else
      fa_amx_item_emu<KV>(q, k, v, pos, out, s, h, t0, t1);
  };
  if (split.dim == SplitDim::heads) {
    parallel_for(split, s.kv_heads, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t it = b * per_head; it < e * per_head; ++it)
        run(it);
    });
    return;
  }
  parallel_items(static_cast<int>(std::min(parts, items)), items, run);
}

} // namespace tpullm::kernels::detail
