#pragma once
/// C++ API to build functions: each create<Op>() checks operand counts, infers result types
/// from the op struct and appends (or inserts) the op. Errors carry the builder's location.

#include <string>
#include <vector>

#include "tpullm/ir/module.hpp"

namespace tpullm::ir {

/// Checks the operand count of `op` and returns its inferred result types, each within the
/// TensorType limits (kMaxDim, kMaxElements). Throws Error(invalid_input) with the reason
/// (builtin::WeightOp needs `module` to look up its type).
std::vector<TensorType> infer_result_types(const OpVariant& op,
                                           const std::vector<TensorType>& operands,
                                           const Module* module = nullptr);

/// Appends ops to a function of a module.
class Builder {
public:
  Builder(Module& module, Function& function)
      : module_(module), function_(function), pos_(function.end()) {}

  Module& module() { return module_; }
  Function& function() { return function_; }
  /// Subsequent ops are inserted before `pos`.
  void set_insertion_point(Function::iterator pos) { pos_ = pos; }
  /// Provenance name given to subsequent ops (e.g. "layer3.attn").
  void set_loc(Location loc) { loc_ = std::move(loc); }
  const Location& loc() const { return loc_; }

  /// Creates an op of struct type T over `operands`; returns the op.
  template <class T>
  Operation* create_op(T op, std::vector<Value*> operands) {
    std::vector<TensorType> types;
    for (auto* v : operands)
      types.push_back(v->type());
    std::vector<TensorType> results;
    try {
      results = infer_result_types(OpVariant(op), types, &module_);
    } catch (const Error& e) {
      throw DiagnosticError(loc_, "'" + std::string(op_name(kind_of<T>())) + "' " + e.message());
    }
    return function_.insert(pos_, std::make_unique<Operation>(OpVariant(std::move(op)),
                                                              std::move(operands), results, loc_));
  }
  /// Creates a single-result op and returns its result.
  template <class T>
  Value* create(T op, std::vector<Value*> operands) {
    return create_op(std::move(op), std::move(operands))->result(0);
  }
  /// A builtin.Weight reading module weight @name.
  Value* weight(const std::string& name) { return create(builtin::WeightOp{SymbolRef{name}}, {}); }
  /// Adds a weight to the module (if new) and returns a builtin.Weight reading it.
  Value* weight(Weight w) {
    const std::string name = w.name;
    module_.add_weight(std::move(w));
    return weight(name);
  }
  /// Terminates the function with builtin.Return(values) and records its result types.
  Operation* ret(std::vector<Value*> values);

private:
  Module& module_;
  Function& function_;
  Function::iterator pos_;
  Location loc_;
};

} // namespace tpullm::ir
