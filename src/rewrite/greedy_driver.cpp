// Out-of-line definitions of tpullm/rewrite/greedy_driver.hpp (compiled once into tpullm_core).
#include "tpullm/rewrite/greedy_driver.hpp"

namespace tpullm::rewrite {

GreedyDriver::GreedyDriver(ir::Module& module, const PatternSet& patterns, GreedyConfig config)
    : module_(module), config_(config) {
  if (config_.max_iterations < 1)
    throw Error(ErrorKind::invalid_input, "", "greedy driver: max_iterations must be >= 1");
  for (std::size_t k = 0; k < ir::kNumOpKinds; ++k)
    by_kind_[k] = patterns.for_kind(static_cast<ir::OpKind>(k));
}

auto GreedyDriver::run(std::vector<ir::Function*> functions) -> GreedyResult {
  if (functions.empty())
    for (const auto& f : module_.functions())
      functions.push_back(f.get());
  GreedyResult result;
  Rewriter rw(module_, this);
  for (std::int64_t iter = 1; iter <= config_.max_iterations; ++iter) {
    result.iterations = iter;
    const std::int64_t changes_before = rw.num_changes();
    for (auto* f : functions)
      for (const auto& op : f->ops())
        push(op.get());
    while (ir::Operation* op = pop()) {
      if (config_.erase_dead_ops && is_trivially_dead(*op)) {
        rw.erase_op(op);
        ++result.erased_dead;
        continue;
      }
      for (const Pattern* p : by_kind_[static_cast<std::size_t>(op->kind())]) {
        rw.set_insertion_point(op);
        const std::int64_t before = rw.num_changes();
        const bool applied = p->match_and_rewrite(op, rw);
        const bool changed = rw.num_changes() != before;
        if (applied != changed)
          throw Error(ErrorKind::internal, "",
                      "pattern '" + p->name() + "' " +
                          (applied ? "reported success without changing the IR"
                                   : "changed the IR but reported failure"));
        if (!applied)
          continue;
        ++result.rewrites;
        ++result.applied[p->name()];
        if (result.rewrites >= config_.max_rewrites) {
          clear();
          return result; // not converged: the rewrite budget ran out
        }
        break;
      }
    }
    if (rw.num_changes() == changes_before) {
      result.converged = true;
      break;
    }
  }
  return result;
}

auto GreedyDriver::pop() -> ir::Operation* {
  while (!list_.empty()) {
    ir::Operation* op = list_.front();
    list_.pop_front();
    if (in_list_.erase(op))
      return op;
  }
  return nullptr;
}

auto GreedyDriver::notify_erased(ir::Operation* op) -> void {
  in_list_.erase(op);
  for (auto* v : op->operands())
    if (auto* d = v->defining_op())
      push(d);
}

} // namespace tpullm::rewrite
