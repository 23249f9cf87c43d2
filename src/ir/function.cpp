// Out-of-line definitions of tpullm/ir/function.hpp (compiled once into tpullm_core).
#include "tpullm/ir/function.hpp"

namespace tpullm::ir {

auto Function::add_argument(const std::string& name, TensorType type) -> Value* {
  args_.push_back(
      std::make_unique<Value>(std::move(type), nullptr, static_cast<unsigned>(args_.size())));
  arg_names_.push_back(name);
  return args_.back().get();
}

auto Function::insert(iterator pos, std::unique_ptr<Operation> op) -> Operation* {
  op->parent_ = this;
  Operation* raw = op.get();
  raw->self_ = ops_.insert(pos, std::move(op));
  return raw;
}

auto Function::erase(Operation* op) -> void {
  check(op->results_unused(), ErrorKind::internal, "@" + name_, "erasing ", op->name(),
        " whose results are still used");
  auto it = find(op);
  op->drop_operands();
  ops_.erase(it);
}

auto Function::number_ops() -> std::int64_t {
  std::int64_t n = 0;
  for (auto& op : ops_)
    op->number_ = n++;
  return n;
}

auto Function::replace_all_uses(Value* from, Value* to) -> void {
  if (from == to)
    return;
  auto users = from->users_;
  for (auto* user : users)
    for (std::size_t i = 0; i < user->num_operands(); ++i)
      if (user->operand(i) == from)
        user->set_operand(i, to);
}

void clone_function(const Function& src, Function& dst, ValueMap& map) {
  check(dst.num_arguments() == 0 && dst.ops().empty(), ErrorKind::internal, "@" + dst.name(),
        "clone target must be empty");
  dst.set_loc(src.loc());
  dst.set_info(src.info());
  dst.set_result_types(src.result_types());
  for (std::size_t i = 0; i < src.num_arguments(); ++i) {
    Value* a = dst.add_argument(src.argument_name(i), src.argument(i)->type());
    a->set_buffer(src.argument(i)->buffer());
    map[src.argument(i)] = a;
  }
  for (const auto& op : src.ops()) {
    std::vector<Value*> operands;
    for (auto* v : op->operands()) {
      auto it = map.find(v);
      check(it != map.end(), ErrorKind::internal, "@" + src.name(), op->name(),
            " uses a value defined outside the function");
      operands.push_back(it->second);
    }
    auto* c = dst.append(
        std::make_unique<Operation>(op->op(), std::move(operands), op->result_types(), op->loc()));
    c->set_plan(op->plan());
    for (std::size_t r = 0; r < op->num_results(); ++r) {
      c->result(r)->set_buffer(op->result(r)->buffer());
      map[op->result(r)] = c->result(r);
    }
  }
}

} // namespace tpullm::ir
