#pragma once
/// Equality and hashing of attribute values, in one place for every member type the printer
/// supports (attributes.hpp): scalars, enums, strings, symbols, structured attributes (member
/// by member through `fields()`), optionals and vectors. Floats compare by bit pattern, so
/// `1e-6` equals itself, NaN equals the same NaN and -0 differs from +0.

#include <bit>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "tpullm/ir/attributes.hpp"

namespace tpullm::ir {

/// Mixes `v` into `seed` (boost::hash_combine's recipe, 64-bit constant).
inline void hash_combine(std::size_t& seed, std::size_t v) {
  seed ^= v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

template <class V>
bool attr_equal(const V& a, const V& b);

/// Equality of two structured attributes, member by member.
template <AttrStruct T>
bool attr_struct_equal(const T& a, const T& b) {
  bool equal = true;
  std::size_t i = 0;
  T::fields(a, [&](const char*, const auto& va) {
    std::size_t j = 0;
    T::fields(b, [&](const char*, const auto& vb) {
      if constexpr (std::is_same_v<std::decay_t<decltype(va)>, std::decay_t<decltype(vb)>>)
        if (j == i && !attr_equal(va, vb))
          equal = false;
      ++j;
    });
    ++i;
  });
  return equal;
}

/// Equality of one attribute value of any supported member type (floats by bits).
template <class V>
bool attr_equal(const V& a, const V& b) {
  if constexpr (std::is_same_v<V, float>) {
    return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
  } else if constexpr (std::is_same_v<V, double>) {
    return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
  } else if constexpr (AttrStruct<V>) {
    return attr_struct_equal(a, b);
  } else if constexpr (is_optional_v<V>) {
    return a.has_value() == b.has_value() && (!a || attr_equal(*a, *b));
  } else if constexpr (is_vector_v<V>) {
    if (a.size() != b.size())
      return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!attr_equal(a[i], b[i]))
        return false;
    return true;
  } else {
    return a == b;
  }
}

/// Hash of one attribute value, consistent with attr_equal.
template <class V>
std::size_t attr_hash(const V& v) {
  if constexpr (std::is_same_v<V, float>) {
    return std::hash<std::uint32_t>{}(std::bit_cast<std::uint32_t>(v));
  } else if constexpr (std::is_same_v<V, double>) {
    return std::hash<std::uint64_t>{}(std::bit_cast<std::uint64_t>(v));
  } else if constexpr (AttrStruct<V>) {
    std::size_t h = 0x51ed27;
    V::fields(v, [&](const char*, const auto& m) { hash_combine(h, attr_hash(m)); });
    return h;
  } else if constexpr (is_optional_v<V>) {
    return v ? attr_hash(*v) ^ 0x6f : 0x3d;
  } else if constexpr (is_vector_v<V>) {
    std::size_t h = v.size();
    for (const auto& x : v)
      hash_combine(h, attr_hash(x));
    return h;
  } else if constexpr (std::is_same_v<V, SymbolRef>) {
    return std::hash<std::string>{}(v.name);
  } else if constexpr (std::is_enum_v<V>) {
    return std::hash<std::underlying_type_t<V>>{}(static_cast<std::underlying_type_t<V>>(v));
  } else {
    return std::hash<V>{}(v);
  }
}

} // namespace tpullm::ir
