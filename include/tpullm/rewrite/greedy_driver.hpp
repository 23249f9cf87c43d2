#pragma once
/// Worklist-driven greedy application of patterns (cf. MLIR's GreedyPatternRewriteDriver).
/// Each iteration seeds the worklist with every op in program order and processes it: a dead op
/// (results unused, no side effects) is erased; otherwise the op's patterns are tried by
/// decreasing benefit until one applies. Ops created, modified, or left with fewer uses are
/// pushed back on the worklist. Iterations repeat until one makes no change (converged) or the
/// iteration / rewrite bounds are hit (not converged; the IR is still valid).

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "tpullm/rewrite/pattern.hpp"
#include "tpullm/rewrite/side_effects.hpp"

namespace tpullm::rewrite {

/// Bounds and switches of a greedy run.
struct GreedyConfig {
  std::int64_t max_iterations = 10;   ///< full sweeps at most (>= 1)
  std::int64_t max_rewrites = 100000; ///< pattern applications at most, over the whole run
  bool erase_dead_ops = true;         ///< erase trivially dead ops as they are met
};

/// What a greedy run did.
struct GreedyResult {
  bool converged = false;                      ///< the last sweep changed nothing
  std::int64_t iterations = 0;                 ///< sweeps run
  std::int64_t rewrites = 0;                   ///< successful pattern applications
  std::int64_t erased_dead = 0;                ///< dead ops erased by the driver itself
  std::map<std::string, std::int64_t> applied; ///< pattern name -> applications
};

/// Applies patterns to a set of functions until fixpoint or a bound.
class GreedyDriver : private RewriteListener {
public:
  GreedyDriver(ir::Module& module, const PatternSet& patterns, GreedyConfig config = {});

  /// Runs over `functions` (all functions of the module when empty).
  GreedyResult run(std::vector<ir::Function*> functions = {});

private:
  void push(ir::Operation* op) {
    if (in_list_.insert(op).second)
      list_.push_back(op);
  }
  ir::Operation* pop();
  void clear() {
    list_.clear();
    in_list_.clear();
  }

  void notify_inserted(ir::Operation* op) override { push(op); }
  void notify_erased(ir::Operation* op) override;
  void notify_modified(ir::Operation* op) override { push(op); }
  void notify_use_dropped(ir::Operation* op) override { push(op); }

  ir::Module& module_;
  GreedyConfig config_;
  std::array<std::vector<const Pattern*>, ir::kNumOpKinds> by_kind_;
  std::deque<ir::Operation*> list_;
  std::unordered_set<ir::Operation*> in_list_;
};

/// Applies `patterns` greedily to every function of `module`.
inline GreedyResult apply_patterns_greedily(ir::Module& module, const PatternSet& patterns,
                                            GreedyConfig config = {}) {
  return GreedyDriver(module, patterns, config).run();
}

/// Applies `patterns` greedily to one function `f` of `module`.
inline GreedyResult apply_patterns_greedily(ir::Module& module, ir::Function& f,
                                            const PatternSet& patterns, GreedyConfig config = {}) {
  return GreedyDriver(module, patterns, config).run({&f});
}

} // namespace tpullm::rewrite
