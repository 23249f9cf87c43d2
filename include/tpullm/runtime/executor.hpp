#pragma once
/// Runs Programs (planned Tpu functions, codegen/program.hpp) on the reference kernel library.
/// The executor owns the memory regions a plan addresses: the KV cache (per conversation slot, a
/// key and a value cache per layer, [capacity, kv_heads, d] of f32 / f16 / bf16, written in place
/// at the tokens' positions; memory/kv_geometry.hpp), one activation arena shared by every program
/// (one runs at a time), and a local-memory scratch per core for the tiles of layer groups. Inputs
/// and outputs are the caller's spans: arguments are read where they are and results are produced
/// straight into the output spans, so nothing is copied on the way in or out, and history is never
/// copied (it is the cache).
///
/// A layer group runs tile by tile as planned: its tiles are dealt to cores (split {tiles, p}),
/// each core with its own local scratch holding the group's intermediate rows; ungrouped ops
/// run whole with their planned core split.

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tpullm/codegen/program.hpp"
#include "tpullm/ir/module.hpp"
#include "tpullm/kernels/packed_weights.hpp"
#include "tpullm/memory/kv_geometry.hpp"
#include "tpullm/memory/kv_rings.hpp"
#include "tpullm/runtime/kv_region.hpp"

namespace tpullm::bundle {
class Bundle;
}
namespace tpullm::codegen {
struct CompiledModel;
}

