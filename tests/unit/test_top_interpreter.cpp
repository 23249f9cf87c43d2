// Reference interpreter of Top ops: every op against hand-computed or independently computed
// values, quantized weights against a tiny GPTQ / AWQ packer, and the error paths.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <cstring>
#include <numeric>
#include <random>

#include "tpullm/interp/top_interpreter.hpp"
#include "tpullm/ir/ir.hpp"

using namespace tpullm::ir;
using namespace tpullm::ir::top;     // NOLINT: the tests build Top functions
using namespace tpullm::ir::builtin; // NOLINT
using tpullm::interp::Shape;
using tpullm::interp::Tensor;
using tpullm::interp::TopInterpreter;

namespace {

/// A part holding a copy of `v` as raw bytes, kept alive by its owner.
template <class T>
WeightPart raw_part(const std::string& role, DType dt, Shape shape, const std::vector<T>& v) {
  auto buf = std::make_shared<std::vector<std::byte>>(v.size() * sizeof(T));
  if (!v.empty())
    std::memcpy(buf->data(), v.data(), buf->size());
  return WeightPart{role, dt, std::move(shape), std::span<const std::byte>(*buf), buf};
}

/// A plain weight whose "data" part stores `vals` in `dt`.
Weight data_weight(const std::string& name, Shape shape, const std::vector<double>& vals,
                   DType dt = DType::f32) {
  const Tensor t = Tensor::from_floats(shape, vals, dt);
  auto buf = std::make_shared<std::vector<std::byte>>(t.to_bytes());
  WeightPart p{"data", dt, shape, std::span<const std::byte>(*buf), buf};
  return Weight{name, TensorType(shape, dt), {p}};
}

/// Values exactly representable in f32, uniform in [lo, hi).
std::vector<double> rnd(std::size_t n, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v)
    x = static_cast<double>(static_cast<float>(u(g)));
  return v;
}

Tensor ftensor(Shape s, std::vector<double> v) {
  return Tensor::from_floats(std::move(s), std::move(v));
}
Tensor itensor(Shape s, std::vector<std::int64_t> v) {
  return Tensor::from_ints(std::move(s), std::move(v));
}

void check_close(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(tol).epsilon(tol));
  }
}

/// Runs a one-op function: `make(builder, args)` returns the values to return.
template <class Make>
std::vector<Tensor> run_one(const std::vector<TensorType>& arg_types,
                            const std::vector<Tensor>& inputs, Make make,
                            std::vector<Weight> weights = {}) {
  Module m("m");
  for (auto& w : weights)
    m.add_weight(std::move(w));
  Function& f = m.add_function("f");
  Builder b(m, f);
  std::vector<Value*> args;
  for (std::size_t i = 0; i < arg_types.size(); ++i)
    args.push_back(f.add_argument(std::string("a").append(std::to_string(i)), arg_types[i]));
  b.ret(make(b, args));
  REQUIRE(verify_module(m).empty());
  TopInterpreter interp(m);
  return interp.run("f", inputs);
}

} // namespace

TEST_CASE("tensor bytes round-trip every dtype, widening exactly", "[interp][tensor]") {
  const std::vector<double> fv{1.0, -2.5, 0.1, 65504.0, 1.0 / 3.0, -0.0};
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    INFO(name(dt));
    const Tensor t = Tensor::from_floats({2, 3}, fv, dt).cast(dt);
    const Tensor back = Tensor::from_bytes({2, 3}, dt, t.to_bytes());
    CHECK(back.float_values() == t.float_values());
    CHECK(back.dtype() == dt);
  }
  CHECK(Tensor::from_floats({1}, {0.1}).cast(DType::f32).f(0) == static_cast<double>(0.1f));
  CHECK(Tensor::from_floats({1}, {1.0 + 1.0 / 1024}).cast(DType::bf16).f(0) == 1.0);
  CHECK(Tensor::from_floats({1}, {1.0 + 1.0 / 1024}).cast(DType::f16).f(0) == 1.0 + 1.0 / 1024);
  const std::vector<std::pair<DType, std::vector<std::int64_t>>> ints = {
      {DType::i32, {-5, 7, 2147483647}}, {DType::i64, {-5, 7, 1LL << 40}},
      {DType::i8, {-128, 0, 127}},       {DType::u8, {0, 200, 255}},
      {DType::u4, {0, 9, 15}},           {DType::i4, {-8, -1, 7}}};
  for (const auto& [dt, v] : ints) {
    INFO(name(dt));
    const Tensor t = Tensor::from_ints({3}, v, dt);
    CHECK(Tensor::from_bytes({3}, dt, t.to_bytes()).int_values() == v);
  }
  // u4 packs low nibble first.
  const std::vector<std::byte> packed{std::byte{0x21}, std::byte{0x03}};
  CHECK(Tensor::from_bytes({3}, DType::u4, packed).int_values() ==
        std::vector<std::int64_t>{1, 2, 3});
  CHECK_THROWS_WITH(Tensor::from_bytes({3}, DType::f32, packed),
                    Catch::Contains("2 bytes for 3 f32"));
  CHECK_THROWS_WITH(Tensor::from_ints({1}, {300}, DType::u8).to_bytes(),
                    Catch::Contains("does not fit u8"));
}

