// Hostile shapes and attributes in the IR: every op's infer() (Top and Tpu) refuses bad operands
// with tpullm::Error only (never another exception, never undefined behaviour: the sanitizer
// build runs this too), shape arithmetic is checked, TensorType has documented limits that the
// parser and the verifier enforce with a location, and checks stay linear in the rank.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tpullm/ir/ir.hpp"
#include "tpullm/support/checked.hpp"

using namespace tpullm;
using namespace tpullm::ir;
using Catch::Contains;

namespace {

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

/// Operand types from harmless to hostile (rank 0, empty, at and beyond the limits, negative).
std::vector<TensorType> type_pool() {
  const QuantSpec packed{QuantFormat::packed, 8, true, false};
  const QuantSpec gptq{QuantFormat::gptq, 4, true, false};
  return {
      TensorType({}, DType::f32),
      TensorType({}, DType::i32),
      TensorType({0}, DType::f32),
      TensorType({1}, DType::i32),
      TensorType({3}, DType::f32),
      TensorType({2, 3}, DType::f32),
      TensorType({1, 1}, DType::i32),
      TensorType({1, 1, 1}, DType::f32),
      TensorType({1, 2, 2, 4}, DType::f32),
      TensorType({1, 2, 2, 4}, DType::i32),
      TensorType({1, 4, 2, 4}, DType::f32),
      TensorType({8, 8}, DType::bf16, std::nullopt, Layout::panels),
      TensorType({8, 8}, DType::u4, packed, Layout::panels),
      TensorType({8, 8}, DType::u4, gptq),
      TensorType({kMaxDim, 1}, DType::f32),
      TensorType({kMaxDim, kMaxDim}, DType::f32),
      TensorType({kI64Max, 2}, DType::f32),
      TensorType({1, kI64Max, 2, 4}, DType::f32),
      TensorType({-1, 4}, DType::f32),
  };
}

/// Sets every attribute of `op` to a value drawn from a hostile list.
struct HostileAttrs {
  std::mt19937_64& rng;
  template <class T>
  T pick(std::initializer_list<T> xs) {
    return *(xs.begin() + static_cast<std::ptrdiff_t>(rng() % xs.size()));
  }
  void operator()(const char*, std::int64_t& v) {
    v = pick<std::int64_t>({0, 1, 2, -1, 4, kI64Max, kI64Min, kMaxDim, kI64Max - 1});
  }
  void operator()(const char*, float& v) {
    v = pick<float>({1.0f, 0.0f, -1.0f, std::numeric_limits<float>::infinity(), NAN});
  }
  void operator()(const char*, bool& v) { v = (rng() & 1) != 0; }
  void operator()(const char*, std::vector<std::int64_t>& v) {
    v = pick<std::vector<std::int64_t>>({{},
                                         {0},
                                         {1, 0},
                                         {0, 1},
                                         {kI64Max, 1},
                                         {0, kI64Max},
                                         {-1, 0},
                                         {0, 0, 0, 0},
                                         {3, 2, 1, 0},
                                         {0, 1, 2, 3},
                                         {kMaxDim, kMaxDim}});
  }
  template <class Other>
  void operator()(const char*, Other&) {} // enums, dtypes, symbols: defaults are fine
};

/// Runs infer_result_types; returns "" on success or tpullm::Error, else the foreign exception.
std::string foreign_exception(const OpVariant& op, const std::vector<TensorType>& in) {
  try {
    (void)infer_result_types(op, in);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    return std::string(op_name(OpKind(op.index()))) + ": " + e.what();
  } catch (...) {
    return std::string(op_name(OpKind(op.index()))) + ": unknown exception";
  }
  return "";
}

} // namespace

