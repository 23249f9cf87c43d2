// IR core: builder, verifier, printer/parser round trip, graph utilities.
#include <catch2/catch.hpp>

#include "tpullm/ir/ir.hpp"
#include "ir_test_util.hpp"

using namespace tpullm::ir;
using namespace tpullm::ir::top;     // NOLINT: the tests build Top functions
using namespace tpullm::ir::builtin; // NOLINT
using tpullm::DiagnosticError;

using tpullm_test::decl;

namespace {

/// A small prefill block as in the paper's Listing 1 (H=64, 4 q heads, 2 kv heads, d=16).
Module make_block(std::int64_t L = 8) {
  const std::int64_t H = 64, QH = 4, KVH = 2, D = 16, I = 128, SEQ = 32;
  Module m("block_0");
  Function& f = m.add_function("block_0");
  Builder b(m, f);
  Value* x = f.add_argument("input_states", TensorType({1, L, H}, DType::f32));
  Value* pos = f.add_argument("position_ids", TensorType({1, L}, DType::i32));
  Value* n = b.create(RMSNormOp{1e-6f}, {x, b.weight(decl("l0.attn_norm", {H}))});
  Value* q = b.create(MatMulOp{true}, {n, b.weight(decl("l0.q", {QH * D, H}, DType::bf16))});
  Value* k = b.create(MatMulOp{true}, {n, b.weight(decl("l0.k", {KVH * D, H}, DType::bf16))});
  Value* v = b.create(MatMulOp{true}, {n, b.weight(decl("l0.v", {KVH * D, H}, DType::bf16))});
  Value* cos = b.create(GatherOp{0}, {b.weight(decl("rope.cos", {SEQ, D / 2})), pos});
  Value* sin = b.create(GatherOp{0}, {b.weight(decl("rope.sin", {SEQ, D / 2})), pos});
  q = b.create(ReshapeOp{{1, L, QH, D}}, {q});
  k = b.create(ReshapeOp{{1, L, KVH, D}}, {k});
  v = b.create(ReshapeOp{{1, L, KVH, D}}, {v});
  q = b.create(RopeOp{RopeMode::halves}, {q, cos, sin});
  k = b.create(RopeOp{RopeMode::halves}, {k, cos, sin});
  Value* attn = b.create(FAttentionOp{0.25f, QH, KVH, D, 0, true, std::nullopt}, {q, k, v, pos});
  Value* o = b.create(MatMulOp{true}, {attn, b.weight(decl("l0.o", {H, QH * D}))});
  Value* h = b.create(AddOp{}, {x, o});
  Value* n2 = b.create(RMSNormOp{1e-6f}, {h, b.weight(decl("l0.mlp_norm", {H}))});
  Value* mlp = b.create(MLPOp{Activation::silu, true},
                        {n2, b.weight(decl("l0.gate", {I, H})), b.weight(decl("l0.up", {I, H})),
                         b.weight(decl("l0.down", {H, I}))});
  Value* out = b.create(AddOp{}, {h, mlp});
  b.ret({out, k, v});
  return m;
}

} // namespace

TEST_CASE("builder infers types and the block verifies", "[ir]") {
  Module m = make_block();
  REQUIRE(verify_module(m).empty());
  const Function& f = *m.functions().front();
  REQUIRE(f.result_types().size() == 3);
  CHECK(f.result_types()[0] == TensorType({1, 8, 64}, DType::f32));
  CHECK(f.result_types()[1] == TensorType({1, 8, 2, 16}, DType::f32));
}

TEST_CASE("print(parse(print(m))) == print(m) for the block", "[ir][text]") {
  Module m = make_block();
  const std::string once = tpullm::ir::text::print_module(m);
  Module again = tpullm::ir::text::parse_module(once, "block.tir");
  REQUIRE(verify_module(again).empty());
  CHECK(tpullm::ir::text::print_module(again) == once);
  CHECK(once.find("\"top.RMSNorm\"(%input_states, %0) {eps = 1e-06 : f32}") != std::string::npos);
}

TEST_CASE("builder rejects ill-typed ops with the op name and reason", "[ir]") {
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  b.set_loc(tpullm::Location{"layer0.q_proj"});
  Value* x = f.add_argument("x", TensorType({2, 8}, DType::f32));
  Value* w = b.weight(decl("w", {7, 3}));
  REQUIRE_THROWS_WITH(b.create(MatMulOp{false}, {x, w}),
                      Catch::Contains("layer0.q_proj: 'top.MatMul' contracting dims differ"));
  REQUIRE_THROWS_WITH(b.create(AddOp{}, {x}), Catch::Contains("expects 2 operands, got 1"));
}

TEST_CASE("verifier reports a result type that disagrees with inference", "[ir][verify]") {
  const char* src = R"(module @m {
  func @f(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>) {
    %0 = "top.SiLU"(%x) : (tensor<2x8xf32>) -> tensor<2x9xf32>
    "builtin.Return"(%0) : (tensor<2x9xf32>) -> ()
  }
}
)";
  Module m = tpullm::ir::text::parse_module(src, "t.tir");
  auto errs = verify_module(m);
  REQUIRE(errs.size() == 2);
  CHECK(std::string(errs[0].what()) ==
        "t.tir:3:10: 'top.SiLU' result #0 is declared tensor<2x9xf32> but the op produces "
        "tensor<2x8xf32>");
  CHECK(std::string(errs[1].what()).find("declares tensor<2x8xf32>") != std::string::npos);
}

TEST_CASE("parser errors carry file:line:col", "[ir][text]") {
  auto err = [](const char* src) {
    try {
      tpullm::ir::text::parse_module(src, "bad.tir");
    } catch (const DiagnosticError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(err("module @m {\n  func @f(%x: tensor<2xq32>) -> () {}\n}") ==
        "bad.tir:2:22: unknown element type 'q32' in tensor type");
  CHECK(err("module @m {\n  func @f() -> () {\n    \"top.Nope\"() : () -> ()\n  }\n}") ==
        "bad.tir:3:5: unknown op 'top.Nope'");
  CHECK(err("module @m {\n  func @f() -> () {\n    \"builtin.Return\"(%y) : () -> ()\n  }\n}") ==
        "bad.tir:3:22: use of undefined value %y");
  CHECK(err("module @m {") == "bad.tir:1:12: expected 'weight', 'func' or '}', got end of input");
  CHECK(err("module @m { func @f(%x: tensor<2xf32>) -> () { \"top.Softmax\"(%x) {axis = 1.5 : f32} "
            ": (tensor<2xf32>) -> tensor<2xf32> } }")
            .find("expected an integer") != std::string::npos);
}

TEST_CASE("dependency graph orders ops and answers reachability", "[ir][graph]") {
  Module m = make_block();
  const Function& f = *m.functions().front();
  DependencyGraph g(f);
  auto order = g.topological_order();
  REQUIRE(order.size() == f.ops().size());
  std::map<const Operation*, std::size_t> at;
  for (std::size_t i = 0; i < order.size(); ++i)
    at[order[i]] = i;
  for (auto* op : order)
    for (auto* v : op->operands())
      if (v->defining_op())
        CHECK(at[v->defining_op()] < at[op]);
  const Operation* first_norm = f.ops().front()->result(0)->users().front();
  CHECK(g.reaches(f.ops().front().get(), f.return_op()));
  CHECK_FALSE(g.reaches(f.return_op(), first_norm));
}