TEST_CASE("interp MatMul: transpose_b, bias, plain weights of every float width",
          "[interp][matmul]") {
  // a [1, 2, 3] x b [3, 2] + bias.
  const Tensor a = ftensor({1, 2, 3}, {1, 2, 3, 4, 5, 6});
  const std::vector<double> b{1, -1, 0, 2, 3, 0.5};  // [3, 2]
  const std::vector<double> bt{1, 0, 3, -1, 2, 0.5}; // [2, 3] = b^T
  const std::vector<double> want{1 + 0 + 9 + 10, -1 + 4 + 1.5 - 1, 4 + 0 + 18 + 10,
                                 -4 + 10 + 3 - 1};
  for (DType wt : {DType::f32, DType::bf16, DType::f16, DType::f64})
    for (bool tr : {false, true}) {
      INFO(name(wt) << " transpose_b=" << tr);
      auto out = run_one({a.type()}, {a}, [&](Builder& bl, std::vector<Value*> x) {
        Value* w = bl.weight(data_weight("w", tr ? Shape{2, 3} : Shape{3, 2}, tr ? bt : b, wt));
        Value* bias = bl.weight(data_weight("bias", {2}, {10, -1}));
        return std::vector<Value*>{bl.create(MatMulOp{tr}, {x[0], w, bias})};
      });
      REQUIRE(out[0].shape() == Shape{1, 2, 2});
      CHECK(out[0].float_values() == want);
    }
}

TEST_CASE("interp RMSNorm in f64 with gamma and eps", "[interp]") {
  const Tensor x = ftensor({2, 2}, {3, 4, 1, -1});
  auto out = run_one({x.type()}, {x}, [&](Builder& b, std::vector<Value*> a) {
    return std::vector<Value*>{
        b.create(RMSNormOp{0.5f}, {a[0], b.weight(data_weight("g", {2}, {1, 2}))})};
  });
  const double r0 = 1 / std::sqrt(12.5 + 0.5), r1 = 1 / std::sqrt(1.0 + 0.5);
  check_close(out[0].float_values(), {3 * r0, 8 * r0, 1 * r1, -2 * r1}, 1e-15);
}

TEST_CASE("interp Gather along axis 0 and 1, i32 and i64 indices", "[interp]") {
  std::vector<double> tv(15);
  std::iota(tv.begin(), tv.end(), 0.0); // [5, 3]
  auto out = run_one({TensorType({1, 2}, DType::i32), TensorType({2}, DType::i64)},
                     {itensor({1, 2}, {4, 1}), Tensor::from_ints({2}, {2, 0}, DType::i64)},
                     [&](Builder& b, std::vector<Value*> a) {
                       Value* t = b.weight(data_weight("t", {5, 3}, tv));
                       return std::vector<Value*>{b.create(GatherOp{0}, {t, a[0]}),
                                                  b.create(GatherOp{1}, {t, a[1]})};
                     });
  REQUIRE(out[0].shape() == Shape{1, 2, 3});
  CHECK(out[0].float_values() == std::vector<double>{12, 13, 14, 3, 4, 5});
  REQUIRE(out[1].shape() == Shape{5, 2});
  CHECK(out[1].float_values() == std::vector<double>{2, 0, 5, 3, 8, 6, 11, 9, 14, 12});
}

TEST_CASE("interp Rope matches a complex rotation in both pairings", "[interp][rope]") {
  const std::int64_t B = 1, L = 3, H = 2, d = 8, h = d / 2;
  const std::vector<std::int64_t> pos{5, 6, 9};
  const std::vector<double> xv = rnd(B * L * H * d, 1);
  for (RopeMode mode : {RopeMode::halves, RopeMode::interleaved}) {
    INFO(enum_name(mode));
    // theta of frequency p at position t; cos/sin [B, L, d/2].
    auto theta = [&](std::int64_t t, std::int64_t p) {
      return t * std::pow(10000.0, -2.0 * p / d);
    };
    std::vector<double> cv, sv;
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t p = 0; p < h; ++p) {
        cv.push_back(std::cos(theta(pos[l], p)));
        sv.push_back(std::sin(theta(pos[l], p)));
      }
    const Tensor x = ftensor({B, L, H, d}, xv), c = ftensor({B, L, h}, cv),
                 s = ftensor({B, L, h}, sv);
    auto out =
        run_one({x.type(), c.type(), s.type()}, {x, c, s}, [&](Builder& b, std::vector<Value*> a) {
          return std::vector<Value*>{b.create(RopeOp{mode}, {a[0], a[1], a[2]})};
        });
    std::vector<double> want(xv.size());
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t hd = 0; hd < H; ++hd)
        for (std::int64_t p = 0; p < h; ++p) {
          const std::int64_t base = (l * H + hd) * d;
          const std::int64_t re = mode == RopeMode::halves ? p : 2 * p;
          const std::int64_t im = mode == RopeMode::halves ? p + h : 2 * p + 1;
          const std::complex<double> z(xv[base + re], xv[base + im]);
          const std::complex<double> r = z * std::polar(1.0, theta(pos[l], p));
          want[base + re] = r.real();
          want[base + im] = r.imag();
        }
    check_close(out[0].float_values(), want, 1e-14);
  }
}

TEST_CASE("interp Reshape, Permute, Slice, Concat move elements", "[interp]") {
  std::vector<double> v(24);
  std::iota(v.begin(), v.end(), 0.0);
  const Tensor x = ftensor({2, 3, 4}, v);
  auto out = run_one({x.type()}, {x}, [&](Builder& b, std::vector<Value*> a) {
    Value* r = b.create(ReshapeOp{{6, 4}}, {a[0]});
    Value* p = b.create(PermuteOp{{2, 0, 1}}, {a[0]});
    Value* s = b.create(SliceOp{{1, 1, 2}, {1, 2, 2}}, {a[0]});
    return std::vector<Value*>{r, p, s, b.create(ConcatOp{-1}, {s, s})};
  });
  CHECK(out[0].shape() == Shape{6, 4});
  CHECK(out[0].float_values() == v);
  REQUIRE(out[1].shape() == Shape{4, 2, 3});
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 2; ++j)
      for (std::int64_t k = 0; k < 3; ++k)
        CHECK(out[1].at({i, j, k}) == x.at({j, k, i}));
  CHECK(out[2].float_values() == std::vector<double>{18, 19, 22, 23});
  CHECK(out[3].shape() == Shape{1, 2, 4});
  CHECK(out[3].float_values() == std::vector<double>{18, 19, 18, 19, 22, 23, 22, 23});
}

