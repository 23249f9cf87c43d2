// Out-of-line definitions of tpullm/ir/text/printer.hpp (compiled once into tpullm_core).
#include "tpullm/ir/text/printer.hpp"

namespace tpullm::ir::text::detail {

std::string quote(const std::string& s) {
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

} // namespace tpullm::ir::text::detail

namespace tpullm::ir::text {

std::string print_function(const Function& f) {
  std::map<const Value*, std::string> names;
  std::string out = "  func @" + f.name() + "(";
  for (std::size_t i = 0; i < f.num_arguments(); ++i) {
    const std::string n = "%" + f.argument_name(i);
    names[f.argument(i)] = n;
    out += (i ? ", " : "") + n + ": " + f.argument(i)->type().str();
    if (const auto& b = f.argument(i)->buffer())
      out += " buffer " + detail::attr_struct_str(*b);
  }
  out += ") -> (";
  for (std::size_t i = 0; i < f.result_types().size(); ++i)
    out += (i ? ", " : "") + f.result_types()[i].str();
  out += ")";
  if (!(f.info() == FunctionInfo{}))
    out += " attributes " + detail::attr_struct_str(f.info());
  out += " {\n";
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
    if (const auto& p = op->plan())
      out += " plan " + detail::attr_struct_str(*p);
    bool any_buffer = false;
    for (std::size_t r = 0; r < op->num_results(); ++r)
      any_buffer = any_buffer || op->result(r)->buffer().has_value();
    if (any_buffer) {
      out += " buffers [";
      for (std::size_t r = 0; r < op->num_results(); ++r) {
        const auto& b = op->result(r)->buffer();
        out += (r ? ", " : "") + (b ? detail::attr_struct_str(*b) : std::string("none"));
      }
      out += "]";
    }
    out += "\n";
  }
  return out + "  }\n";
}

std::string print_module(const Module& m) {
  std::string out = "module @" + m.name() + " {\n";
  for (const auto& [name, w] : m.weights())
    out += "  weight @" + name + " : " + w.type.str() + "\n";
  for (const auto& f : m.functions())
    out += print_function(*f);
  return out + "}\n";
}

} // namespace tpullm::ir::text
