#pragma once
/// Side-effect facts the rewriter, the greedy driver, DCE and CSE rely on.
/// An op struct opts in with `static constexpr bool has_side_effects = true;` when it does more
/// than compute its results (e.g. a future in-place KV-cache store); such ops are never erased as
/// dead nor merged by CSE. builtin.Return is the terminator and always counts as side-effecting.

#include <concepts>
#include <type_traits>

#include "tpullm/ir/operation.hpp"

namespace tpullm::rewrite {

/// True when op struct T declares a `has_side_effects` constant.
template <class T>
concept DeclaresSideEffects = requires {
  { T::has_side_effects } -> std::convertible_to<bool>;
};

/// Whether ops of struct type T have effects beyond their results.
template <class T>
constexpr bool op_has_side_effects() {
  if constexpr (DeclaresSideEffects<T>)
    return T::has_side_effects;
  else
    return std::is_same_v<T, ir::builtin::ReturnOp>;
}

/// Whether `op` has effects beyond its results (builtin.Return, or a struct that declares them).
inline bool has_side_effects(const ir::Operation& op) {
  return ir::visit_op(
      op.op(), [](const auto& o) { return op_has_side_effects<std::decay_t<decltype(o)>>(); });
}

/// True when erasing `op` cannot change the program: it has results, none is used, and it has no
/// side effects. builtin.Return (no results) is never dead.
inline bool is_trivially_dead(const ir::Operation& op) {
  return op.num_results() > 0 && op.results_unused() && !has_side_effects(op);
}

} // namespace tpullm::rewrite
