#pragma once
/// `plan-memory`: static memory planning of Tpu functions. Every value gets a Buffer
/// (ir/buffer.hpp) and every function a MemoryInfo:
///  - arguments live in the caller's input spans, returned values are produced straight into
///    the caller's output spans (no copies of inputs or outputs);
///  - views (tpu.Reshape, contiguous tpu.Slice, tpu.KVAppend) share their operand's bytes, and an
///    op that may work in place (`in_place` trait) takes over its operand's bytes when that
///    operand dies there;
///  - the KV cache: one region with a key and a value cache per layer, [kv-capacity, kv_heads,
///    d] f32 each; a tpu.KVStore result lives at its layer's cache at offset position_ids[0]
///    (pos_stride); with kv-in-place its operand is produced there directly (RoPE and the v
///    projection write the cache slot, the store copies nothing); history arguments are the
///    cache itself, and tpu.KVAppend is an address, so history is never copied;
///  - everything else is placed in one activation arena by intervals of liveness (first-fit,
///    best-fit and interference coloring on Boost.Graph; the smallest wins), or, inside a layer
///    group, in a core's local memory per tile.
/// The pass checks its result: no two simultaneously live buffers overlap, every buffer lies in
/// its region.

#include <cstdint>
#include <string>

#include "tpullm/ir/module.hpp"

namespace tpullm::memory {

/// Options of `plan-memory`.
struct PlanMemoryOptions {
  std::int64_t kv_capacity = 0;  ///< slots per layer cache; 0 = the largest any function needs
  bool kv_in_place = true;       ///< produce stored keys / values directly in the cache slot
  std::string strategy = "best"; ///< best, first-fit, best-fit or coloring
  std::int64_t alignment = 64;   ///< byte alignment of every placed buffer
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("kv-capacity", s.kv_capacity,
      "slots of each layer's key / value cache (0: what the "
      "module's functions need)");
    f("kv-in-place", s.kv_in_place, "write stored keys / values straight into the cache slot");
    f("strategy", s.strategy, "arena placement: best (try all), first-fit, best-fit, coloring");
    f("alignment", s.alignment, "byte alignment of every buffer (a power of two)");
  }
};

/// Plans every function of `m` (Tpu ops only). Throws Error naming the function when a buffer
/// cannot be placed (e.g. a KV view beyond kv-capacity).
void plan_memory(ir::Module& m, const PlanMemoryOptions& options);

/// The KV geometry Tpu functions need: the most cache slots a KV view spans and the bytes of
/// one slot (both 0 without KV ops).
struct KvNeeds {
  std::int64_t capacity = 0; ///< slots per layer cache
  std::int64_t row = 0;      ///< bytes of one slot (kv_heads * head_dim elements)
};

/// The one place the KV capacity is derived: `need` widened by the KV ops of `m` (those whose
/// policy writes KV or names a kv_cache_operand; their result 0 is a view of the cache).
/// plan-memory takes it per module; the compiler, over all modules, before planning any (every
/// module shares one cache layout). Throws Error(invalid_input) when slot sizes disagree.
KvNeeds kv_needs(const ir::Module& m, KvNeeds need = {});

/// The byte offset of layer `layer`'s key (kind 0) or value (kind 1) cache in the kv region.
std::int64_t kv_cache_offset(std::int64_t layer, int kind, std::int64_t capacity,
                             std::int64_t row_bytes);

/// Empty when every value of planned function `f` has a buffer inside its region (arena within
/// MemoryInfo::arena, local within ::local, kv within the layer's cache) and no two
/// simultaneously live arena / local buffers overlap; else the first violation.
std::string check_memory_plan(const ir::Function& f);

} // namespace tpullm::memory