TEST_CASE("interp Concat along the middle axis", "[interp]") {
  const Tensor a = ftensor({2, 1, 2}, {1, 2, 3, 4}),
               b = ftensor({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12});
  auto out = run_one({a.type(), b.type()}, {a, b}, [&](Builder& bl, std::vector<Value*> x) {
    return std::vector<Value*>{bl.create(ConcatOp{1}, {x[0], x[1]})};
  });
  CHECK(out[0].shape() == Shape{2, 3, 2});
  CHECK(out[0].float_values() == std::vector<double>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12});
}

TEST_CASE("interp Add/Mul broadcast like NumPy; SiLU; Softmax; Cast", "[interp]") {
  const Tensor a = ftensor({2, 1, 3}, {1, 2, 3, 4, 5, 6}), b = ftensor({4, 1}, {0, 10, 20, 30});
  auto out = run_one({a.type(), b.type()}, {a, b}, [&](Builder& bl, std::vector<Value*> x) {
    return std::vector<Value*>{bl.create(AddOp{}, {x[0], x[1]}), bl.create(MulOp{}, {x[1], x[0]})};
  });
  REQUIRE(out[0].shape() == Shape{2, 4, 3});
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 4; ++j)
      for (std::int64_t k = 0; k < 3; ++k) {
        CHECK(out[0].at({i, j, k}) == a.at({i, 0, k}) + b.at({j, 0}));
        CHECK(out[1].at({i, j, k}) == a.at({i, 0, k}) * b.at({j, 0}));
      }

  const Tensor x = ftensor({2, 3}, {0, 1, -2, 1000, 1000, 1001});
  const Tensor c = ftensor({3}, {1.0 + 1.0 / 4096, 0.1, 70000});
  auto o2 = run_one({x.type(), c.type()}, {x, c}, [&](Builder& bl, std::vector<Value*> v) {
    return std::vector<Value*>{
        bl.create(SiLUOp{}, {v[0]}),           bl.create(SoftmaxOp{-1}, {v[0]}),
        bl.create(SoftmaxOp{0}, {v[0]}),       bl.create(CastOp{DType::bf16}, {v[1]}),
        bl.create(CastOp{DType::f16}, {v[1]}), bl.create(CastOp{DType::f64}, {v[1]})};
  });
  check_close(o2[0].float_values(),
              {0, 1 / (1 + std::exp(-1.0)), -2 / (1 + std::exp(2.0)), 1000, 1000, 1001});
  const double e0 = 1 + std::exp(1.0) + std::exp(-2.0), e1 = 2 + std::exp(1.0);
  check_close(o2[1].float_values(), {1 / e0, std::exp(1.0) / e0, std::exp(-2.0) / e0, 1 / e1,
                                     1 / e1, std::exp(1.0) / e1});
  CHECK(o2[2].at({0, 0}) == Approx(0.0).margin(1e-300));
  CHECK(o2[2].at({1, 0}) == 1.0);
  CHECK(o2[3].dtype() == DType::bf16);
  CHECK(o2[3].float_values() ==
        std::vector<double>{1.0, tpullm::bf16_to_f32(tpullm::f32_to_bf16(0.1f)), 70144});
  CHECK(o2[4].dtype() == DType::f16);
  CHECK(o2[4].f(0) == 1.0);
  CHECK(o2[4].f(1) == tpullm::f16_to_f32(tpullm::f32_to_f16(0.1f)));
  CHECK(std::isinf(o2[4].f(2)));
  CHECK(o2[5].float_values() == c.float_values());
}

TEST_CASE("interp ArgMax (first max, i32) and TopK (descending, lower index on ties)", "[interp]") {
  const Tensor x = ftensor({2, 5}, {1, 3, 3, -1, 2, 7, 7, 7, -1, 8});
  auto out = run_one({x.type()}, {x}, [&](Builder& b, std::vector<Value*> a) {
    Operation* tk = b.create_op(TopKOp{3, -1}, {a[0]});
    return std::vector<Value*>{b.create(ArgMaxOp{-1}, {a[0]}), tk->result(0), tk->result(1),
                               b.create(ArgMaxOp{0}, {a[0]})};
  });
  CHECK(out[0].dtype() == DType::i32);
  CHECK(out[0].shape() == Shape{2, 1});
  CHECK(out[0].int_values() == std::vector<std::int64_t>{1, 4});
  CHECK(out[1].float_values() == std::vector<double>{3, 3, 2, 8, 7, 7});
  CHECK(out[2].int_values() == std::vector<std::int64_t>{1, 2, 4, 4, 0, 1});
  CHECK(out[3].int_values() == std::vector<std::int64_t>{1, 1, 1, 0, 1});
}

