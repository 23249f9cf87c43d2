// Out-of-line definitions of tpullm/ir/operation.hpp (compiled once into tpullm_core).
#include "tpullm/ir/operation.hpp"

namespace tpullm::ir {

Operation::Operation(OpVariant op, std::vector<Value*> operands,
                     const std::vector<TensorType>& result_types, Location loc)
    : op_(std::move(op)), loc_(std::move(loc)) {
  for (auto* v : operands)
    add_operand(v);
  for (unsigned i = 0; i < result_types.size(); ++i)
    results_.push_back(std::make_unique<Value>(result_types[i], this, i));
}

auto Operation::operand_types() const -> std::vector<TensorType> {
  std::vector<TensorType> t;
  for (auto* v : operands_)
    t.push_back(v->type());
  return t;
}

auto Operation::result_types() const -> std::vector<TensorType> {
  std::vector<TensorType> t;
  for (const auto& r : results_)
    t.push_back(r->type());
  return t;
}

auto Operation::remove_use(Value* v) -> void {
  auto& u = v->users_;
  auto it = std::find(u.begin(), u.end(), this);
  if (it != u.end())
    u.erase(it);
}

} // namespace tpullm::ir
