#pragma once
/// SSA values and operations. A Value has one definition (an op result or a function argument)
/// and a use list; an Operation holds its op struct (kind + typed attributes), operands,
/// results and location. Mutation goes through Function / Rewriter, which keep use lists exact.

#include <algorithm>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tpullm/ir/buffer.hpp"
#include "tpullm/ir/op_kind.hpp"
#include "tpullm/ir/plan.hpp"
#include "tpullm/support/diagnostic.hpp"

namespace tpullm::ir {

class Operation;
class Function;

/// An SSA value: a function argument or an op result, with its type and users.
class Value {
public:
  Value(TensorType type, Operation* def, unsigned index)
      : type_(std::move(type)), def_(def), index_(index) {}
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;

  const TensorType& type() const { return type_; }
  /// The defining op, or nullptr for a function argument.
  Operation* defining_op() const { return def_; }
  bool is_argument() const { return def_ == nullptr; }
  /// Result index within the defining op, or argument index.
  unsigned index() const { return index_; }
  /// Ops using this value, once per operand slot (an op using it twice appears twice).
  const std::vector<Operation*>& users() const { return users_; }
  bool has_uses() const { return !users_.empty(); }

  /// Where the value's bytes live once memory is planned (nullopt before planning).
  const std::optional<Buffer>& buffer() const { return buffer_; }
  void set_buffer(std::optional<Buffer> b) { buffer_ = std::move(b); }

private:
  friend class Operation;
  friend class Function;
  TensorType type_;
  Operation* def_;
  unsigned index_;
  std::vector<Operation*> users_;
  std::optional<Buffer> buffer_;
};

/// One operation: an op struct from ops.def, operands, results, location.
class Operation {
public:
  Operation(OpVariant op, std::vector<Value*> operands, const std::vector<TensorType>& result_types,
            Location loc);
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;
  ~Operation() { drop_operands(); }

  OpKind kind() const { return static_cast<OpKind>(op_.index()); }
  std::string_view name() const { return op_name(kind()); }
  /// The op struct if this op is a T, else nullptr.
  template <class T>
  T* as() {
    return std::get_if<T>(&op_);
  }
  template <class T>
  const T* as() const {
    return std::get_if<T>(&op_);
  }
  template <class T>
  bool is() const {
    return std::holds_alternative<T>(op_);
  }
  OpVariant& op() { return op_; }
  const OpVariant& op() const { return op_; }

  std::size_t num_operands() const { return operands_.size(); }
  Value* operand(std::size_t i) const { return operands_.at(i); }
  const std::vector<Value*>& operands() const { return operands_; }
  std::vector<TensorType> operand_types() const;
  /// Points operand i at v, keeping both use lists exact.
  void set_operand(std::size_t i, Value* v) {
    remove_use(operands_.at(i));
    operands_[i] = v;
    v->users_.push_back(this);
  }
  void drop_operands() {
    for (auto* v : operands_)
      remove_use(v);
    operands_.clear();
  }

  std::size_t num_results() const { return results_.size(); }
  Value* result(std::size_t i = 0) const { return results_.at(i).get(); }
  std::vector<TensorType> result_types() const;
  /// True when no result has a use.
  bool results_unused() const {
    return std::none_of(results_.begin(), results_.end(),
                        [](const auto& r) { return r->has_uses(); });
  }

  const Location& loc() const { return loc_; }
  void set_loc(Location l) { loc_ = std::move(l); }
  Function* parent() const { return parent_; }
  /// The op's dialect.
  Dialect dialect() const { return dialect_of(kind()); }
  /// Tiling, core split, view / in-place, positions and effects of this op (ir/op_policy.hpp).
  const OpPolicy& policy() const { return policy_of(kind()); }

  /// How the op runs (layer group, tiles, core split); nullopt before tiling (Top ops never
  /// have one).
  const std::optional<OpPlan>& plan() const { return plan_; }
  void set_plan(std::optional<OpPlan> p) { plan_ = std::move(p); }

  /// Position in program order as last numbered by Function::number_ops() (-1 before).
  std::int64_t number() const { return number_; }

private:
  friend class Function;
  void add_operand(Value* v) {
    operands_.push_back(v);
    v->users_.push_back(this);
  }
  void remove_use(Value* v);

  OpVariant op_;
  std::vector<Value*> operands_;
  std::vector<std::unique_ptr<Value>> results_;
  Location loc_;
  Function* parent_ = nullptr;
  std::list<std::unique_ptr<Operation>>::iterator self_; ///< position in the parent's list
  std::optional<OpPlan> plan_;
  std::int64_t number_ = -1;
};

} // namespace tpullm::ir