namespace {

struct AttnCase {
  std::int64_t L, QH, KVH, d, history, first_pos;
  bool causal;
  std::int64_t window = 0; ///< sliding window (0: none)
};

/// Explicit masked softmax(scale * Q K^T) V per q head, K/V expanded like HF repeat_kv.
std::vector<double> explicit_attention(const AttnCase& c, const std::vector<double>& q,
                                       const std::vector<double>& k, const std::vector<double>& v,
                                       const std::vector<std::int64_t>& pos, double scale) {
  const std::int64_t S = c.history + c.L, rep = c.QH / c.KVH, d = c.d;
  std::vector<double> out(static_cast<std::size_t>(c.L * c.QH * d), 0.0);
  for (std::int64_t h = 0; h < c.QH; ++h) {
    // mask[i][j] = 0 or -inf
    std::vector<std::vector<double>> sc(c.L, std::vector<double>(S));
    for (std::int64_t i = 0; i < c.L; ++i)
      for (std::int64_t j = 0; j < S; ++j) {
        const bool hist = j < c.history;
        const std::int64_t kpos = hist ? j : pos[j - c.history];
        const bool valid = (!hist || j < pos[0]) && (!c.causal || kpos <= pos[i]) &&
                           (c.window == 0 || kpos > pos[i] - c.window);
        double dot = 0;
        for (std::int64_t e = 0; e < d; ++e)
          dot += q[(i * c.QH + h) * d + e] * k[(j * c.KVH + h / rep) * d + e];
        sc[i][j] = valid ? dot * scale : -INFINITY;
      }
    for (std::int64_t i = 0; i < c.L; ++i) {
      const double mx = *std::max_element(sc[i].begin(), sc[i].end());
      double z = 0;
      for (auto& s : sc[i])
        z += (s = std::exp(s - mx));
      for (std::int64_t j = 0; j < S; ++j)
        for (std::int64_t e = 0; e < d; ++e)
          out[(i * c.QH + h) * d + e] += sc[i][j] / z * v[(j * c.KVH + h / rep) * d + e];
    }
  }
  return out;
}

std::vector<double> run_attention(const AttnCase& c, const std::vector<double>& q,
                                  const std::vector<double>& k, const std::vector<double>& v,
                                  const std::vector<std::int64_t>& pos, float scale) {
  const std::int64_t S = c.history + c.L;
  const Tensor tq = ftensor({1, c.L, c.QH, c.d}, q), tk = ftensor({1, S, c.KVH, c.d}, k),
               tv = ftensor({1, S, c.KVH, c.d}, v), tp = itensor({1, c.L}, pos);
  auto out = run_one({tq.type(), tk.type(), tv.type(), tp.type()}, {tq, tk, tv, tp},
                     [&](Builder& b, std::vector<Value*> a) {
                       FAttentionOp op{scale, c.QH, c.KVH, c.d, c.history, c.causal, std::nullopt};
                       if (c.window > 0)
                         op.window = c.window;
                       return std::vector<Value*>{b.create(op, {a[0], a[1], a[2], a[3]})};
                     });
  REQUIRE(out[0].shape() == Shape{1, c.L, c.QH * c.d});
  return out[0].float_values();
}

} // namespace

TEST_CASE("interp FAttention equals an explicit masked softmax(QK^T)V", "[interp][attention]") {
  const std::vector<AttnCase> cases = {
      {5, 4, 2, 8, 0, 0, true},     // prefill, GQA 2
      {4, 14, 2, 4, 6, 3, true},    // history of 6 slots, only 3 valid, positions 3..6, GQA 7
      {3, 4, 2, 8, 5, 5, true},     // full history
      {1, 7, 1, 8, 9, 4, true},     // decode, MQA 7
      {4, 4, 2, 8, 6, 2, false},    // non-causal: existing slots only
      {3, 2, 2, 8, 0, 7, true},     // prefill at positions 7.. (no history slots)
      {6, 4, 2, 8, 0, 0, true, 2},  // sliding window of 2 in a prefill
      {4, 14, 2, 4, 6, 3, true, 3}, // window of 3 over history + new slots
      {1, 7, 1, 8, 9, 4, true, 1},  // decode under a window of 1: itself only
  };
  std::uint32_t seed = 10;
  for (const auto& c : cases) {
    INFO("L=" << c.L << " QH=" << c.QH << " KVH=" << c.KVH << " history=" << c.history
              << " first=" << c.first_pos << " causal=" << c.causal << " window=" << c.window);
    const std::int64_t S = c.history + c.L;
    const auto q = rnd(c.L * c.QH * c.d, seed++, -2, 2);
    const auto k = rnd(S * c.KVH * c.d, seed++, -2, 2);
    const auto v = rnd(S * c.KVH * c.d, seed++, -2, 2);
    std::vector<std::int64_t> pos(c.L);
    std::iota(pos.begin(), pos.end(), c.first_pos);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    check_close(run_attention(c, q, k, v, pos, scale), explicit_attention(c, q, k, v, pos, scale),
                1e-12);
  }
}

TEST_CASE("interp FAttention with history equals the tail of a full prefill",
          "[interp][attention]") {
  // 7 tokens: prefill all of them, or 4 as history (in a 6-slot cache with 2 garbage slots)
  // followed by 3 new ones at positions 4..6: the 3 last rows must agree.
  const std::int64_t QH = 6, KVH = 3, d = 8, T = 7, first = 4, hist = 6, L = T - first;
  const auto q = rnd(T * QH * d, 1), k = rnd(T * KVH * d, 2), v = rnd(T * KVH * d, 3);
  std::vector<std::int64_t> pos(T);
  std::iota(pos.begin(), pos.end(), 0);
  const auto full = run_attention({T, QH, KVH, d, 0, 0, true}, q, k, v, pos, 0.3f);
  const auto garbage = rnd(2 * KVH * d, 4, 50, 60);
  auto with_history = [&](const std::vector<double>& x) {
    std::vector<double> r(x.begin(), x.begin() + first * KVH * d);
    r.insert(r.end(), garbage.begin(), garbage.end());
    r.insert(r.end(), x.begin() + first * KVH * d, x.end());
    return r;
  };
  const std::vector<double> q_new(q.begin() + first * QH * d, q.end());
  const std::vector<std::int64_t> pos_new(pos.begin() + first, pos.end());
  const auto tail = run_attention({L, QH, KVH, d, hist, first, true}, q_new, with_history(k),
                                  with_history(v), pos_new, 0.3f);
  check_close(tail, std::vector<double>(full.begin() + first * QH * d, full.end()), 1e-12);
}

