#pragma once
/// Side-effect facts the rewriter, the greedy driver, DCE and CSE rely on. An op has effects
/// beyond its results when its policy (ir/op_policy.hpp) names a memory effect (tpu.KVStore
/// writes the KV cache); such ops are never erased as dead nor merged by CSE. builtin.Return is
/// the terminator and always counts as side-effecting.

#include "tpullm/ir/operation.hpp"

namespace tpullm::rewrite {

/// Whether ops of kind `k` have effects beyond their results.
constexpr bool op_has_side_effects(ir::OpKind k) {
  return k == ir::OpKind::builtin_Return || ir::policy_of(k).effect != ir::MemoryEffect::none;
}

/// Whether `op` has effects beyond its results (builtin.Return, or a memory effect).
inline bool has_side_effects(const ir::Operation& op) {
  return op_has_side_effects(op.kind());
}

/// True when erasing `op` cannot change the program: it has results, none is used, and it has no
/// side effects. builtin.Return (no results) is never dead.
inline bool is_trivially_dead(const ir::Operation& op) {
  return op.num_results() > 0 && op.results_unused() && !has_side_effects(op);
}

} // namespace tpullm::rewrite
