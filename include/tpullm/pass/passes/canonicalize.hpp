#pragma once
/// `canonicalize`: runs the canonicalization patterns (rewrite/patterns/canonical.hpp) with the
/// greedy driver, which also erases dead ops. Fails when test-convergence=true and the patterns
/// did not reach a fixpoint within max-iterations.

#include <stdexcept>
#include <string>

#include "tpullm/pass/options.hpp"
#include "tpullm/rewrite/greedy_driver.hpp"
#include "tpullm/rewrite/patterns/canonical.hpp"

namespace tpullm::pass {

/// Options of `canonicalize`.
struct CanonicalizeOptions {
  std::int64_t max_iterations = 10; ///< greedy sweeps at most
  bool test_convergence = false;    ///< fail when no fixpoint was reached
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("max-iterations", s.max_iterations, "upper bound on greedy sweeps over the IR (>= 1)");
    f("test-convergence", s.test_convergence, "fail when the patterns do not converge");
  }
};

/// Canonicalizes every function of `m`.
inline void run_canonicalize(ir::Module& m, const CanonicalizeOptions& opts) {
  if (opts.max_iterations < 1)
    throw Error(ErrorKind::invalid_input, "",
                "canonicalize: max-iterations must be >= 1, got " +
                    std::to_string(opts.max_iterations));
  rewrite::GreedyConfig config;
  config.max_iterations = opts.max_iterations;
  const auto patterns = rewrite::patterns::canonicalization_patterns();
  const auto result = rewrite::apply_patterns_greedily(m, patterns, config);
  if (opts.test_convergence && !result.converged)
    throw Error(ErrorKind::invalid_input, "",
                "canonicalize did not converge after " + std::to_string(result.iterations) +
                    " iterations (" + std::to_string(result.rewrites) + " rewrites)");
}

} // namespace tpullm::pass
