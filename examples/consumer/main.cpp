// Builds a tiny Top function with the installed headers, verifies it, prints it, and parses the
// text back: proof that find_package(tpullm) gives a usable library.
#include <iostream>

#include <tpullm/ir/ir.hpp>

int main() {
  using namespace tpullm::ir;
  Module m("consumer");
  Function& f = m.add_function("norm_silu");
  Builder b(m, f);
  Value* x = f.add_argument("x", TensorType({1, 4, 8}, DType::f32));
  Value* gamma = b.weight(Weight{"gamma", TensorType({8}, DType::f32), {}});
  Value* n = b.create(top::RMSNormOp{1e-5f}, {x, gamma});
  b.ret({b.create(top::SiLUOp{}, {n})});
  if (!verify_module(m).empty())
    return 1;
  const std::string text = text::print_module(m);
  Module back = text::parse_module(text, "consumer.tir");
  if (text::print_module(back) != text)
    return 1;
  std::cout << text;
  return 0;
}
