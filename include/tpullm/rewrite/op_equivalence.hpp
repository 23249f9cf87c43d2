#pragma once
/// Structural equality and hashing of ops, for CSE and patterns. Attributes are compared member
/// by member through each op struct's `attrs(self, f)` visitor (never by printing); floats compare
/// by bit pattern, so `1e-6` equals itself, NaN equals the same NaN and -0 differs from +0.

#include <bit>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "tpullm/ir/operation.hpp"

namespace tpullm::rewrite {

namespace detail {

inline void hash_combine(std::size_t& seed, std::size_t v) {
  seed ^= v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

/// Equality of one attribute value (floats by bits).
template <class V>
bool attr_value_equal(const V& a, const V& b) {
  if constexpr (std::is_same_v<V, float>)
    return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
  else
    return a == b;
}

/// Hash of one attribute value of any member type the printer supports.
template <class V>
std::size_t attr_value_hash(const V& v) {
  if constexpr (std::is_same_v<V, float>) {
    return std::hash<std::uint32_t>{}(std::bit_cast<std::uint32_t>(v));
  } else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>) {
    std::size_t h = v.size();
    for (auto x : v)
      hash_combine(h, std::hash<std::int64_t>{}(x));
    return h;
  } else if constexpr (std::is_same_v<V, ir::SymbolRef>) {
    return std::hash<std::string>{}(v.name);
  } else if constexpr (std::is_enum_v<V>) {
    return std::hash<std::underlying_type_t<V>>{}(static_cast<std::underlying_type_t<V>>(v));
  } else {
    return std::hash<V>{}(v);
  }
}

} // namespace detail

/// True when two structs of op type T hold equal attributes (members in `attrs` order).
template <class T>
bool attributes_equal(const T& a, const T& b) {
  bool equal = true;
  std::size_t i = 0;
  T::attrs(a, [&](const char*, const auto& va) {
    std::size_t j = 0;
    T::attrs(b, [&](const char*, const auto& vb) {
      if constexpr (std::is_same_v<std::decay_t<decltype(va)>, std::decay_t<decltype(vb)>>)
        if (j == i && !detail::attr_value_equal(va, vb))
          equal = false;
      ++j;
    });
    ++i;
  });
  return equal;
}

/// True when `a` and `b` hold the same op kind with equal attributes.
inline bool attributes_equal(const ir::OpVariant& a, const ir::OpVariant& b) {
  if (a.index() != b.index())
    return false;
  return ir::visit_op(a, [&](const auto& sa) {
    using T = std::decay_t<decltype(sa)>;
    return attributes_equal(sa, std::get<T>(b));
  });
}

/// Hash of an op's kind and attributes (consistent with attributes_equal).
inline std::size_t attributes_hash(const ir::OpVariant& op) {
  std::size_t h = op.index();
  ir::visit_op(op, [&](const auto& s) {
    using T = std::decay_t<decltype(s)>;
    T::attrs(s, [&](const char*, const auto& v) {
      detail::hash_combine(h, detail::attr_value_hash(v));
    });
  });
  return h;
}

/// True when `a` and `b` compute the same thing: same kind, equal attributes, the very same
/// operand values in the same order, and equal result types.
inline bool ops_equivalent(const ir::Operation& a, const ir::Operation& b) {
  return a.kind() == b.kind() && a.operands() == b.operands() &&
         a.result_types() == b.result_types() && attributes_equal(a.op(), b.op());
}

/// Hash consistent with ops_equivalent (kind, attributes and operand identities).
inline std::size_t op_hash(const ir::Operation& op) {
  std::size_t h = attributes_hash(op.op());
  for (const auto* v : op.operands())
    detail::hash_combine(h, std::hash<const void*>{}(v));
  return h;
}

} // namespace tpullm::rewrite
