// Out-of-line definitions of tpullm/ir/verifier.hpp (compiled once into tpullm_core).
#include "tpullm/ir/verifier.hpp"

namespace tpullm::ir {

std::vector<DiagnosticError> verify_function(const Module& m, const Function& f) {
  std::vector<DiagnosticError> errs;
  std::set<const Value*> defined;
  const Location floc = f.loc().known() ? f.loc() : Location{"@" + f.name()};
  for (std::size_t i = 0; i < f.num_arguments(); ++i) {
    defined.insert(f.argument(i));
    if (auto why = f.argument(i)->type().limit_violation())
      errs.emplace_back(floc, "argument #" + std::to_string(i) + " of @" + f.name() + ": " + *why);
  }
  for (std::size_t i = 0; i < f.result_types().size(); ++i)
    if (auto why = f.result_types()[i].limit_violation())
      errs.emplace_back(floc, "result #" + std::to_string(i) + " of @" + f.name() + ": " + *why);
  bool seen_return = false;
  for (const auto& op : f.ops()) {
    const Location loc = op->loc().known() ? op->loc() : floc;
    const std::string who = "'" + std::string(op->name()) + "' ";
    if (seen_return)
      errs.emplace_back(loc, who + "follows builtin.Return; Return must be the last op");
    for (std::size_t i = 0; i < op->num_operands(); ++i) {
      const Value* v = op->operand(i);
      if (!defined.count(v))
        errs.emplace_back(loc, who + "operand #" + std::to_string(i) +
                                   " is not defined before its use in @" + f.name());
    }
    try {
      auto expected = infer_result_types(op->op(), op->operand_types(), &m);
      const bool check_types = !op->is<builtin::ReturnOp>();
      if (check_types && expected.size() != op->num_results()) {
        errs.emplace_back(loc, who + "has " + std::to_string(op->num_results()) +
                                   " results, expected " + std::to_string(expected.size()));
      } else if (check_types) {
        for (std::size_t r = 0; r < expected.size(); ++r)
          if (auto why = op->result(r)->type().limit_violation())
            errs.emplace_back(loc, who + "result #" + std::to_string(r) + ": " + *why);
          else if (!(expected[r] == op->result(r)->type()))
            errs.emplace_back(loc, who + "result #" + std::to_string(r) + " is declared " +
                                       op->result(r)->type().str() + " but the op produces " +
                                       expected[r].str());
      }
    } catch (const Error& e) {
      errs.emplace_back(loc, who + e.message());
    }
    if (op->is<builtin::ReturnOp>()) {
      seen_return = true;
      if (op->num_results() != 0)
        errs.emplace_back(loc, who + "has results");
      const auto& want = f.result_types();
      if (want.size() != op->num_operands()) {
        errs.emplace_back(loc, who + "returns " + std::to_string(op->num_operands()) +
                                   " values but @" + f.name() + " declares " +
                                   std::to_string(want.size()) + " results");
      } else {
        for (std::size_t i = 0; i < want.size(); ++i)
          if (!(want[i] == op->operand(i)->type()))
            errs.emplace_back(loc, who + "value #" + std::to_string(i) + " has type " +
                                       op->operand(i)->type().str() + " but @" + f.name() +
                                       " declares " + want[i].str());
      }
    }
    for (std::size_t r = 0; r < op->num_results(); ++r)
      defined.insert(op->result(r));
  }
  if (!seen_return)
    errs.emplace_back(floc, "function @" + f.name() + " does not end with builtin.Return");
  return errs;
}

std::vector<DiagnosticError> verify_module(const Module& m) {
  std::vector<DiagnosticError> errs;
  for (const auto& f : m.functions()) {
    auto e = verify_function(m, *f);
    errs.insert(errs.end(), e.begin(), e.end());
  }
  for (const auto& [name, w] : m.weights()) {
    if (auto why = w.type.limit_violation())
      errs.emplace_back(Location{"@" + name}, "weight @" + name + ": " + *why);
    if (w.type.quant && !is_integer(w.type.dtype))
      errs.emplace_back(Location{"@" + name}, "weight @" + name + " is quantized but not integer");
    if (w.type.quant && w.type.quant->format == QuantFormat::kv_rows)
      errs.emplace_back(Location{"@" + name},
                        "weight @" + name + " has the KV cache layout quant<kv_rows>");
  }
  return errs;
}

void verify_or_throw(const Module& m) {
  auto errs = verify_module(m);
  if (errs.empty())
    return;
  std::string all;
  for (const auto& e : errs)
    all += std::string(all.empty() ? "" : "\n") + e.what();
  throw DiagnosticError(errs.front().location(), errs.size() == 1
                                                     ? errs.front().message()
                                                     : errs.front().message() + " (and " +
                                                           std::to_string(errs.size() - 1) +
                                                           " more:\n" + all + ")");
}

} // namespace tpullm::ir
