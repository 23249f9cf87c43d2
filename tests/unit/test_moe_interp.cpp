// Reference semantics of top.MoE in the Top interpreter against hand-computed values: softmax
// over the router logits, top-k with ties to the lower expert, optional renormalisation, the
// weighted sum of the chosen experts' SwiGLU MLPs, in both weight orientations.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "tpullm/interp/top_interpreter.hpp"
#include "tpullm/ir/ir.hpp"

using namespace tpullm::ir;
using tpullm::interp::Shape;
using tpullm::interp::Tensor;
using tpullm::interp::TopInterpreter;

namespace {

Weight weight_of(const std::string& name, Shape shape, const std::vector<double>& vals) {
  const Tensor t = Tensor::from_floats(shape, vals, DType::f32);
  auto buf = std::make_shared<std::vector<std::byte>>(t.to_bytes());
  WeightPart p{"data", DType::f32, shape, std::span<const std::byte>(*buf), buf};
  return Weight{name, TensorType(shape, DType::f32), {p}};
}

double silu(double v) {
  return v / (1 + std::exp(-v));
}

/// Three experts over H = 2, I = 1: expert e computes [c_e * silu(x0) * x1, 0] (gate reads x0,
/// up reads x1, down writes c_e into output 0); router rows [1, 0], [0, 1], [1, 0] (experts 0
/// and 2 always tie). `transposed`: weights stored [out, in] (HF), else [in, out].
std::vector<double> run_moe(const std::vector<double>& x, std::int64_t k, bool renormalize,
                            bool transposed) {
  const std::vector<double> c{1, 10, 100};
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / 2;
  Value* in = f.add_argument("x", TensorType({rows, 2}, DType::f32));
  auto w = [&](const std::string& name, std::int64_t out, std::int64_t inn,
               std::vector<double> v_out_in) {
    if (transposed)
      return b.weight(weight_of(name, {out, inn}, v_out_in));
    std::vector<double> t(v_out_in.size());
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < inn; ++i)
        t[static_cast<std::size_t>(i * out + o)] = v_out_in[static_cast<std::size_t>(o * inn + i)];
    return b.weight(weight_of(name, {inn, out}, t));
  };
  std::vector<Value*> ops{in, w("router", 3, 2, {1, 0, 0, 1, 1, 0})};
  for (int e = 0; e < 3; ++e) {
    const std::string p = "e" + std::to_string(e) + ".";
    ops.push_back(w(p + "gate", 1, 2, {1, 0}));
    ops.push_back(w(p + "up", 1, 2, {0, 1}));
    ops.push_back(w(p + "down", 2, 1, {c[static_cast<std::size_t>(e)], 0}));
  }
  top::MoEOp op;
  op.experts = 3;
  op.top_k = k;
  op.renormalize = renormalize;
  op.transpose_b = transposed;
  b.ret({b.create(op, ops)});
  REQUIRE(verify_module(m).empty());
  TopInterpreter interp(m);
  return interp.run("f", {Tensor::from_floats({rows, 2}, x, DType::f32)})[0].float_values();
}

} // namespace

TEST_CASE("interp MoE: softmax top-k routing, ties to the lower expert", "[interp][moe]") {
  const std::vector<double> x{2, 1, -1, 3}; // logits row 0: [2, 1, 2]; row 1: [-1, 3, -1]
  const double e = std::exp(1.0);
  for (bool tr : {true, false}) {
    INFO("transpose_b " << tr);
    // k = 1: row 0 ties experts 0 and 2 -> expert 0; row 1 -> expert 1; renormalised weight 1
    auto y = run_moe(x, 1, true, tr);
    CHECK(y[0] == Approx(silu(2) * 1));
    CHECK(y[1] == 0);
    CHECK(y[2] == Approx(10 * silu(-1) * 3));
    // k = 1 without renormalisation: the softmax probability of the chosen expert
    y = run_moe(x, 1, false, tr);
    CHECK(y[0] == Approx(e * e / (2 * e * e + e) * silu(2)));
    CHECK(y[2] == Approx(std::exp(3.0) / (std::exp(3.0) + 2 * std::exp(-1.0)) * 10 * silu(-1) * 3));
    // k = 2 renormalised: row 0 takes experts 0 and 2 at 1/2 each
    y = run_moe(x, 2, true, tr);
    CHECK(y[0] == Approx(0.5 * (1 + 100) * silu(2)));
    // k = 3 without renormalisation: every expert at its probability
    y = run_moe(x, 3, false, tr);
    const double z = 2 * e * e + e;
    CHECK(y[0] == Approx((e * e * 1 + e * 10 + e * e * 100) / z * silu(2)));
  }
}