TEST_CASE("checked arithmetic detects every overflow", "[limits]") {
  CHECK(checked_add<std::int64_t>(kI64Max, 1) == std::nullopt);
  CHECK(checked_add<std::int64_t>(kI64Min, -1) == std::nullopt);
  CHECK(checked_add<std::int64_t>(kI64Max - 1, 1) == kI64Max);
  CHECK(checked_mul<std::int64_t>(std::int64_t{1} << 32, std::int64_t{1} << 31) == std::nullopt);
  CHECK(checked_mul<std::int64_t>(-1, kI64Min) == std::nullopt);
  CHECK(checked_mul<std::int64_t>(3, 4) == 12);
  CHECK(checked_sub<std::int64_t>(kI64Min, 1) == std::nullopt);
  CHECK(checked_mul<std::uint64_t>(~0ull, 2) == std::nullopt);
  REQUIRE_THROWS_AS(ir::detail::checked_add(kI64Max, 1, "x"), Error);
  REQUIRE_THROWS_WITH(ir::detail::checked_mul(kI64Max, 2, "q_heads * head_dim"),
                      Contains("q_heads * head_dim overflows"));
}

TEST_CASE("TensorType limits: dims in [0, 2^48], at most 2^48 elements", "[limits]") {
  CHECK_FALSE(TensorType({kMaxDim}, DType::f32).limit_violation());
  CHECK_FALSE(TensorType({1 << 24, 1 << 24}, DType::f32).limit_violation());
  CHECK_FALSE(TensorType({0, kMaxDim, kMaxDim}, DType::f32).limit_violation()); // no elements
  CHECK(TensorType({kMaxDim + 1}, DType::f32).limit_violation());
  CHECK(TensorType({-1}, DType::f32).limit_violation());
  CHECK(TensorType({0, kMaxDim + 1}, DType::f32).limit_violation()); // every dim is checked
  const auto many = TensorType({1 << 25, 1 << 24}, DType::f32).limit_violation();
  REQUIRE(many);
  CHECK_THAT(*many, Contains("more than 2^48 elements"));
  // num_elements() never overflows: it refuses instead.
  REQUIRE_THROWS_AS(TensorType({kI64Max, 2}, DType::f32).num_elements(), Error);
  REQUIRE_THROWS_AS(TensorType({kMaxDim, kMaxDim, kMaxDim}, DType::f64).byte_size(), Error);
  CHECK(TensorType({kMaxDim}, DType::f64).byte_size() == 8 * kMaxDim);
  // Messages stay short for a huge rank.
  const TensorType wide(std::vector<std::int64_t>(20000, 1), DType::f32);
  CHECK(wide.summary().size() < 100);
}

TEST_CASE("every op's infer() refuses hostile operands and attributes with tpullm::Error only",
          "[limits]") {
  const auto pool = type_pool();
  std::mt19937_64 rng(20240611);
  HostileAttrs hostile{rng};
  std::size_t tried = 0, accepted = 0;
  for (std::size_t k = 0; k < kNumOpKinds; ++k) {
    const OpVariant base = make_op(OpKind(k));
    if (std::holds_alternative<builtin::WeightOp>(base))
      continue; // needs a module; its only rule is the lookup
    const Arity ar =
        visit_op(base, [](const auto& o) { return std::decay_t<decltype(o)>::operands; });
    const int max_n = ar.max < 0 ? ar.min + 3 : ar.max;
    for (int iter = 0; iter < 400; ++iter) {
      OpVariant op = base;
      if (iter % 2 == 1)
        visit_op(op, [&](auto& o) { std::decay_t<decltype(o)>::attrs(o, hostile); });
      const int n = ar.min + static_cast<int>(rng() % static_cast<unsigned>(max_n - ar.min + 1));
      std::vector<TensorType> in;
      for (int i = 0; i < n; ++i)
        in.push_back(pool[rng() % pool.size()]);
      // Every operand rank 0 in the first iterations: ops must check rank before indexing.
      if (iter < 4)
        for (auto& t : in)
          t = TensorType({}, iter % 2 ? DType::i32 : DType::f32);
      const std::string bad = foreign_exception(op, in);
      INFO(bad);
      REQUIRE(bad.empty());
      ++tried;
      try {
        for (const auto& t : infer_result_types(op, in))
          REQUIRE_FALSE(t.limit_violation()); // what infer accepts is within the limits
        ++accepted;
      } catch (const Error&) {
      }
    }
  }
  CHECK(tried > 10000);
  CHECK(accepted > 0);
}

