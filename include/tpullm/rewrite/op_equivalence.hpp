#pragma once
/// Structural equality and hashing of ops, for CSE and patterns. Attributes are compared member
/// by member through each op struct's `attrs(self, f)` visitor with ir/attr_compare.hpp (never by
/// printing); floats compare by bit pattern.

#include <bit>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "tpullm/ir/attr_compare.hpp"
#include "tpullm/ir/operation.hpp"

namespace tpullm::rewrite {

/// True when two structs of op type T hold equal attributes (members in `attrs` order).
template <class T>
bool attributes_equal(const T& a, const T& b) {
  bool equal = true;
  std::size_t i = 0;
  T::attrs(a, [&](const char*, const auto& va) {
    std::size_t j = 0;
    T::attrs(b, [&](const char*, const auto& vb) {
      if constexpr (std::is_same_v<std::decay_t<decltype(va)>, std::decay_t<decltype(vb)>>)
        if (j == i && !ir::attr_equal(va, vb))
          equal = false;
      ++j;
    });
    ++i;
  });
  return equal;
}

/// True when `a` and `b` hold the same op kind with equal attributes.
bool attributes_equal(const ir::OpVariant& a, const ir::OpVariant& b);

/// Hash of an op's kind and attributes (consistent with attributes_equal).
std::size_t attributes_hash(const ir::OpVariant& op);

/// True when `a` and `b` compute the same thing: same kind, equal attributes, the very same
/// operand values in the same order, and equal result types.
inline bool ops_equivalent(const ir::Operation& a, const ir::Operation& b) {
  return a.kind() == b.kind() && a.operands() == b.operands() &&
         a.result_types() == b.result_types() && attributes_equal(a.op(), b.op());
}

/// Hash consistent with ops_equivalent (kind, attributes and operand identities).
std::size_t op_hash(const ir::Operation& op);

} // namespace tpullm::rewrite
