#pragma once
/// A compiled model in memory: what compiler::compile returns, what bundle::write_bundle writes
/// and what runtime::make_executor loads when no bundle file is involved. Data only: the
/// compiler, the bundle and the runtime all read it, none of them is needed to hold it.

#include <cstdint>
#include <string>
#include <vector>

#include "tpullm/codegen/program.hpp"
#include "tpullm/ir/module.hpp"
#include "tpullm/memory/kv_geometry.hpp"
#include "tpullm/target/target.hpp"

namespace tpullm::codegen {

/// See the file comment.
struct CompiledModel {
  std::vector<ir::Module> modules;    ///< planned Tpu modules (weights with data)
  std::vector<Program> programs;      ///< one per function, in module order
  memory::KvGeometry kv;              ///< the cache every program was planned for
  target::Target target;              ///< what the plans assume
  double seconds = 0;                 ///< wall-clock compile time
  std::int64_t weight_bytes = 0;      ///< bytes of distinct weights the programs read
  std::int64_t conversions = 0;       ///< weights converted (each once)
  std::int64_t max_arena = 0;         ///< largest activation arena of any function
  std::int64_t max_local = 0;         ///< largest per-core local memory of any group
  std::int64_t arena_lower_bound = 0; ///< largest max-live lower bound of any function
  std::string pipeline;               ///< the pass pipeline every module ran (text)
};

} // namespace tpullm::codegen
