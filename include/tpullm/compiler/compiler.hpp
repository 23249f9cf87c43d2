#pragma once
/// The compiler: stage modules (Top) -> Tpu modules, lowered, fused, grouped into layer groups
/// and memory-planned -> Programs the executor runs. Modules compile independently (in
/// parallel) and share one WeightConverter, so each weight is converted once whatever number of
/// stage functions read it. One typed pass::Pipeline (compile_pipeline) runs on every module:
///   lower-to-tpu{mode=...}, <fusions>, layer-group{...}, plan-memory{kv-capacity=...}

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tpullm/codegen/program.hpp"
#include "tpullm/conversion/lower_to_tpu.hpp"
#include "tpullm/ir/module.hpp"
#include "tpullm/pass/pipeline.hpp"
#include "tpullm/runtime/executor.hpp"
#include "tpullm/target/target.hpp"

namespace tpullm::compiler {

/// How to compile.
struct CompileOptions {
  conversion::LowerOptions lower;                ///< mode, embedding and lm_head dtypes
  target::Target target = target::host_target(); ///< cores and local memory to plan for
  std::string fusions;                           ///< passes after lowering (a pipeline)
  bool layer_groups = true;                      ///< form layer groups (else core splits only)
  std::int64_t tile_rows = 0;                    ///< force tiles of this many rows (0: cost model)
  bool kv_in_place = true;                       ///< produce keys / values in the cache slot
  std::int64_t kv_capacity = 0;                  ///< KV slots per layer (0: what views need)
  std::int64_t threads = 0;                      ///< modules compiled at once (0: target cores)
  /// Called after each module: (done, total, module name).
  std::function<void(std::size_t, std::size_t, const std::string&)> progress;
};

/// A compiled model in memory.
struct CompiledModel {
  std::vector<ir::Module> modules;        ///< planned Tpu modules (weights with data)
  std::vector<codegen::Program> programs; ///< one per function, in module order
  runtime::KvGeometry kv;                 ///< the cache every program was planned for
  target::Target target;                  ///< what the plans assume
  double seconds = 0;                     ///< wall-clock compile time
  std::int64_t weight_bytes = 0;          ///< bytes of distinct weights the programs read
  std::int64_t conversions = 0;           ///< weights converted (each once)
  std::int64_t max_arena = 0;             ///< largest activation arena of any function
  std::int64_t max_local = 0;             ///< largest per-core local memory of any group
  std::int64_t arena_lower_bound = 0;     ///< largest max-live lower bound of any function
  std::string pipeline;                   ///< the pass pipeline every module ran (text)
};

/// Compiles `modules` (Top stage modules of one model; block functions tagged with their stage
/// and layer). Throws Error / DiagnosticError naming the module and op that failed.
CompiledModel compile(std::vector<ir::Module> modules, const CompileOptions& options);

/// The pass pipeline `compile` runs on every module, for a KV cache of `kv_capacity` slots:
///   lower-to-tpu{...}, <fusions>, layer-group{...}, plan-memory{...}
/// Its text() is what CompiledModel::pipeline records and what tpullm-opt -p parses into the
/// same pipeline. Throws pass::PipelineError when `options.fusions` is not a pipeline.
pass::Pipeline compile_pipeline(const CompileOptions& options, std::int64_t kv_capacity);

/// An executor loaded with every program and weight of `model` (its own KV cache, of `slots`
/// conversations).
std::unique_ptr<runtime::Executor> make_executor(const CompiledModel& model,
                                                 std::int64_t slots = 1);

} // namespace tpullm::compiler