namespace tpullm::runtime {

/// Geometry of the KV cache region (memory/kv_geometry.hpp, shared with the planner).
using KvGeometry = memory::KvGeometry;

/// Time spent by the executor, for the "share of time inside kernels" figure.
struct ExecStats {
  double total_seconds = 0;  ///< inside run()
  double kernel_seconds = 0; ///< inside kernel calls (and view / copy steps of instructions)
  std::int64_t runs = 0;     ///< run() calls
  std::int64_t instrs = 0;   ///< instructions executed (tiles count once per tile)
  /// kernel_seconds by op kind (indexed by ir::OpKind; a layer group's tiles counted under its
  /// first op's kind), filled while profiling like kernel_seconds.
  std::array<double, ir::kNumOpKinds> op_seconds{};
};

/// Executes Programs; see the file comment.
class Executor {
public:
  /// `cores`: threads the plans may use; `local_memory`: bytes of scratch per core (at least the
  /// largest layer group's `local`); `rings`: the layers whose caches are rings
  /// (runtime/kv_region.hpp; none: every position kept).
  Executor(KvGeometry kv, std::int64_t cores, std::int64_t local_memory,
           const memory::KvRings& rings = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// Makes every weight of `m` available by name; shares their bytes (no copy). A weight name
  /// already known must have the same type.
  void add_weights(const ir::Module& m);
  /// Makes one weight available by name (shares its bytes).
  void add_weight(const ir::Weight& w);
  /// Adds a program; its weights must be known (add_weights first). Throws Error naming what
  /// does not fit (a KV geometry other than the executor's, a missing weight).
  void add_program(codegen::Program p);
  /// True when a program of that name was added.
  bool has_program(const std::string& name) const;
  /// The program `name` (throws Error when unknown).
  const codegen::Program& program(const std::string& name) const;
  /// The id of program `name` (throws Error when unknown): run(id, ...) then does no name
  /// lookup. Ids are stable for the executor's lifetime (re-adding a name keeps its id).
  std::int64_t program_id(const std::string& name) const;

  /// Runs program `name`. inputs[i]: the bytes of argument i (its type's exact size); an
  /// argument that lives in the KV cache (history) takes an empty span, its data is the cache
  /// (a non-empty one is copied into the cache first, for tests). outputs: empty, or one span
  /// per result, each empty (the result is returned as a view) or exactly the result's size
  /// (the result is produced there). Returns a view of every result: the output span, or the
  /// executor's storage (valid until the next run; keys and values point into the cache).
  /// Throws Error(invalid_input) for bad inputs (sizes, positions not consecutive or beyond the
  /// cache, ids outside the vocabulary).
  std::vector<std::span<const std::byte>> run(const std::string& name,
                                              std::span<const std::span<const std::byte>> inputs,
                                              std::span<const std::span<std::byte>> outputs = {});
  /// run() of the program with id `id` (program_id), on KV slot 0.
  std::vector<std::span<const std::byte>> run(std::int64_t id,
                                              std::span<const std::span<const std::byte>> inputs,
                                              std::span<const std::span<std::byte>> outputs = {});
  /// run() of program `id` over the KV slots `slots` (each in [0, kv_geometry().slots)): one
  /// slot for a single-conversation program (its caches are that slot's), one per row for a
  /// batched decode program (position_ids [B, 1]: row b reads and writes slot slots[b] at
  /// position_ids[b]; rows may repeat a slot only with identical inputs). Throws
  /// Error(invalid_input) for a wrong count or a slot out of range.
  std::vector<std::span<const std::byte>> run(std::int64_t id,
                                              std::span<const std::span<const std::byte>> inputs,
                                              std::span<const std::span<std::byte>> outputs,
                                              std::span<const std::int32_t> slots);

  /// The cache of layer `layer` of KV slot `slot`: kind 0 = keys, 1 = values;
  /// [capacity, kv_heads, d] f32 (an f16 / bf16 cache throws Error(unsupported)).
  std::span<float> cache(std::int64_t layer, int kind, std::int64_t slot = 0);
  /// KV geometry of the owned cache.
  const KvGeometry& kv_geometry() const { return kv_; }
  /// The sliding-window layers whose caches are rings (memory/kv_rings.hpp; empty: none).
  const memory::KvRings& kv_rings() const;
  /// Bytes of memory behind the KV cache region (less than kv_geometry().bytes() with rings).
  std::int64_t kv_memory_bytes() const;
  /// What the KV cache region may count in the resident set at most (KvRings::resident_bytes;
  /// kv_geometry().bytes() without rings).
  std::int64_t kv_resident_bytes() const;
  /// Bytes of the activation arena and of all cores' local scratch currently allocated.
  std::int64_t arena_bytes() const;
  std::int64_t local_bytes() const;

  /// Accumulated timings (kernel timing only while profiling is on).
  const ExecStats& stats() const { return stats_; }
  /// Threads of this executor's worker pool (kernels/worker_pool.hpp), the caller's included.
  std::int64_t threads() const;
  /// Dispatches in which the pool left a straggling worker out (one preempted by another
  /// process on its core), since the executor was made.
  std::int64_t pool_stalls() const;
  /// From now on runs its kernels on `other`'s worker threads (which must be as many as its
  /// own), and lets its own go: a draft model beside its target then has no idle workers of its
  /// own spinning on the cores while the target runs, nor the target's while it runs. The two
  /// must never run at the same time (a pool runs one dispatch at a time). Throws
  /// Error(invalid_input) for pools of different sizes.
  void share_workers(const Executor& other);
  void reset_stats() { stats_ = {}; }
  /// Times every instruction (a little overhead) to fill ExecStats::kernel_seconds.
  void set_profiling(bool on) { profiling_ = on; }

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  KvGeometry kv_;
  ExecStats stats_;
  bool profiling_ = false;
};

/// The one way to make an Executor: every program and weight of the opened bundle `b` (weights
/// shared with its mapping, not copied) and its own KV cache of `slots` conversations
/// (memory/kv_geometry.hpp). `cores` 0: the target's cores, but no more than this process may
/// run on (kernels::usable_cores); an explicit count is obeyed. Throws Error(invalid_input) for
/// `cores` outside [0, 4096] or `slots` outside [1, 4096], and, naming the bundle's file, when
/// the KV cache, activation arena and local scratch it would allocate exceed the memory
/// available (frontend::memory_limit_bytes). A sliding-window layer's cache is a ring
/// (memory/kv_rings.hpp: kv_rings_of the programs) unless `kv_rings` is false (every position
/// kept: what tests compare the rings with).
std::unique_ptr<Executor> make_executor(const bundle::Bundle& b, std::int64_t cores = 0,
                                        std::int64_t slots = 1, bool kv_rings = true);
/// make_executor of a compiled model in memory (compiler::compile's result, no bundle file:
/// `tpullm verify`, tests, benchmarks), by the same rules; its weights are every module's.
std::unique_ptr<Executor> make_executor(const codegen::CompiledModel& m, std::int64_t cores = 0,
                                        std::int64_t slots = 1, bool kv_rings = true);

} // namespace tpullm::runtime
