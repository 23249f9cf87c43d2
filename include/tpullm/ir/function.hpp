#pragma once
/// A function: named arguments, an ordered list of ops ending in top.Return, declared result
/// types. Ops live in a std::list so pointers stay valid while passes insert and erase.

#include <list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpullm/ir/operation.hpp"

namespace tpullm::ir {

/// A function of the IR (one stage module's body, e.g. `block_3` or `embedding`).
class Function {
public:
  using OpList = std::list<std::unique_ptr<Operation>>;
  using iterator = OpList::iterator;

  explicit Function(std::string name) : name_(std::move(name)) {}
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;
  ~Function() {
    // Drop uses first so values die with no dangling user pointers.
    for (auto& op : ops_)
      op->drop_operands();
  }

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  /// Where the function was defined (the `@name` token in text); unknown when built in C++.
  const Location& loc() const { return loc_; }
  void set_loc(Location l) { loc_ = std::move(l); }

  /// Appends an argument `%name: type` and returns it.
  Value* add_argument(const std::string& name, TensorType type) {
    args_.push_back(
        std::make_unique<Value>(std::move(type), nullptr, static_cast<unsigned>(args_.size())));
    arg_names_.push_back(name);
    return args_.back().get();
  }
  std::size_t num_arguments() const { return args_.size(); }
  Value* argument(std::size_t i) const { return args_.at(i).get(); }
  const std::string& argument_name(std::size_t i) const { return arg_names_.at(i); }

  /// Declared result types (checked against the Return op by the verifier).
  const std::vector<TensorType>& result_types() const { return result_types_; }
  void set_result_types(std::vector<TensorType> t) { result_types_ = std::move(t); }

  OpList& ops() { return ops_; }
  const OpList& ops() const { return ops_; }
  iterator begin() { return ops_.begin(); }
  iterator end() { return ops_.end(); }

  /// Inserts `op` before `pos` and returns it.
  Operation* insert(iterator pos, std::unique_ptr<Operation> op) {
    op->parent_ = this;
    return ops_.insert(pos, std::move(op))->get();
  }
  /// Appends `op`.
  Operation* append(std::unique_ptr<Operation> op) { return insert(ops_.end(), std::move(op)); }
  /// Position of `op` in this function.
  iterator find(const Operation* op) {
    for (auto it = ops_.begin(); it != ops_.end(); ++it)
      if (it->get() == op)
        return it;
    throw std::logic_error("op " + std::string(op->name()) + " is not in function @" + name_);
  }
  /// Erases `op`, which must have no used results.
  void erase(Operation* op) {
    if (!op->results_unused())
      throw std::logic_error("erasing " + std::string(op->name()) +
                             " whose results are still used");
    auto it = find(op);
    op->drop_operands();
    ops_.erase(it);
  }
  /// Replaces every use of `from` with `to`.
  static void replace_all_uses(Value* from, Value* to) {
    if (from == to)
      return;
    auto users = from->users_;
    for (auto* user : users)
      for (std::size_t i = 0; i < user->num_operands(); ++i)
        if (user->operand(i) == from)
          user->set_operand(i, to);
  }
  /// The terminating top.Return, or nullptr when missing.
  Operation* return_op() const {
    return !ops_.empty() && ops_.back()->is<ReturnOp>() ? ops_.back().get() : nullptr;
  }

private:
  std::string name_;
  Location loc_;
  std::vector<std::unique_ptr<Value>> args_;
  std::vector<std::string> arg_names_;
  std::vector<TensorType> result_types_;
  OpList ops_;
};

} // namespace tpullm::ir
