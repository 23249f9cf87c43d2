#pragma once
/// A module: functions plus a weight table that several functions may reference by symbol.
/// Weight data is never copied into the IR: each weight holds zero-copy views (e.g. into an
/// mmap'ed safetensors file) kept alive by a shared owner; text-parsed weights have no data.

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpullm/ir/function.hpp"

namespace tpullm::ir {

/// One stored tensor of a weight: a plain weight has one part "data"; a quantized weight has
/// the parts of its format (gptq/awq: "qweight", "scales", "qzeros", optional "g_idx").
struct WeightPart {
  std::string role;                  ///< "data", "qweight", "scales", "qzeros", "g_idx", ...
  DType dtype = DType::f32;          ///< element type as stored
  std::vector<std::int64_t> shape;   ///< shape as stored
  std::span<const std::byte> bytes;  ///< row-major little-endian data
  std::shared_ptr<const void> owner; ///< keeps `bytes` alive
};

/// A module-level weight `@name : type`.
struct Weight {
  std::string name;
  TensorType type;               ///< logical type seen by builtin.Weight
  std::vector<WeightPart> parts; ///< stored data; empty when the module came from text

  bool has_data() const { return !parts.empty(); }
  /// The part with `role`; throws Error(invalid_input) naming the weight when absent.
  const WeightPart& part(const std::string& role) const;
  const WeightPart* find_part(const std::string& role) const;
};

/// A compilation unit: weights (ordered by name) and functions (in insertion order).
class Module {
public:
  explicit Module(std::string name = "module") : name_(std::move(name)) {}
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  /// Adds a weight; a second weight with the same name must be identical in type.
  const Weight& add_weight(Weight w);
  const Weight* find_weight(const std::string& name) const {
    auto it = weights_.find(name);
    return it == weights_.end() ? nullptr : &it->second;
  }
  const Weight& weight(const std::string& name) const {
    if (auto* w = find_weight(name))
      return *w;
    throw Error(ErrorKind::invalid_input, "module @" + name_, "has no weight @" + name);
  }
  const std::map<std::string, Weight>& weights() const { return weights_; }
  /// Removes weight @name from the table (callers make sure no builtin.Weight still reads it).
  void erase_weight(const std::string& name) { weights_.erase(name); }

  /// Adds a function and returns it; names must be unique.
  Function& add_function(std::string name);
  Function* find_function(const std::string& name) const;
  const std::vector<std::unique_ptr<Function>>& functions() const { return functions_; }
  /// Puts `f` in the place of function @name (same position; `f` keeps its own name) and
  /// returns the old one. Throws Error(internal) when there is no @name.
  std::unique_ptr<Function> replace_function(const std::string& name, std::unique_ptr<Function> f);

private:
  std::string name_;
  std::map<std::string, Weight> weights_;
  std::vector<std::unique_ptr<Function>> functions_;
};

} // namespace tpullm::ir
