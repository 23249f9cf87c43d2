#pragma once
/// THE pass table: every pass the pipeline syntax, tpullm-opt and the compiler know, in one
/// place. Adding a pass = its function and options struct in pass/passes/<name>.hpp, one row
/// here, a `.tir` test in tests/ir/passes/, and a line in docs/passes.md.

#include <string_view>
#include <vector>

#include "tpullm/conversion/lower_to_tpu.hpp"
#include "tpullm/memory/plan_memory.hpp"
#include "tpullm/tiling/layer_group.hpp"
#include "tpullm/pass/pass.hpp"
#include "tpullm/pass/passes/fusion.hpp"
#include "tpullm/pass/passes/canonicalize.hpp"
#include "tpullm/pass/passes/cse.hpp"
#include "tpullm/pass/passes/dce.hpp"

namespace tpullm::pass {

/// Every registered pass, sorted by name.
const std::vector<PassInfo>& pass_registry();

/// The row of pass `name`, or nullptr.
const PassInfo* find_pass(std::string_view name);

} // namespace tpullm::pass
