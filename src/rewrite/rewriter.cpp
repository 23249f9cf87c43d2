// Out-of-line definitions of tpullm/rewrite/rewriter.hpp (compiled once into tpullm_core).
#include "tpullm/rewrite/rewriter.hpp"

namespace tpullm::rewrite {

auto Rewriter::replace_all_uses_with(ir::Value* from, ir::Value* to) -> void {
  if (from == to)
    return;
  if (!(from->type() == to->type()))
    throw Error(ErrorKind::internal, "",
                "replacing a value of type " + from->type().str() + " with one of type " +
                    to->type().str());
  auto users = from->users();
  users.erase(std::unique(users.begin(), users.end()), users.end());
  if (users.empty())
    return;
  ir::Function::replace_all_uses(from, to);
  record();
  if (listener_) {
    for (auto* u : users)
      listener_->notify_modified(u);
    if (auto* d = from->defining_op())
      listener_->notify_use_dropped(d);
  }
}

auto Rewriter::replace_op(ir::Operation* op, const std::vector<ir::Value*>& values) -> void {
  if (values.size() != op->num_results())
    throw Error(ErrorKind::internal, "",
                "replacing " + std::string(op->name()) + " (" + std::to_string(op->num_results()) +
                    " results) with " + std::to_string(values.size()) + " values");
  for (std::size_t i = 0; i < values.size(); ++i)
    replace_all_uses_with(op->result(i), values[i]);
  erase_op(op);
}

auto Rewriter::erase_op(ir::Operation* op) -> void {
  if (!op->results_unused())
    throw Error(ErrorKind::internal, "",
                "erasing " + std::string(op->name()) + " whose results are still used");
  ir::Function* f = op->parent();
  if (!f)
    throw Error(ErrorKind::internal, "",
                "erasing " + std::string(op->name()) + " that is in no function");
  if (before_ == op)
    before_ = next_op(*f, op);
  std::vector<ir::Operation*> defs = operand_defs(op);
  if (listener_)
    listener_->notify_erased(op);
  f->erase(op);
  record();
  if (listener_)
    for (auto* d : defs)
      listener_->notify_use_dropped(d);
}

auto Rewriter::erase_weight(const std::string& name) -> void {
  for (const auto& f : module_.functions())
    for (const auto& op : f->ops())
      if (const auto* w = op->as<ir::builtin::WeightOp>(); w && w->name.name == name)
        throw Error(ErrorKind::internal, "",
                    "erasing weight @" + name + " still read in @" + f->name());
  if (!module_.find_weight(name))
    throw Error(ErrorKind::internal, "", "erasing unknown weight @" + name);
  module_.erase_weight(name);
  record();
}

auto Rewriter::operand_defs(const ir::Operation* op) -> std::vector<ir::Operation*> {
  std::vector<ir::Operation*> defs;
  for (auto* v : op->operands())
    if (auto* d = v->defining_op(); d && std::find(defs.begin(), defs.end(), d) == defs.end())
      defs.push_back(d);
  return defs;
}

} // namespace tpullm::rewrite
