#pragma once
/// The Rewriter: the only way passes and patterns change the IR. It creates ops before an
/// insertion point (result types inferred by the op struct, as the Builder does), replaces
/// values, erases ops and weights, and modifies ops in place, keeping use lists exact. Every
/// change is counted and reported to an optional RewriteListener (the greedy driver uses it to
/// keep its worklist current).

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpullm/ir/builder.hpp"

namespace tpullm::rewrite {

/// Receives notifications of IR changes made through a Rewriter.
class RewriteListener {
public:
  virtual ~RewriteListener() = default;
  /// `op` was just inserted.
  virtual void notify_inserted(ir::Operation* op) { (void)op; }
  /// `op` is about to be erased (its operands are still attached).
  virtual void notify_erased(ir::Operation* op) { (void)op; }
  /// `op` had its attributes or operands changed in place (results unchanged).
  virtual void notify_modified(ir::Operation* op) { (void)op; }
  /// A result of `op` lost a use; `op` may have become dead.
  virtual void notify_use_dropped(ir::Operation* op) { (void)op; }
};

/// Mutates a module while keeping use lists exact and reporting each change.
class Rewriter {
public:
  /// A rewriter over `module`; `listener` (optional, not owned) hears about every change.
  explicit Rewriter(ir::Module& module, RewriteListener* listener = nullptr)
      : module_(module), listener_(listener) {}

  ir::Module& module() { return module_; }
  void set_listener(RewriteListener* listener) { listener_ = listener; }

  // --- insertion point ------------------------------------------------------------------------

  /// New ops go right before `op` (in op's function) and take op's location.
  void set_insertion_point(ir::Operation* op) {
    function_ = op->parent();
    before_ = op;
    loc_ = op->loc();
  }
  /// New ops go at the end of `f` (after its Return: move the Return or insert before it instead).
  void set_insertion_point_to_end(ir::Function& f) {
    function_ = &f;
    before_ = nullptr;
  }
  /// Location given to subsequently created ops.
  void set_loc(Location loc) { loc_ = std::move(loc); }
  const Location& loc() const { return loc_; }

  // --- changes --------------------------------------------------------------------------------

  /// Creates an op of struct type T over `operands` at the insertion point; result types are
  /// inferred. Throws DiagnosticError (at the current location) when the op is ill-typed.
  template <class T>
  ir::Operation* create_op(T op, std::vector<ir::Value*> operands) {
    if (!function_)
      throw Error(ErrorKind::internal, "", "Rewriter::create_op without an insertion point");
    ir::Builder b(module_, *function_);
    b.set_insertion_point(before_ ? function_->find(before_) : function_->end());
    b.set_loc(loc_);
    ir::Operation* created = b.create_op(std::move(op), std::move(operands));
    record();
    if (listener_)
      listener_->notify_inserted(created);
    return created;
  }
  /// Creates a single-result op and returns its result.
  template <class T>
  ir::Value* create(T op, std::vector<ir::Value*> operands) {
    return create_op(std::move(op), std::move(operands))->result(0);
  }

  /// Points every use of `from` at `to`; both must have the same type.
  void replace_all_uses_with(ir::Value* from, ir::Value* to);

  /// Replaces each result of `op` by the matching value of `values`, then erases `op`.
  void replace_op(ir::Operation* op, const std::vector<ir::Value*>& values);
  /// Replaces the single result of `op` by `value`, then erases `op`.
  void replace_op(ir::Operation* op, ir::Value* value) { replace_op(op, std::vector{value}); }

  /// Creates a T at `op` (before it, with its location) and replaces `op` with its results.
  template <class T>
  ir::Operation* replace_op_with_new(ir::Operation* op, T new_op,
                                     std::vector<ir::Value*> operands) {
    set_insertion_point(op);
    ir::Operation* created = create_op(std::move(new_op), std::move(operands));
    std::vector<ir::Value*> results;
    for (std::size_t i = 0; i < created->num_results(); ++i)
      results.push_back(created->result(i));
    replace_op(op, results);
    return created;
  }

  /// Erases `op`, whose results must be unused (throws Error(internal) otherwise).
  void erase_op(ir::Operation* op);

  /// Runs `change()`, which may edit `op`'s attributes (through op->as<T>()) and operands
  /// (through op->set_operand), then re-infers `op`'s result types: they must not change
  /// (results are immutable; create a new op instead). Throws Error(internal) otherwise.
  template <class F>
  void modify_op_in_place(ir::Operation* op, F&& change) {
    std::vector<ir::Operation*> defs = operand_defs(op);
    change();
    std::vector<ir::TensorType> inferred;
    try {
      inferred = ir::infer_result_types(op->op(), op->operand_types(), &module_);
    } catch (const Error& e) {
      throw Error(ErrorKind::internal, "",
                  "in-place change made '" + std::string(op->name()) +
                      "' ill-typed: " + e.message());
    }
    if (!op->is<ir::builtin::ReturnOp>() && inferred != op->result_types())
      throw Error(ErrorKind::internal, "",
                  "in-place change of '" + std::string(op->name()) + "' changed its result types");
    record();
    if (listener_) {
      listener_->notify_modified(op);
      for (auto* d : defs) // a former operand's def may have lost its last use
        listener_->notify_use_dropped(d);
    }
  }
  /// Edits the attributes of `op`, a T, in place: change(T&). Result types must not change.
  template <class T, class F>
  void modify_attrs(ir::Operation* op, F&& change) {
    T* s = op->as<T>();
    if (!s)
      throw Error(ErrorKind::internal, "",
                  "modify_attrs: " + std::string(op->name()) + " is not a " +
                      std::string(ir::op_name(ir::kind_of<T>())));
    modify_op_in_place(op, [&] { change(*s); });
  }
  /// Points operand `i` of `op` at `v` (the result types of `op` must not change).
  void set_operand(ir::Operation* op, std::size_t i, ir::Value* v) {
    modify_op_in_place(op, [&] { op->set_operand(i, v); });
  }

  /// Removes weight @name from the module table; no builtin.Weight may reference it.
  void erase_weight(const std::string& name);

  // --- bookkeeping ----------------------------------------------------------------------------

  /// True when any change was made since construction or the last reset().
  bool changed() const { return changes_ > 0; }
  /// Number of elementary changes (creations, replacements, erasures, modifications).
  std::int64_t num_changes() const { return changes_; }
  void reset_changes() { changes_ = 0; }

private:
  void record() { ++changes_; }
  static ir::Operation* next_op(ir::Function& f, ir::Operation* op) {
    auto it = std::next(f.find(op));
    return it == f.end() ? nullptr : it->get();
  }
  static std::vector<ir::Operation*> operand_defs(const ir::Operation* op);

  ir::Module& module_;
  RewriteListener* listener_ = nullptr;
  ir::Function* function_ = nullptr;
  ir::Operation* before_ = nullptr;
  Location loc_;
  std::int64_t changes_ = 0;
};

} // namespace tpullm::rewrite