TEST_CASE("interp MLP = down(silu(x gate) * (x up)), both layouts", "[interp]") {
  const std::int64_t H = 6, I = 10, L = 3;
  const auto xv = rnd(L * H, 7), gv = rnd(H * I, 8), uv = rnd(H * I, 9), dv = rnd(I * H, 10);
  auto transpose = [](const std::vector<double>& m, std::int64_t r, std::int64_t c) {
    std::vector<double> t(m.size());
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j)
        t[j * r + i] = m[i * c + j];
    return t;
  };
  std::vector<double> want(L * H, 0.0);
  for (std::int64_t l = 0; l < L; ++l) {
    std::vector<double> act(I);
    for (std::int64_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (std::int64_t h = 0; h < H; ++h) {
        g += xv[l * H + h] * gv[h * I + i];
        u += xv[l * H + h] * uv[h * I + i];
      }
      act[i] = g / (1 + std::exp(-g)) * u;
    }
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < I; ++i)
        want[l * H + h] += act[i] * dv[i * H + h];
  }
  const Tensor x = ftensor({1, L, H}, xv);
  for (bool tr : {false, true}) {
    auto out = run_one({x.type()}, {x}, [&](Builder& b, std::vector<Value*> a) {
      Value* g = b.weight(tr ? data_weight("g", {I, H}, transpose(gv, H, I))
                             : data_weight("g", {H, I}, gv));
      Value* u = b.weight(tr ? data_weight("u", {I, H}, transpose(uv, H, I))
                             : data_weight("u", {H, I}, uv));
      Value* d = b.weight(tr ? data_weight("d", {H, I}, transpose(dv, I, H))
                             : data_weight("d", {I, H}, dv));
      return std::vector<Value*>{b.create(MLPOp{Activation::silu, tr}, {a[0], g, u, d})};
    });
    check_close(out[0].float_values(), want);
  }
}

namespace {

/// A synthetic 4-bit weight: q [K, N] in [0, 15], zeros [G, N] in [1, 15], f16 scales [G, N],
/// row k in group g_idx[k] (a shuffled, balanced assignment: act-order).
struct Synthetic4 {
  std::int64_t K, N, group;
  std::vector<int> q, zeros;
  std::vector<std::uint16_t> scales;
  std::vector<std::int32_t> g_idx;
  Synthetic4(std::int64_t k, std::int64_t n, std::int64_t g, bool act_order, std::uint32_t seed)
      : K(k), N(n), group(g) {
    std::mt19937 rng(seed);
    const std::int64_t G = K / group;
    for (std::int64_t i = 0; i < K * N; ++i)
      q.push_back(static_cast<int>(rng() % 16));
    for (std::int64_t i = 0; i < G * N; ++i) {
      zeros.push_back(1 + static_cast<int>(rng() % 15));
      scales.push_back(
          tpullm::f32_to_f16(0.001f + 0.05f * static_cast<float>(rng() % 1000) / 1000));
    }
    for (std::int64_t i = 0; i < K; ++i)
      g_idx.push_back(static_cast<std::int32_t>(i / group));
    if (act_order)
      std::shuffle(g_idx.begin(), g_idx.end(), rng);
  }
  /// W [K, N] = (q - zero[g_idx[k]]) * scale[g_idx[k]].
  std::vector<double> dequantized() const {
    std::vector<double> w(K * N);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n) {
        const std::int64_t g = g_idx[k];
        w[k * N + n] = (q[k * N + n] - zeros[g * N + n]) *
                       static_cast<double>(tpullm::f16_to_f32(scales[g * N + n]));
      }
    return w;
  }
  static std::int32_t pack8(const std::array<int, 8>& nibbles) {
    std::uint32_t w = 0;
    for (int i = 0; i < 8; ++i)
      w |= static_cast<std::uint32_t>(nibbles[i]) << (4 * i);
    return static_cast<std::int32_t>(w);
  }
  /// GPTQ: qweight [K/8, N] packed along K, qzeros [G, N/8] stored zero-1, scales, g_idx.
  Weight gptq(const std::string& name) const {
    const std::int64_t G = K / group;
    std::vector<std::int32_t> qw, qz;
    for (std::int64_t r = 0; r < K / 8; ++r)
      for (std::int64_t n = 0; n < N; ++n) {
        std::array<int, 8> nb{};
        for (int i = 0; i < 8; ++i)
          nb[i] = q[(8 * r + i) * N + n];
        qw.push_back(pack8(nb));
      }
    for (std::int64_t g = 0; g < G; ++g)
      for (std::int64_t c = 0; c < N / 8; ++c) {
        std::array<int, 8> nb{};
        for (int i = 0; i < 8; ++i)
          nb[i] = zeros[g * N + 8 * c + i] - 1;
        qz.push_back(pack8(nb));
      }
    return Weight{name,
                  TensorType({K, N}, DType::u4, QuantSpec{QuantFormat::gptq, group, true, true}),
                  {raw_part("qweight", DType::i32, {K / 8, N}, qw),
                   raw_part("qzeros", DType::i32, {G, N / 8}, qz),
                   raw_part("scales", DType::f16, {G, N}, scales),
                   raw_part("g_idx", DType::i32, {K}, g_idx)}};
  }
  /// AWQ GEMM: qweight [K, N/8] and qzeros [G, N/8] packed along N in order 0,2,4,6,1,3,5,7.
  Weight awq(const std::string& name) const {
    static constexpr std::array<int, 8> order{0, 2, 4, 6, 1, 3, 5, 7};
    const std::int64_t G = K / group;
    std::vector<std::int32_t> qw, qz;
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t c = 0; c < N / 8; ++c) {
        std::array<int, 8> nb{};
        for (int i = 0; i < 8; ++i)
          nb[i] = q[k * N + 8 * c + order[i]];
        qw.push_back(pack8(nb));
      }
    for (std::int64_t g = 0; g < G; ++g)
      for (std::int64_t c = 0; c < N / 8; ++c) {
        std::array<int, 8> nb{};
        for (int i = 0; i < 8; ++i)
          nb[i] = zeros[g * N + 8 * c + order[i]];
        qz.push_back(pack8(nb));
      }
    return Weight{name,
                  TensorType({K, N}, DType::u4, QuantSpec{QuantFormat::awq, group, true, false}),
                  {raw_part("qweight", DType::i32, {K, N / 8}, qw),
                   raw_part("qzeros", DType::i32, {G, N / 8}, qz),
                   raw_part("scales", DType::f16, {G, N}, scales)}};
  }
};

