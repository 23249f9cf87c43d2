#pragma once
// Helpers the IR unit tests share: weight declarations without data and op-name listings.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tpullm/ir/ir.hpp"

namespace tpullm_test {

/// A weight @name of `shape` and dtype `dt` with no data (types only).
inline tpullm::ir::Weight decl(const std::string& name, std::vector<std::int64_t> shape,
                               tpullm::ir::DType dt = tpullm::ir::DType::f32) {
  return tpullm::ir::Weight{name, tpullm::ir::TensorType(std::move(shape), dt), {}};
}

/// The names of `f`'s ops in order ("top.MatMul", "builtin.Return", ...).
inline std::vector<std::string> op_names(const tpullm::ir::Function& f) {
  std::vector<std::string> names;
  for (const auto& op : f.ops())
    names.emplace_back(op->name());
  return names;
}

} // namespace tpullm_test
