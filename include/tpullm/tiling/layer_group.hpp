#pragma once
/// `layer-group`: the paper's layer groups for the reference TPU. Consecutive Tpu ops that are
/// row-local (each output row needs only the same rows of its inputs: norms, projections, RoPE,
/// KV stores, elementwise ops, the MLP, and attention over keys produced before the group) form
/// a group that runs tile by tile over the token rows; values defined and used inside the group
/// live in a core's local memory for one tile instead of in the arena, and tiles are dealt to
/// cores. The tile size comes from a cost model:
///   cost(T) = sum over ops of weight bytes x passes (a GEMM re-reads its weights every
///             336-row block and every tile) + 2 x bytes of values that leave the group
///             + tiles x ops x a fixed per-tile overhead,
/// subject to one tile's intermediates plus the largest kernel working set fitting the local
/// memory. A group is kept only when its best cost beats running its ops ungrouped (every value
/// larger than the local memory then costs 2 x its bytes). Every op also gets a core split:
/// decode-sized ops split output columns (projections) or heads (attention), prefill-sized
/// ones split rows. The decision is recorded in each op's plan and is what the executor does.

#include <cstdint>

#include "tpullm/ir/module.hpp"

namespace tpullm::tiling {

/// Options of `layer-group`.
struct LayerGroupOptions {
  std::int64_t local_memory = 0; ///< bytes of local memory per core (0: this machine's L2)
  std::int64_t cores = 0;        ///< cores (0: this machine's)
  std::int64_t tile_rows = 0;    ///< force this tile size on every group (0: cost model)
  bool groups = true;            ///< form layer groups (false: core splits only)
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("local-memory", s.local_memory, "bytes of local memory per core (0: this machine's L2)");
    f("cores", s.cores, "cores to split work across (0: this machine's)");
    f("tile-rows", s.tile_rows, "force this many rows per tile (0: choose by the cost model)");
    f("groups", s.groups, "form layer groups (false: only set core splits)");
  }
};

/// Plans every function of `m` (Tpu ops only): layer groups, tiles, core splits.
void layer_group(ir::Module& m, const LayerGroupOptions& options);

/// Empty when the plans of `f` are consistent (group members consecutive and sharing one tile
/// plan, every op of a row-tiled group row-local with the group's rows, splits within the
/// cores, local memory within `local_memory` when > 0); else the first violation.
std::string check_plans(const ir::Function& f, std::int64_t local_memory = 0);

} // namespace tpullm::tiling
