#pragma once
/// A function: named arguments, an ordered list of ops ending in builtin.Return, declared
/// result types, and what stage of the model it is. Ops live in a std::list so pointers stay
/// valid while passes insert and erase; each op remembers its list position, so finding and
/// erasing an op is O(1).

#include <array>
#include <list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tpullm/ir/operation.hpp"

namespace tpullm::ir {

/// What a function computes in the model's generation loop (paper section 4).
enum class StageKind : std::uint8_t { none, embedding, prefill, prefill_kv, decode, lm_head };
template <>
struct EnumNames<StageKind> {
  static constexpr std::array<std::pair<StageKind, std::string_view>, 6> items = {
      {{StageKind::none, "none"},
       {StageKind::embedding, "embedding"},
       {StageKind::prefill, "prefill"},
       {StageKind::prefill_kv, "prefill_kv"},
       {StageKind::decode, "decode"},
       {StageKind::lm_head, "lm_head"}}};
};

/// What the memory planner decided for a function (ir/buffer.hpp regions), in bytes.
struct MemoryInfo {
  std::int64_t arena = 0;       ///< activation arena the function needs (peak of its placement)
  std::int64_t lower_bound = 0; ///< max over time of the bytes live in the arena
  std::int64_t local = 0;       ///< per-core local memory of its largest layer group
  std::int64_t kv_capacity = 0; ///< slots per layer cache its kv buffers were placed for
  std::int64_t kv_row = 0;      ///< bytes of one cache slot (kv_heads * head_dim * 4); 0 = none
  std::string strategy;         ///< the placement strategy that won
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("arena", s.arena);
    f("lower_bound", s.lower_bound);
    f("local", s.local);
    f("kv_capacity", s.kv_capacity);
    f("kv_row", s.kv_row);
    f("strategy", s.strategy);
  }
  friend bool operator==(const MemoryInfo&, const MemoryInfo&) = default;
};

/// Function-level facts, spelled `attributes {stage = decode, layer = 3}` after the signature.
struct FunctionInfo {
  StageKind stage = StageKind::none; ///< role in the generation loop
  std::int64_t layer = -1;           ///< decoder layer of a block function, else -1
  std::optional<MemoryInfo> memory;  ///< set by plan-memory
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("stage", s.stage);
    f("layer", s.layer);
    f("memory", s.memory);
  }
  friend bool operator==(const FunctionInfo&, const FunctionInfo&) = default;
};

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
  /// Stage kind and layer (default: none / -1).
  const FunctionInfo& info() const { return info_; }
  void set_info(FunctionInfo i) { info_ = i; }

  /// Appends an argument `%name: type` and returns it.
  Value* add_argument(const std::string& name, TensorType type);
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
  Operation* insert(iterator pos, std::unique_ptr<Operation> op);
  /// Appends `op`.
  Operation* append(std::unique_ptr<Operation> op) { return insert(ops_.end(), std::move(op)); }
  /// Position of `op` in this function, O(1). Throws Error(internal) if `op` is not ours.
  iterator find(const Operation* op) {
    check(op->parent_ == this, ErrorKind::internal, "@" + name_, "op ", op->name(),
          " is not in this function");
    return op->self_;
  }
  /// Erases `op`, which must have no used results. O(1) plus its operands' use lists.
  void erase(Operation* op);
  /// Numbers the ops 0, 1, ... in program order (Operation::number()) and returns the count.
  std::int64_t number_ops();
  /// Replaces every use of `from` with `to`.
  static void replace_all_uses(Value* from, Value* to);
  /// The terminating builtin.Return, or nullptr when missing.
  Operation* return_op() const {
    return !ops_.empty() && ops_.back()->is<builtin::ReturnOp>() ? ops_.back().get() : nullptr;
  }

private:
  std::string name_;
  Location loc_;
  FunctionInfo info_;
  std::vector<std::unique_ptr<Value>> args_;
  std::vector<std::string> arg_names_;
  std::vector<TensorType> result_types_;
  OpList ops_;
};

/// Maps values of one function to values of another (clone, lowering).
using ValueMap = std::unordered_map<const Value*, Value*>;

/// Copies `src` into the empty function `dst` (arguments, ops with their plans, buffers and
/// locations, result types, info), recording src value -> dst value in `map`.
void clone_function(const Function& src, Function& dst, ValueMap& map);

} // namespace tpullm::ir
