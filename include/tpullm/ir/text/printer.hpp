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

#include "tpullm/ir/module.hpp"

namespace tpullm::ir::text {

namespace detail {

inline std::string print_float(float v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  return std::string(buf, r.ptr);
}

inline std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

/// Prints one attribute value of any supported member type.
struct AttrPrinter {
  std::string& out;
  bool first = true;
  template <class V>
  void operator()(const char* name, const V& v) {
    out += first ? "" : ", ";
    first = false;
    out += name;
    out += " = ";
    if constexpr (std::is_same_v<V, bool>) {
      out += v ? "true" : "false";
    } else if constexpr (std::is_same_v<V, std::int64_t>) {
      out += std::to_string(v) + " : i64";
    } else if constexpr (std::is_same_v<V, float>) {
      out += print_float(v) + " : f32";
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
    } else {
      static_assert(NamedEnum<V>, "attribute member type has no printer");
      out += std::string(enum_name(v));
    }
  }
};

} // namespace detail

/// Prints `t` as `tensor<...>`.
inline std::string print_type(const TensorType& t) {
  return t.str();
}

/// Prints one function (as inside a module, indented by two spaces).
inline std::string print_function(const Function& f) {
  std::map<const Value*, std::string> names;
  std::string out = "  func @" + f.name() + "(";
  for (std::size_t i = 0; i < f.num_arguments(); ++i) {
    const std::string n = "%" + f.argument_name(i);
    names[f.argument(i)] = n;
    out += (i ? ", " : "") + n + ": " + f.argument(i)->type().str();
  }
  out += ") -> (";
  for (std::size_t i = 0; i < f.result_types().size(); ++i)
    out += (i ? ", " : "") + f.result_types()[i].str();
  out += ") {\n";
  int counter = 0;
  for (const auto& op : f.ops()) {
    out += "    ";
    if (op->num_results() > 0) {
      const std::string base = "%" + std::to_string(counter++);
      if (op->num_results() == 1) {
        names[op->result(0)] = base;
      } else {
        for (std::size_t r = 0; r < op->num_results(); ++r)
          names[op->result(r)] = base + "#" + std::to_string(r);
      }
      out += base + (op->num_results() > 1 ? ":" + std::to_string(op->num_results()) : "") + " = ";
    }
    out += "\"" + std::string(op->name()) + "\"(";
    for (std::size_t i = 0; i < op->num_operands(); ++i) {
      auto it = names.find(op->operand(i));
      out += (i ? ", " : "") + (it == names.end() ? std::string("%<undefined>") : it->second);
    }
    out += ")";
    std::string attrs;
    visit_op(op->op(), [&](const auto& o) {
      using T = std::decay_t<decltype(o)>;
      detail::AttrPrinter p{attrs};
      T::attrs(o, p);
    });
    if (!attrs.empty())
      out += " {" + attrs + "}";
    out += " : (";
    for (std::size_t i = 0; i < op->num_operands(); ++i)
      out += (i ? ", " : "") + op->operand(i)->type().str();
    out += ") -> ";
    if (op->num_results() == 1) {
      out += op->result(0)->type().str();
    } else {
      out += "(";
      for (std::size_t r = 0; r < op->num_results(); ++r)
        out += (r ? ", " : "") + op->result(r)->type().str();
      out += ")";
    }
    out += "\n";
  }
  return out + "  }\n";
}

/// Prints a whole module: weight declarations (by name) then functions (in order).
inline std::string print_module(const Module& m) {
  std::string out = "module @" + m.name() + " {\n";
  for (const auto& [name, w] : m.weights())
    out += "  weight @" + name + " : " + w.type.str() + "\n";
  for (const auto& f : m.functions())
    out += print_function(*f);
  return out + "}\n";
}

} // namespace tpullm::ir::text