TEST_CASE("rank-0 operands are refused by ops that index dimensions", "[limits]") {
  const TensorType s({}, DType::f32);
  REQUIRE_THROWS_WITH(infer_result_types(top::MatMulOp{}, {s, s}),
                      Contains("lhs must have rank >= 1"));
  REQUIRE_THROWS_WITH(infer_result_types(top::RMSNormOp{}, {s, s}),
                      Contains("input must have rank >= 1"));
  REQUIRE_THROWS_WITH(infer_result_types(top::MLPOp{}, {s, s, s, s}), Contains("rank"));
  REQUIRE_THROWS_WITH(infer_result_types(top::RopeOp{}, {s, s, s}),
                      Contains("input must be [B, L, heads, d]"));
  REQUIRE_THROWS_WITH(infer_result_types(top::SoftmaxOp{}, {s}), Contains("out of range"));
  REQUIRE_THROWS_WITH(infer_result_types(tpu::MatMulOp{}, {s, s}),
                      Contains("must be a packed [K, N] weight"));
  const TensorType w({8, 8}, DType::bf16, std::nullopt, Layout::panels);
  REQUIRE_THROWS_WITH(infer_result_types(tpu::MatMulOp{}, {s, w}), Contains("does not contract"));
  REQUIRE_THROWS_AS(infer_result_types(tpu::SoftmaxOp{}, {s}), Error);
}

TEST_CASE("shape arithmetic near int64 max is refused, not wrapped", "[limits]") {
  // Concat: the sum of near-max dims.
  const TensorType big({kMaxDim}, DType::f32);
  REQUIRE_THROWS_WITH(infer_result_types(top::ConcatOp{0}, {big, big}), Contains("2^48"));
  const TensorType huge({kI64Max}, DType::f32); // beyond the limits: only built in C++
  REQUIRE_THROWS_WITH(infer_result_types(top::ConcatOp{0}, {huge, huge}),
                      Contains("concat result dimension overflows"));
  // Slice: offset + size past INT64_MAX.
  const TensorType x({8}, DType::f32);
  REQUIRE_THROWS_WITH(infer_result_types(top::SliceOp{{kI64Max}, {2}}, {x}),
                      Contains("out of bounds"));
  REQUIRE_THROWS_WITH(infer_result_types(top::SliceOp{{4}, {kI64Max}}, {x}),
                      Contains("out of bounds"));
  CHECK(infer_result_types(top::SliceOp{{6}, {2}}, {x})[0].shape == std::vector<std::int64_t>{2});
  // FAttention: q_heads * head_dim and history + L.
  top::FAttentionOp fa;
  fa.q_heads = std::int64_t{1} << 40;
  fa.kv_heads = 1;
  fa.head_dim = std::int64_t{1} << 30;
  const TensorType q({1, 1, fa.q_heads, fa.head_dim}, DType::f32);
  const TensorType kv({1, 1, 1, fa.head_dim}, DType::f32);
  const TensorType pos({1, 1}, DType::i32);
  REQUIRE_THROWS_AS(infer_result_types(fa, {q, kv, kv, pos}), Error);
  top::FAttentionOp fh;
  fh.history = kI64Max;
  const TensorType q1({1, 1, 1, 1}, DType::f32);
  REQUIRE_THROWS_WITH(infer_result_types(fh, {q1, q1, q1, pos}),
                      Contains("history + L key slots overflows"));
  // Reshape of a huge element count; KVAppend slots.
  REQUIRE_THROWS_WITH(infer_result_types(top::ReshapeOp{{kMaxDim, kMaxDim}}, {x}),
                      Contains("2^48 elements"));
  const TensorType hist({1, kI64Max, 1, 4}, DType::f32), rows({1, 1, 1, 4}, DType::f32);
  REQUIRE_THROWS_AS(infer_result_types(tpu::KVAppendOp{}, {hist, rows, pos}), Error);
}