std::vector<double> naive_matmul(const std::vector<double>& x, const std::vector<double>& w,
                                 std::int64_t M, std::int64_t K, std::int64_t N) {
  std::vector<double> y(M * N, 0.0);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t k = 0; k < K; ++k)
        y[m * N + n] += x[m * K + k] * w[k * N + n];
  return y;
}

} // namespace

TEST_CASE("interp MatMul dequantizes GPTQ (act-order) and AWQ weights exactly", "[interp][quant]") {
  const std::int64_t K = 64, N = 16, M = 3;
  const auto xv = rnd(M * K, 21);
  const Tensor x = ftensor({1, M, K}, xv);
  for (bool gptq : {true, false}) {
    INFO((gptq ? "gptq" : "awq"));
    const Synthetic4 s(K, N, 32, gptq, gptq ? 5 : 6);
    Module m("m");
    Function& f = m.add_function("f");
    Builder b(m, f);
    Value* a = f.add_argument("x", x.type());
    Value* w = b.weight(gptq ? s.gptq("w") : s.awq("w"));
    Value* bias = b.weight(data_weight("bias", {N}, rnd(N, 22), DType::f16));
    Value* y = b.create(MatMulOp{false}, {a, w, bias});
    Value* mlp = b.create(MLPOp{Activation::silu, false},
                          {b.create(SliceOp{{0, 0, 0}, {1, M, N}}, {y}),
                           b.weight(data_weight("g", {N, K}, rnd(N * K, 23))),
                           b.weight(data_weight("u", {N, K}, rnd(N * K, 24))), w});
    b.ret({y, mlp});
    REQUIRE(verify_module(m).empty());
    TopInterpreter interp(m);
    // The materialized weight is the exact dequantization.
    CHECK(interp.weight("w")->float_values() == s.dequantized());
    CHECK(interp.weight("w")->shape() == Shape{K, N});
    auto out = interp.run("f", {x});
    auto want = naive_matmul(xv, s.dequantized(), M, K, N);
    const Tensor bias_t = *interp.weight("bias");
    for (std::int64_t r = 0; r < M; ++r)
      for (std::int64_t n = 0; n < N; ++n)
        want[r * N + n] += bias_t.f(n);
    check_close(out[0].float_values(), want);
    CHECK(out[1].shape() == Shape{1, M, N});
    CHECK(interp.weights().size() == 4);
  }
}

TEST_CASE("interp runs a whole block and caches its weights", "[interp]") {
  const std::int64_t H = 16, QH = 4, KVH = 2, D = 4, I = 24, SEQ = 12, L = 3;
  Module m("block_0");
  Function& f = m.add_function("block_0");
  Builder b(m, f);
  Value* x = f.add_argument("input_states", TensorType({1, L, H}, DType::f32));
  Value* pos = f.add_argument("position_ids", TensorType({1, L}, DType::i32));
  std::uint32_t seed = 100;
  auto w = [&](const std::string& n, Shape s, DType dt = DType::f32) {
    return b.weight(data_weight(n, s, rnd(tpullm::interp::num_elements(s), seed++), dt));
  };
  Value* n = b.create(RMSNormOp{1e-6f}, {x, w("attn_norm", {H})});
  Value* q = b.create(ReshapeOp{{1, L, QH, D}},
                      {b.create(MatMulOp{true}, {n, w("q", {QH * D, H}, DType::bf16)})});
  Value* k = b.create(ReshapeOp{{1, L, KVH, D}},
                      {b.create(MatMulOp{true}, {n, w("k", {KVH * D, H}, DType::bf16)})});
  Value* v = b.create(ReshapeOp{{1, L, KVH, D}},
                      {b.create(MatMulOp{true}, {n, w("v", {KVH * D, H}, DType::bf16)})});
  Value* cos = b.create(GatherOp{0}, {w("cos", {SEQ, D / 2}), pos});
  Value* sin = b.create(GatherOp{0}, {w("sin", {SEQ, D / 2}), pos});
  q = b.create(RopeOp{RopeMode::halves}, {q, cos, sin});
  k = b.create(RopeOp{RopeMode::halves}, {k, cos, sin});
  Value* attn = b.create(FAttentionOp{0.5f, QH, KVH, D, 0, true, std::nullopt}, {q, k, v, pos});
  Value* h = b.create(AddOp{}, {x, b.create(MatMulOp{true}, {attn, w("o", {H, QH * D})})});
  Value* mlp = b.create(MLPOp{Activation::silu, true},
                        {b.create(RMSNormOp{1e-6f}, {h, w("mlp_norm", {H})}), w("gate", {I, H}),
                         w("up", {I, H}), w("down", {H, I})});
  b.ret({b.create(AddOp{}, {h, mlp}), k, v});
  REQUIRE(verify_module(m).empty());
  TopInterpreter interp(m);
  const Tensor xin = ftensor({1, L, H}, rnd(L * H, 1)), pin = itensor({1, L}, {2, 3, 4});
  auto out = interp.run("block_0", {xin, pin});
  REQUIRE(out.size() == 3);
  CHECK(out[0].shape() == Shape{1, L, H});
  CHECK(out[1].shape() == Shape{1, L, KVH, D});
  // Every weight but the rope cos / sin tables, which are only gathered by rows.
  CHECK(interp.weights().size() == m.weights().size() - 2);
  auto again = interp.run("block_0", {xin, pin});
  CHECK(again[0].float_values() == out[0].float_values());
  for (double e : out[0].float_values())
    CHECK(std::isfinite(e));
}

