#pragma once
/// Prints modules in the `.tir` text format (grammar in docs/ir.md). Values are renamed on
/// output: arguments keep their names, op results are numbered %0, %1, ... per function,
/// multi-result ops print `%3:2` and their uses `%3#1`. Output is deterministic, so
/// print(parse(print(m))) == print(m).

#include <charconv>
#include <map>
#include <ostream>
#include <sstream>
#include <string>

#include "tpullm/ir/attr_compare.hpp"
#include "tpullm/ir/module.hpp"

namespace tpullm::ir::text {

namespace detail {

inline std::string print_float(float v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  return std::string(buf, r.ptr);
}

std::string quote(const std::string& s);

template <class V>
void print_attr_value(std::string& out, const V& v, bool in_struct);

/// Prints `{key = value, ...}` for a structured attribute; members equal to their default
/// (and absent optionals) are left out, so `{}` is the default value.
template <AttrStruct V>
void print_attr_struct(std::string& out, const V& v) {
  out += "{";
  bool first = true;
  const V defaults{};
  std::vector<bool> is_default;
  V::fields(defaults, [&](const char*, const auto& d) {
    std::size_t i = 0;
    const std::size_t want = is_default.size();
    V::fields(v, [&](const char*, const auto& m) {
      if constexpr (std::is_same_v<std::decay_t<decltype(m)>, std::decay_t<decltype(d)>>)
        if (i == want)
          is_default.push_back(attr_equal(m, d));
      ++i;
    });
  });
  std::size_t index = 0;
  V::fields(v, [&](const char* name, const auto& m) {
    if (is_default[index++])
      return;
    out += first ? "" : ", ";
    first = false;
    out += name;
    out += " = ";
    print_attr_value(out, m, true);
  });
  out += "}";
}

/// Prints one attribute value of any supported member type (attributes.hpp); inside a struct,
/// integers and floats go without their type suffix.
template <class V>
void print_attr_value(std::string& out, const V& v, bool in_struct) {
  if constexpr (std::is_same_v<V, bool>) {
    out += v ? "true" : "false";
  } else if constexpr (std::is_same_v<V, std::int64_t>) {
    out += std::to_string(v) + (in_struct ? "" : " : i64");
  } else if constexpr (std::is_same_v<V, float>) {
    out += print_float(v) + (in_struct ? "" : " : f32");
  } else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>) {
    out += "[";
    for (std::size_t i = 0; i < v.size(); ++i)
      out += (i ? ", " : "") + std::to_string(v[i]);
    out += "]";
  } else if constexpr (std::is_same_v<V, std::string>) {
    out += quote(v);
  } else if constexpr (std::is_same_v<V, SymbolRef>) {
    out += "@" + v.name;
  } else if constexpr (std::is_same_v<V, DType>) {
    out += std::string(ir::name(v));
  } else if constexpr (AttrStruct<V>) {
    print_attr_struct(out, v);
  } else if constexpr (is_optional_v<V>) {
    if (v)
      print_attr_value(out, *v, in_struct);
  } else if constexpr (is_vector_v<V>) {
    out += "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      out += i ? ", " : "";
      print_attr_value(out, v[i], true);
    }
    out += "]";
  } else {
    static_assert(NamedEnum<V>, "attribute member type has no printer");
    out += std::string(enum_name(v));
  }
}

/// Prints one `name = value` of an op's attribute dictionary (absent optionals left out).
struct AttrPrinter {
  std::string& out;
  bool first = true;
  template <class V>
  void operator()(const char* name, const V& v) {
    if constexpr (is_optional_v<V>)
      if (!v)
        return;
    out += first ? "" : ", ";
    first = false;
    out += name;
    out += " = ";
    print_attr_value(out, v, false);
  }
};

/// Prints a structured attribute as text ("{group = 0, ...}").
template <AttrStruct V>
std::string attr_struct_str(const V& v) {
  std::string out;
  print_attr_struct(out, v);
  return out;
}

} // namespace detail

/// Prints `t` as `tensor<...>`.
inline std::string print_type(const TensorType& t) {
  return t.str();
}

/// Prints one function (as inside a module, indented by two spaces).
std::string print_function(const Function& f);

/// Prints a whole module: weight declarations (by name) then functions (in order).
std::string print_module(const Module& m);

} // namespace tpullm::ir::text
