#pragma once
/// `cse`: common subexpression elimination. Within each function (straight-line, so an earlier
/// op dominates every later one), an op that is structurally identical to an earlier one (same
/// kind, equal attributes compared through the op struct's attrs visitor, the same operand
/// values, equal result types) and has no side effects is replaced by the earlier op's results.
/// Two builtin.Weight reads of the same @symbol therefore merge.

#include <unordered_map>
#include <vector>

#include "tpullm/pass/options.hpp"
#include "tpullm/rewrite/op_equivalence.hpp"
#include "tpullm/rewrite/rewriter.hpp"
#include "tpullm/rewrite/side_effects.hpp"

namespace tpullm::pass {

/// Merges structurally identical ops of every function.
inline void run_cse(ir::Module& m, const NoOptions&) {
  rewrite::Rewriter rw(m);
  for (const auto& f : m.functions()) {
    std::unordered_multimap<std::size_t, ir::Operation*> seen;
    std::vector<ir::Operation*> ops;
    for (const auto& op : f->ops())
      ops.push_back(op.get());
    for (ir::Operation* op : ops) {
      if (op->num_results() == 0 || rewrite::has_side_effects(*op))
        continue;
      // Operands of `op` already point at surviving ops, so equal operands mean equal values.
      const std::size_t h = rewrite::op_hash(*op);
      ir::Operation* same = nullptr;
      for (auto [it, end] = seen.equal_range(h); it != end && !same; ++it)
        if (rewrite::ops_equivalent(*it->second, *op))
          same = it->second;
      if (!same) {
        seen.emplace(h, op);
        continue;
      }
      std::vector<ir::Value*> results;
      for (std::size_t i = 0; i < same->num_results(); ++i)
        results.push_back(same->result(i));
      rw.replace_op(op, results);
    }
  }
}

} // namespace tpullm::pass