TEST_CASE("interp errors: inputs, weights without data, gather out of range", "[interp][errors]") {
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  Value* ids = f.add_argument("ids", TensorType({1, 2}, DType::i32));
  b.ret({b.create(GatherOp{0}, {b.weight(data_weight("table", {5, 2}, rnd(10, 1))), ids})});
  Function& g = m.add_function("g");
  Builder bg(m, g);
  Value* x = g.add_argument("x", TensorType({2, 3}, DType::f32));
  bg.ret({bg.create(MatMulOp{false},
                    {x, bg.weight(Weight{"empty", TensorType({3, 4}, DType::f32), {}})})});
  TopInterpreter interp(m);

  CHECK_THROWS_WITH(
      interp.run("f", {itensor({1, 3}, {0, 1, 2})}),
      "invalid input: @f: argument #0 %ids expects tensor<1x2xi32>, got tensor<1x3xi32>");
  CHECK_THROWS_WITH(interp.run("f", {Tensor::from_ints({1, 2}, {0, 1}, DType::i64)}),
                    Catch::Contains("expects tensor<1x2xi32>, got tensor<1x2xi64>"));
  CHECK_THROWS_WITH(interp.run("f", {}), Catch::Contains("@f: expects 1 inputs, got 0"));
  CHECK_THROWS_WITH(interp.run("nope", {}), Catch::Contains("has no function @nope"));
  CHECK_THROWS_WITH(interp.run("f", {itensor({1, 2}, {1, 9})}),
                    Catch::Contains("@f: top.Gather") && Catch::Contains("gather index 9") &&
                        Catch::Contains("out of range [0, 5)"));
  CHECK_THROWS_WITH(interp.run("f", {itensor({1, 2}, {-1, 0})}),
                    Catch::Contains("gather index -1"));
  CHECK(interp.run("f", {itensor({1, 2}, {4, 0})})[0].shape() == Shape{1, 2, 2});
  CHECK_THROWS_WITH(interp.run("g", {ftensor({2, 3}, rnd(6, 2))}),
                    Catch::Contains("weight @empty: has no data"));

  // A module parsed from text has no weight data either.
  Module parsed = text::parse_module(R"(module @p {
  weight @w : tensor<2x2xf32>
  func @f(%x: tensor<1x2xf32>) -> (tensor<1x2xf32>) {
    %0 = "builtin.Weight"() {name = @w} : () -> tensor<2x2xf32>
    %1 = "top.MatMul"(%x, %0) {transpose_b = false} : (tensor<1x2xf32>, tensor<2x2xf32>) -> tensor<1x2xf32>
    "builtin.Return"(%1) : (tensor<1x2xf32>) -> ()
  }
}
)",
                                     "p.tir");
  TopInterpreter pi(parsed);
  CHECK_THROWS_WITH(pi.run("f", {ftensor({1, 2}, {1, 2})}),
                    Catch::Contains("weight @w: has no data"));
}

TEST_CASE("interp MatMul split over threads equals a naive product, both layouts",
          "[interp][matmul]") {
  // 3 x 300 x 700 = 630k multiply-adds: above the threshold that splits N across threads.
  const std::int64_t M = 3, K = 300, N = 700;
  const auto xv = rnd(M * K, 31), wv = rnd(K * N, 32), bv = rnd(N, 33);
  std::vector<double> wt(N * K);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n)
      wt[n * K + k] = wv[k * N + n];
  auto want = naive_matmul(xv, wv, M, K, N);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n)
      want[m * N + n] += bv[n];
  const Tensor x = ftensor({1, M, K}, xv);
  for (bool tr : {false, true}) {
    INFO("transpose_b=" << tr);
    auto out = run_one({x.type()}, {x}, [&](Builder& b, std::vector<Value*> a) {
      Value* w = b.weight(tr ? data_weight("w", {N, K}, wt) : data_weight("w", {K, N}, wv));
      return std::vector<Value*>{
          b.create(MatMulOp{tr}, {a[0], w, b.weight(data_weight("bias", {N}, bv))})};
    });
    check_close(out[0].float_values(), want);
  }
  // An empty contraction is all bias.
  const Tensor e = ftensor({2, 0}, {});
  auto out = run_one({e.type()}, {e}, [&](Builder& b, std::vector<Value*> a) {
    return std::vector<Value*>{
        b.create(MatMulOp{false}, {a[0], b.weight(data_weight("w", {0, 3}, {})),
                                   b.weight(data_weight("c", {3}, {1, 2, 3}))})};
  });
  CHECK(out[0].float_values() == std::vector<double>{1, 2, 3, 1, 2, 3});
}

TEST_CASE("one WeightStore shares a weight between modules, never two weights of one name",
          "[interp][weights]") {
  // Two modules reference the same stored bytes under the same name, and a third holds other
  // bytes under that name.
  const Weight shared = data_weight("w", {2, 2}, {1, 2, 3, 4}, DType::bf16);
  const Weight other = data_weight("w", {2, 2}, {5, 6, 7, 8}, DType::bf16);
  auto module = [](const std::string& name, const Weight& w) {
    Module m(name);
    Function& f = m.add_function(name);
    Builder b(m, f);
    Value* x = f.add_argument("x", TensorType({1, 2}, DType::f32));
    b.ret({b.create(MatMulOp{false}, {x, b.weight(w)})});
    return m;
  };
  const Module m1 = module("f1", shared), m2 = module("f2", shared), m3 = module("f3", other);
  auto store = std::make_shared<tpullm::interp::WeightStore>();
  TopInterpreter i1(m1, store), i2(m2, store), i3(m3, store);
  const Tensor x = ftensor({1, 2}, {1, 1});
  CHECK(i1.run("f1", {x})[0].float_values() == std::vector<double>{4, 6});
  CHECK(i2.run("f2", {x})[0].float_values() == std::vector<double>{4, 6});
  CHECK(store->size() == 1);
  CHECK(i1.weight("w") == i2.weight("w")); // one tensor, not two copies
  CHECK(i3.run("f3", {x})[0].float_values() == std::vector<double>{12, 14});
  CHECK(store->size() == 2);
  CHECK(store->bytes() == 2 * 4 * 8);
  // An interpreter without a store gets its own.
  TopInterpreter alone(m1);
  CHECK(alone.weight("w") != i1.weight("w"));
  CHECK(alone.weight("w")->float_values() == i1.weight("w")->float_values());
}

