// Planned Tpu functions -> Programs (codegen/program.hpp).
#include "tpullm/codegen/program.hpp"

namespace tpullm::codegen {

namespace {

TensorRef ref_of(const ir::Function& f, const ir::Value* v) {
  check(v->buffer().has_value(), ErrorKind::invalid_input, "@" + f.name(), "a value of type ",
        v->type().str(), " has no buffer; run plan-memory first");
  TensorRef r{v->type(), *v->buffer(), {}};
  if (r.buffer.region == ir::Region::weight) {
    const ir::Operation* d = v->defining_op();
    check(d && d->is<ir::builtin::WeightOp>(), ErrorKind::internal, "@" + f.name(),
          "a weight buffer on a value that is not a builtin.Weight");
    r.weight = d->as<ir::builtin::WeightOp>()->name.name;
  }
  return r;
}

/// The argument index `v` is, when it is an argument of f.
std::int64_t arg_index(const ir::Function& f, const ir::Value* v) {
  for (std::size_t i = 0; i < f.num_arguments(); ++i)
    if (f.argument(i) == v)
      return static_cast<std::int64_t>(i);
  return -1;
}

} // namespace

Program make_program(const ir::Function& f) {
  Program p;
  p.name = f.name();
  p.info = f.info();
  check(p.info.memory.has_value(), ErrorKind::invalid_input, "@" + f.name(),
        "has no memory plan; run plan-memory first");
  for (std::size_t i = 0; i < f.num_arguments(); ++i)
    p.args.push_back(ref_of(f, f.argument(i)));
  for (const auto& op : f.ops()) {
    if (op->is<ir::builtin::WeightOp>())
      continue;
    if (op->is<ir::builtin::ReturnOp>()) {
      for (const ir::Value* v : op->operands())
        p.results.push_back(ref_of(f, v));
      continue;
    }
    check(op->dialect() == ir::Dialect::tpu, ErrorKind::invalid_input, "@" + f.name(), "'",
          op->name(), "' is not a Tpu op; lower the function first");
    Instr in;
    in.op = op->op();
    in.plan = op->plan().value_or(ir::OpPlan{});
    in.planned = op->plan().has_value();
    in.where = "@" + f.name() + ": " + std::string(op->name()) +
               (op->loc().known() ? " at " + op->loc().str() : std::string());
    for (const ir::Value* v : op->operands())
      in.operands.push_back(ref_of(f, v));
    for (std::size_t r = 0; r < op->num_results(); ++r)
      in.results.push_back(ref_of(f, op->result(r)));
    // Ops that address the cache by position name their positions operand.
    const std::int64_t pos_operand = op->policy().positions;
    if (pos_operand >= 0) {
      const std::int64_t a = arg_index(f, op->operand(static_cast<std::size_t>(pos_operand)));
      check(a >= 0, ErrorKind::unsupported, in.where,
            "position_ids must be a function argument (the executor reads position 0 from it)");
      check(p.positions_arg < 0 || p.positions_arg == a, ErrorKind::unsupported, in.where,
            "all position operands must be the same argument");
      p.positions_arg = a;
    }
    p.instrs.push_back(std::move(in));
  }
  check(p.results.size() == f.result_types().size(), ErrorKind::invalid_input, "@" + f.name(),
        "has no builtin.Return");
  return p;
}

} // namespace tpullm::codegen
