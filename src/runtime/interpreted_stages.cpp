// Out-of-line definitions of tpullm/runtime/interpreted_stages.hpp (compiled once into
// tpullm_core).
#include "tpullm/runtime/interpreted_stages.hpp"

namespace tpullm::runtime {

InterpretedStages::InterpretedStages(std::vector<ir::Module> modules,
                                     std::shared_ptr<interp::WeightStore> weights)
    : modules_(std::move(modules)), weights_(std::move(weights)) {
  for (auto& m : modules_) {
    auto interp = std::make_shared<interp::TopInterpreter>(m, weights_);
    for (const auto& f : m.functions()) {
      check(!by_function_.count(f->name()), ErrorKind::invalid_input, "@" + f->name(),
            "function defined by two modules");
      by_function_[f->name()] = {interp, f.get()};
    }
  }
}

auto InterpretedStages::run(const std::string& name, std::span<const ConstBytes> inputs,
                            std::span<const MutBytes> outputs) -> void {
  auto it = by_function_.find(name);
  check(it != by_function_.end(), ErrorKind::invalid_input, "@" + name,
        "no stage module defines this function");
  const ir::Function& f = *it->second.function;
  check(inputs.size() == f.num_arguments(), ErrorKind::invalid_input, "@" + name, "expects ",
        f.num_arguments(), " inputs, got ", inputs.size());
  std::vector<interp::Tensor> in;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ir::TensorType& t = f.argument(i)->type();
    const std::int64_t n = t.num_elements();
    check(static_cast<std::int64_t>(inputs[i].size()) == n * 4 &&
              (t.dtype == ir::DType::f32 || t.dtype == ir::DType::i32),
          ErrorKind::invalid_input, "@" + name, "argument #", i, " ", t.str(), " needs ", n * 4,
          " bytes of f32 / i32, got ", inputs[i].size());
    if (t.dtype == ir::DType::i32) {
      std::vector<std::int32_t> v(static_cast<std::size_t>(n));
      std::memcpy(v.data(), inputs[i].data(), inputs[i].size());
      in.push_back(interp::Tensor::from_i32(t.shape, v, ir::DType::i32));
    } else {
      std::vector<float> v(static_cast<std::size_t>(n));
      std::memcpy(v.data(), inputs[i].data(), inputs[i].size());
      in.push_back(interp::Tensor::from_f32(t.shape, v, ir::DType::f32));
    }
  }
  const auto results = it->second.interp->run(name, in);
  for (std::size_t j = 0; j < outputs.size() && j < results.size(); ++j) {
    if (outputs[j].empty())
      continue;
    const interp::Tensor& r = results[j];
    const std::int64_t n = r.numel();
    check(static_cast<std::int64_t>(outputs[j].size()) == n * 4, ErrorKind::invalid_input,
          "@" + name, "output #", j, " needs ", n * 4, " bytes, got ", outputs[j].size());
    if (r.is_float()) {
      const std::vector<float> v = r.to_f32();
      std::memcpy(outputs[j].data(), v.data(), outputs[j].size());
    } else {
      std::vector<std::int32_t> v(r.ints().begin(), r.ints().end());
      std::memcpy(outputs[j].data(), v.data(), outputs[j].size());
    }
  }
}

} // namespace tpullm::runtime