TEST_CASE("a WeightStore with a budget drops the least recently used free weights",
          "[interp][weights]") {
  // Three 2x2 weights of 32 bytes each (8 per element) under a 64-byte budget.
  const Weight a = data_weight("a", {2, 2}, {1, 2, 3, 4}, DType::bf16);
  const Weight b = data_weight("b", {2, 2}, {5, 6, 7, 8}, DType::bf16);
  const Weight c = data_weight("c", {2, 2}, {9, 10, 11, 12}, DType::bf16);
  tpullm::interp::WeightStore store(64);
  CHECK(store.budget() == 64);
  (void)store.get(a);
  (void)store.get(b);
  (void)store.get(a); // a is now more recent than b
  (void)store.get(c); // b goes
  CHECK(store.size() == 2);
  CHECK(store.bytes() == 64);
  CHECK(store.materializations() == 3);
  (void)store.get(a); // still held
  CHECK(store.materializations() == 3);
  const auto held_b = store.get(b); // c is the least recent: it goes, b is widened again
  CHECK(store.materializations() == 4);
  CHECK(held_b->float_values() == std::vector<double>{5, 6, 7, 8});
  // a is free, b is in use: c evicts a, and then nothing more can go.
  const auto held_c = store.get(c);
  CHECK(held_c->float_values() == std::vector<double>{9, 10, 11, 12});
  CHECK_THROWS_WITH(store.get(a), Catch::Contains("weight @a: needs 0.00 MiB but 0.00 MiB of "
                                                  "weights are in use and the budget is 0.00 MiB"));
  CHECK(store.peak_bytes() == 64);
  // A weight larger than the whole budget, and a zero budget.
  tpullm::interp::WeightStore small(31);
  CHECK_THROWS_WITH(small.get(a), Catch::Contains("raise the budget"));
  CHECK(small.peak_bytes() == 0);
  CHECK_THROWS_WITH(tpullm::interp::WeightStore(0), Catch::Contains("budget must be > 0"));
}

TEST_CASE("a table only gathered widens the rows it reads, not the table", "[interp][weights]") {
  // bf16 stored, declared f32 (rounded as a whole-table widening would): the rows equal
  // ref::gather of the materialized table, and the store never holds the table.
  const std::vector<double> vals = rnd(5 * 3, 7);
  Weight table = data_weight("table", {5, 3}, vals, DType::bf16);
  table.type = TensorType({5, 3}, DType::f32);
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  Value* ids = f.add_argument("ids", TensorType({1, 4}, DType::i32));
  Value* t = b.weight(table);
  b.ret({b.create(GatherOp{0}, {t, ids}), b.create(GatherOp{-2}, {t, ids})});
  CHECK(tpullm::interp::gathered_by_rows(*t->defining_op()));
  auto store = std::make_shared<tpullm::interp::WeightStore>();
  TopInterpreter interp(m, store);
  const Tensor in = Tensor::from_ints({1, 4}, {4, 0, 4, 2}, DType::i32);
  const auto out = interp.run("f", {in});
  CHECK(store->size() == 0);
  const Tensor want = tpullm::interp::ref::gather(tpullm::interp::materialize_weight(table), in, 0);
  CHECK(out[0].shape() == Shape{1, 4, 3});
  CHECK(out[0].dtype() == DType::f32);
  CHECK(out[0].float_values() == want.float_values());
  CHECK(out[1].float_values() == want.float_values());
  CHECK_THROWS_WITH(interp.run("f", {Tensor::from_ints({1, 4}, {0, 5, 0, 0}, DType::i32)}),
                    Catch::Contains("gather index 5 (at flat position 1) is out of range [0, 5)"));
  // Another use (here a MatMul) makes the table a plain weight again.
  Module m2("m2");
  Function& g = m2.add_function("g");
  Builder b2(m2, g);
  Value* ids2 = g.add_argument("ids", TensorType({1, 4}, DType::i32));
  Value* x = g.add_argument("x", TensorType({1, 3}, DType::f32));
  Value* t2 = b2.weight(table);
  b2.ret({b2.create(GatherOp{0}, {t2, ids2}), b2.create(MatMulOp{true}, {x, t2})});
  CHECK_FALSE(tpullm::interp::gathered_by_rows(*t2->defining_op()));
  TopInterpreter interp2(m2, store);
  const auto out2 = interp2.run("g", {in, ftensor({1, 3}, {1, 0, 0})});
  CHECK(out2[0].float_values() == want.float_values());
  CHECK(store->size() == 1);
}

TEST_CASE("the interpreter evaluates the top and builtin dialects and refuses others",
          "[interp][dispatch]") {
  using tpullm::interp::interprets;
  static_assert(interprets("top.MatMul") && interprets("top.Return"));
  static_assert(interprets("builtin.weight") && interprets("return"));
  static_assert(!interprets("tpu.MatMul") && !interprets("tpu.FAttention"));
  // Every Top and builtin kind of ops.def is evaluated; every Tpu kind is refused.
  for (std::size_t k = 0; k < kNumOpKinds; ++k) {
    INFO(kOpNames[k]);
    CHECK(interprets(kOpNames[k]) == (kOpDialects[k] != Dialect::tpu));
  }
  // A Tpu op met at run time: a clear error, not a crash.
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  Value* x = f.add_argument("x", TensorType({2, 4}, DType::f32));
  b.ret({b.create(tpullm::ir::tpu::SiLUOp{}, {x})});
  TopInterpreter interp(m);
  const auto in = Tensor::from_f32({2, 4}, std::vector<float>(8, 1.0f));
  CHECK_THROWS_WITH(interp.run("f", {in}), Catch::Contains("tpu.SiLU is not a Top op"));
}
