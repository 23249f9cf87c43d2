// Out-of-line definitions of tpullm/ir/builder.hpp (compiled once into tpullm_core).
#include "tpullm/ir/builder.hpp"

namespace tpullm::ir {

std::vector<TensorType> infer_result_types(const OpVariant& op,
                                           const std::vector<TensorType>& operands,
                                           const Module* module) {
  return visit_op(op, [&](const auto& o) -> std::vector<TensorType> {
    using T = std::decay_t<decltype(o)>;
    const int n = static_cast<int>(operands.size());
    if (n < T::operands.min || (T::operands.max >= 0 && n > T::operands.max)) {
      const std::string want =
          T::operands.max < 0 ? "at least " + std::to_string(T::operands.min)
          : T::operands.min == T::operands.max
              ? std::to_string(T::operands.min)
              : std::to_string(T::operands.min) + " to " + std::to_string(T::operands.max);
      throw Error(ErrorKind::invalid_input, "",
                  "expects " + want + " operands, got " + std::to_string(n));
    }
    if constexpr (std::is_same_v<T, builtin::WeightOp>) {
      if (!module)
        throw Error(ErrorKind::invalid_input, "",
                    "weight @" + o.name.name + " needs a module to resolve");
      const Weight* w = module->find_weight(o.name.name);
      if (!w)
        throw Error(ErrorKind::invalid_input, "", "unknown weight @" + o.name.name);
      return {w->type};
    } else {
      auto results = o.infer(operands);
      for (std::size_t r = 0; r < results.size(); ++r)
        if (auto why = results[r].limit_violation())
          throw Error(ErrorKind::invalid_input, "", "result #" + std::to_string(r) + ": " + *why);
      return results;
    }
  });
}

auto Builder::ret(std::vector<Value*> values) -> Operation* {
  std::vector<TensorType> types;
  for (auto* v : values)
    types.push_back(v->type());
  function_.set_result_types(types);
  return create_op(builtin::ReturnOp{}, std::move(values));
}

} // namespace tpullm::ir
