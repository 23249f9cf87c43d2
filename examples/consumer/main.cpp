// Builds a tiny Top function with the installed headers, verifies it, prints it, parses the
// text back and runs it on the reference interpreter (xtensor, Eigen, OpenMP): proof that
// find_package(tpullm) gives a usable library with every dependency its headers include.
#include <cmath>
#include <iostream>
#include <memory>
#include <vector>

#include <tpullm/interp/top_interpreter.hpp>
#include <tpullm/ir/ir.hpp>

int main() {
  using namespace tpullm::ir;
  Module m("consumer");
  Function& f = m.add_function("norm_silu");
  Builder b(m, f);
  Value* x = f.add_argument("x", TensorType({1, 4, 8}, DType::f32));
  auto ones = std::make_shared<std::vector<float>>(8, 1.0f);
  const WeightPart data{
      "data", DType::f32, {8}, std::as_bytes(std::span<const float>(*ones)), ones};
  Value* gamma = b.weight(Weight{"gamma", TensorType({8}, DType::f32), {data}});
  Value* n = b.create(top::RMSNormOp{1e-5f}, {x, gamma});
  b.ret({b.create(top::SiLUOp{}, {n})});
  if (!verify_module(m).empty())
    return 1;
  const std::string text = text::print_module(m);
  Module back = text::parse_module(text, "consumer.tir");
  if (text::print_module(back) != text)
    return 1;
  std::cout << text;
  // Every x = 2: RMSNorm gives 1, SiLU(1) = 1 / (1 + e^-1).
  tpullm::interp::TopInterpreter interp(m);
  const auto out = interp.run(
      "norm_silu", {tpullm::interp::Tensor::from_floats({1, 4, 8}, std::vector<double>(32, 2.0))});
  const double want = 1.0 / (1.0 + std::exp(-1.0));
  for (double v : out[0].float_values())
    if (std::abs(v - want) > 1e-5)
      return 1;
  std::cout << "interpreted: " << out[0].float_values()[0] << "\n";
  return 0;
}