TEST_CASE("the parser refuses types beyond the limits at their line:col", "[limits]") {
  const std::string text = "module @m {\n"
                           "  func @f(%x: tensor<281474976710657xf32>) -> () {\n"
                           "    \"builtin.Return\"() : () -> ()\n  }\n}\n";
  try {
    (void)ir::text::parse_module(text, "t.tir");
    FAIL("parsed");
  } catch (const DiagnosticError& e) {
    CHECK(e.location().line == 2);
    CHECK(e.location().col == 22);
    CHECK_THAT(e.message(), Contains("outside [0, 2^48]"));
  }
  REQUIRE_THROWS_WITH(
      ir::text::parse_module("module @m {\n weight @w : tensor<65536x65536x65537xf32>\n}", "t.tir"),
      Contains("t.tir:2:21: more than 2^48 elements"));
  // Line numbers of a piece of a larger file start where the piece does.
  REQUIRE_THROWS_WITH(ir::text::parse_module("\n\n  garbage", "big.tir", 100),
                      Contains("big.tir:102:3"));
}

TEST_CASE("the verifier refuses C++-built types beyond the limits", "[limits]") {
  Module m("m");
  Function& f = m.add_function("f");
  f.add_argument("x", TensorType({kI64Max, 4}, DType::f32));
  Builder b(m, f);
  b.ret({});
  m.add_weight(Weight{"w", TensorType({-3}, DType::f32), {}});
  const auto errs = verify_module(m);
  REQUIRE(errs.size() == 2);
  CHECK_THAT(errs[0].message(), Contains("argument #0 of @f"));
  CHECK_THAT(errs[1].message(), Contains("weight @w"));
}

TEST_CASE("verifying a Reshape and a Permute of rank 50000 is linear", "[limits]") {
  const std::size_t rank = 50000;
  std::string dims, order, shape;
  for (std::size_t i = 0; i < rank; ++i) {
    dims += "1x";
    order += (i ? ", " : "") + std::to_string(rank - 1 - i);
    shape += i ? ", 1" : "1";
  }
  const std::string t = "tensor<" + dims + "f32>";
  const std::string text = "module @m {\n  func @f(%x: " + t + ") -> (" + t + ") {\n" +
                           "    %0 = \"top.Permute\"(%x) {order = [" + order + "]} : (" + t +
                           ") -> " + t + "\n    %1 = \"top.Reshape\"(%0) {shape = [" + shape +
                           "]} : (" + t + ") -> " + t + "\n    \"builtin.Return\"(%1) : (" + t +
                           ") -> ()\n  }\n}\n";
  const auto t0 = std::chrono::steady_clock::now();
  Module m = ir::text::parse_module(text, "wide.tir");
  CHECK(verify_module(m).empty());
  const std::string printed = ir::text::print_module(m);
  // Failing ops of the same rank: the message is built once, not once per dimension.
  const TensorType ones(std::vector<std::int64_t>(rank, 1), DType::f32);
  REQUIRE_THROWS_AS(infer_result_types(top::ReshapeOp{std::vector<std::int64_t>(rank, 2)}, {ones}),
                    Error);
  REQUIRE_THROWS_AS(infer_result_types(top::PermuteOp{std::vector<std::int64_t>(rank, 0)}, {ones}),
                    Error);
  REQUIRE_THROWS_AS(infer_result_types(top::SliceOp{std::vector<std::int64_t>(rank, 1),
                                                    std::vector<std::int64_t>(rank, 1)},
                                       {ones}),
                    Error);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Linear work takes milliseconds (about a second under the sanitizers); the per-dimension
  // messages this replaces took minutes at this rank.
  CHECK(secs < 20);
  CHECK(printed.size() > 4 * rank);
}
