#pragma once
/// `dce`: dead code elimination. Erases ops whose results are all unused and that have no side
/// effects (builtin.Return never is dead), walking each function backwards so whole dead chains go
/// in one sweep; then drops weights no builtin.Weight reads from the module table (unless
/// keep-weights=true).

#include <set>
#include <string>
#include <vector>

#include "tpullm/pass/options.hpp"
#include "tpullm/rewrite/rewriter.hpp"
#include "tpullm/rewrite/side_effects.hpp"

namespace tpullm::pass {

/// Options of `dce`.
struct DceOptions {
  bool keep_weights = false; ///< keep unreferenced weights in the module table
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("keep-weights", s.keep_weights, "keep weights no function reads in the module table");
  }
};

/// Erases dead ops of every function, then unreferenced weights.
inline void run_dce(ir::Module& m, const DceOptions& opts) {
  rewrite::Rewriter rw(m);
  std::set<std::string> read;
  for (const auto& f : m.functions()) {
    std::vector<ir::Operation*> ops;
    for (const auto& op : f->ops())
      ops.push_back(op.get());
    // Users come after their operands' definitions, so a backward walk sees them first.
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      if (rewrite::is_trivially_dead(**it))
        rw.erase_op(*it);
      else if (const auto* w = (*it)->as<ir::builtin::WeightOp>())
        read.insert(w->name.name);
    }
  }
  if (opts.keep_weights)
    return;
  std::vector<std::string> unread;
  for (const auto& [name, w] : m.weights())
    if (!read.count(name))
      unread.push_back(name);
  for (const auto& name : unread)
    rw.erase_weight(name);
}

} // namespace tpullm::pass
