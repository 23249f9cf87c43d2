#pragma once
/// Builtin ops (namespace ir::builtin), neutral between the Top and Tpu op sets: a reference to
/// a module weight and the function terminator. Both dialects' functions use them.

#include <vector>

#include "tpullm/ir/top_ops.hpp"

namespace tpullm::ir::builtin {

/// A module weight by reference: () -> the type the module's weight table declares for @name.
struct WeightOp {
  static constexpr Arity operands{0, 0};
  static constexpr int results = 1;
  SymbolRef name; ///< module weight symbol
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("name", s.name);
  }
  /// No inference: the verifier checks the result against the module's weight table.
  std::vector<TensorType> infer(Types) const { return {}; }
};

/// Terminator: its operands are the function's results.
struct ReturnOp {
  static constexpr Arity operands{0, -1};
  static constexpr int results = 0;
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types) const { return {}; }
};

} // namespace tpullm::ir::builtin
