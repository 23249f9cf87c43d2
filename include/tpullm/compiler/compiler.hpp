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

#include "tpullm/codegen/compiled_model.hpp"
#include "tpullm/conversion/lower_to_tpu.hpp"
#include "tpullm/ir/module.hpp"
#include "tpullm/pass/pipeline.hpp"
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

/// Compiles `modules` (Top stage modules of one model; block functions tagged with their stage
/// and layer). Throws Error / DiagnosticError naming the module and op that failed.
codegen::CompiledModel compile(std::vector<ir::Module> modules, const CompileOptions& options);

/// The pass pipeline `compile` runs on every module, for a KV cache of `kv_capacity` slots:
///   lower-to-tpu{...}, <fusions>, layer-group{...}, plan-memory{...}
/// Its text() is what codegen::CompiledModel::pipeline records and what tpullm-opt -p parses into
/// the same pipeline. Throws pass::PipelineError when `options.fusions` is not a pipeline.
pass::Pipeline compile_pipeline(const CompileOptions& options, std::int64_t kv_capacity);

} // namespace tpullm::compiler
