// Rewriter, patterns, the greedy driver and the canonicalization patterns.
#include <catch2/catch.hpp>

#include "tpullm/ir/ir.hpp"
#include "tpullm/rewrite/greedy_driver.hpp"
#include "tpullm/rewrite/op_equivalence.hpp"
#include "tpullm/rewrite/patterns/canonical.hpp"
#include "ir_test_util.hpp"

using namespace tpullm::ir;
using namespace tpullm::ir::top;     // NOLINT: the tests build Top functions
using namespace tpullm::ir::builtin; // NOLINT
using namespace tpullm::rewrite;

using tpullm_test::op_names;

namespace {

/// Every value's use list holds exactly the (op, slot) pairs that read it.
bool use_lists_exact(const Function& f) {
  std::map<const Value*, std::multiset<const Operation*>> expected;
  for (const auto& op : f.ops())
    for (auto* v : op->operands())
      expected[v].insert(op.get());
  auto check = [&](const Value* v) {
    std::multiset<const Operation*> have(v->users().begin(), v->users().end());
    return have == expected[v];
  };
  for (std::size_t i = 0; i < f.num_arguments(); ++i)
    if (!check(f.argument(i)))
      return false;
  for (const auto& op : f.ops())
    for (std::size_t r = 0; r < op->num_results(); ++r)
      if (!check(op->result(r)))
        return false;
  return true;
}

/// x [2, 8] -> silu -> return.
struct Small {
  Module m{"m"};
  Function* f = &m.add_function("f");
  Builder b{m, *f};
  Value* x = f->add_argument("x", TensorType({2, 8}, DType::f32));
};

/// Turns every top.SiLU into top.Softmax (a pattern with a benefit).
struct SiluToSoftmax : OpPattern<SiLUOp> {
  explicit SiluToSoftmax(int benefit) : OpPattern("silu-to-softmax", benefit) {}
  bool rewrite_op(Operation* op, const SiLUOp&, Rewriter& rw) const override {
    rw.replace_op_with_new(op, SoftmaxOp{-1}, {op->operand(0)});
    return true;
  }
};
/// Turns every top.SiLU into a top.Cast to f32 (competes with SiluToSoftmax).
struct SiluToCast : OpPattern<SiLUOp> {
  explicit SiluToCast(int benefit) : OpPattern("silu-to-cast", benefit) {}
  bool rewrite_op(Operation* op, const SiLUOp&, Rewriter& rw) const override {
    rw.replace_op_with_new(op, CastOp{DType::f32}, {op->operand(0)});
    return true;
  }
};
/// Softmax <-> SiLU forever: the driver must stop on its bounds.
struct SoftmaxToSilu : OpPattern<SoftmaxOp> {
  SoftmaxToSilu() : OpPattern("softmax-to-silu") {}
  bool rewrite_op(Operation* op, const SoftmaxOp&, Rewriter& rw) const override {
    rw.replace_op_with_new(op, SiLUOp{}, {op->operand(0)});
    return true;
  }
};
/// Flips the axis of the Softmax that a Return reads: one change per sweep, forever.
struct ToggleSoftmaxAxis : OpPattern<ReturnOp> {
  ToggleSoftmaxAxis() : OpPattern("toggle-softmax-axis") {}
  bool rewrite_op(Operation* op, const ReturnOp&, Rewriter& rw) const override {
    Operation* def = op->operand(0)->defining_op();
    if (!def || !def->is<SoftmaxOp>())
      return false;
    rw.modify_attrs<SoftmaxOp>(def, [](SoftmaxOp& s) { s.axis = s.axis == -1 ? 1 : -1; });
    return true;
  }
};
/// Claims success without changing anything.
struct Liar : Pattern {
  Liar() : Pattern("liar") {}
  bool match_and_rewrite(Operation*, Rewriter&) const override { return true; }
};

} // namespace

TEST_CASE("rewriter creates ops before the insertion point with inferred types", "[rewrite]") {
  Small s;
  Value* y = s.b.create(SiLUOp{}, {s.x});
  Operation* ret = s.b.ret({y});
  Rewriter rw(s.m);
  rw.set_insertion_point(ret);
  Value* z = rw.create(ReshapeOp{{16}}, {y});
  CHECK(z->type() == TensorType({16}, DType::f32));
  CHECK(op_names(*s.f) == std::vector<std::string>{"top.SiLU", "top.Reshape", "builtin.Return"});
  CHECK(z->defining_op()->loc().str() == ret->loc().str());
  CHECK(rw.num_changes() == 1);
  REQUIRE_THROWS_WITH(
      rw.create(ReshapeOp{{15}}, {y}),
      Catch::Contains("'top.Reshape' reshape [2, 8] -> [15] changes the element count"));
  CHECK(use_lists_exact(*s.f));
}

TEST_CASE("rewriter replace/erase keep use lists exact", "[rewrite]") {
  Small s;
  Value* a = s.b.create(SiLUOp{}, {s.x});
  Value* c = s.b.create(AddOp{}, {a, a});
  s.b.ret({c});
  Rewriter rw(s.m);
  rw.replace_all_uses_with(a, s.x);
  CHECK(s.x->users().size() == 3); // SiLU + Add twice
  CHECK_FALSE(a->has_uses());
  CHECK(use_lists_exact(*s.f));
  rw.erase_op(a->defining_op());
  CHECK(op_names(*s.f) == std::vector<std::string>{"top.Add", "builtin.Return"});
  CHECK(use_lists_exact(*s.f));
  CHECK(verify_module(s.m).empty());
  CHECK_THROWS_WITH(rw.erase_op(c->defining_op()), Catch::Contains("still used"));
  Value* other = s.f->add_argument("w", TensorType({3}, DType::f32));
  CHECK_THROWS_WITH(rw.replace_all_uses_with(c, other), Catch::Contains("of type tensor<3xf32>"));
}

TEST_CASE("rewriter modifies ops in place and re-checks their types", "[rewrite]") {
  Small s;
  Operation* p = s.b.create_op(PermuteOp{{1, 0}}, {s.x});
  Value* r = s.b.create(ReshapeOp{{16}}, {p->result(0)});
  s.b.ret({r});
  Rewriter rw(s.m);
  rw.modify_attrs<ReshapeOp>(r->defining_op(), [](ReshapeOp& o) { o.shape = {16}; });
  CHECK(rw.num_changes() == 1);
  // A change that alters the result type is a bug in the pattern, not a silent type change.
  CHECK_THROWS_WITH(rw.modify_attrs<ReshapeOp>(r->defining_op(),
                                               [](ReshapeOp& o) {
                                                 o.shape = {4, 4};
                                               }),
                    Catch::Contains("changed its result types"));
  r->defining_op()->as<ReshapeOp>()->shape = {16};
  CHECK_THROWS_WITH(rw.modify_attrs<SiLUOp>(p, [](SiLUOp&) {}),
                    Catch::Contains("is not a top.SiLU"));
  rw.set_operand(r->defining_op(), 0, s.x); // [2, 8] -> [16] is as good as [8, 2] -> [16]
  CHECK_FALSE(p->result(0)->has_uses());
  CHECK(use_lists_exact(*s.f));
}

TEST_CASE("rewriter erases weights only when unread", "[rewrite]") {
  Small s;
  Value* w = s.b.weight(Weight{"w", TensorType({8}, DType::f32), {}});
  s.b.ret({s.b.create(AddOp{}, {s.x, w})});
  s.m.add_weight(Weight{"spare", TensorType({8}, DType::f32), {}});
  Rewriter rw(s.m);
  CHECK_THROWS_WITH(rw.erase_weight("w"), Catch::Contains("still read in @f"));
  rw.erase_weight("spare");
  CHECK(s.m.find_weight("spare") == nullptr);
  CHECK_THROWS_WITH(rw.erase_weight("nope"), Catch::Contains("unknown weight @nope"));
}

TEST_CASE("pattern sets order candidates by benefit, ties by insertion", "[rewrite]") {
  PatternSet set;
  set.add<SiluToCast>(1).add<SiluToSoftmax>(5).add<Liar>();
  auto c = set.for_kind(OpKind::top_SiLU);
  REQUIRE(c.size() == 3);
  CHECK(c[0]->name() == "silu-to-softmax");
  CHECK(c[1]->name() == "silu-to-cast");
  CHECK(c[2]->name() == "liar");
  CHECK(set.for_kind(OpKind::top_Add).size() == 1); // only the any-op pattern
}

TEST_CASE("greedy driver applies the highest-benefit pattern and converges", "[rewrite]") {
  for (int softmax_benefit : {1, 3}) {
    Small s;
    Value* y = s.b.create(SiLUOp{}, {s.x});
    s.b.ret({s.b.create(SiLUOp{}, {y})});
    PatternSet set;
    set.add<SiluToCast>(2).add<SiluToSoftmax>(softmax_benefit);
    auto r = apply_patterns_greedily(s.m, set);
    CHECK(r.converged);
    CHECK(r.rewrites == 2);
    CHECK(r.iterations == 2); // the second sweep confirms the fixpoint
    const std::string winner = softmax_benefit > 2 ? "top.Softmax" : "top.Cast";
    CHECK(op_names(*s.f) == std::vector<std::string>{winner, winner, "builtin.Return"});
    CHECK(r.applied.size() == 1);
    CHECK(verify_module(s.m).empty());
    CHECK(use_lists_exact(*s.f));
  }
}

TEST_CASE("greedy driver erases dead ops but never Return", "[rewrite]") {
  Small s;
  Value* a = s.b.create(SiLUOp{}, {s.x});
  Value* b2 = s.b.create(SoftmaxOp{-1}, {a}); // dead chain: a -> b2
  (void)b2;
  s.b.create_op(TopKOp{2, -1}, {s.x}); // two unused results
  s.b.ret({s.x});
  auto r = apply_patterns_greedily(s.m, PatternSet{});
  CHECK(r.converged);
  CHECK(r.erased_dead == 3);
  CHECK(op_names(*s.f) == std::vector<std::string>{"builtin.Return"});
  GreedyConfig keep;
  keep.erase_dead_ops = false;
  Small t;
  t.b.create(SiLUOp{}, {t.x});
  t.b.ret({t.x});
  CHECK(apply_patterns_greedily(t.m, PatternSet{}, keep).erased_dead == 0);
  CHECK(t.f->ops().size() == 2);
}

TEST_CASE("greedy driver stops on its bounds and says it did not converge", "[rewrite]") {
  Small s;
  s.b.ret({s.b.create(SiLUOp{}, {s.x})});
  PatternSet set;
  set.add<SiluToSoftmax>(1).add<SoftmaxToSilu>();
  GreedyConfig cfg;
  cfg.max_rewrites = 7;
  auto r = apply_patterns_greedily(s.m, set, cfg);
  CHECK_FALSE(r.converged);
  CHECK(r.rewrites == 7);
  CHECK(verify_module(s.m).empty()); // stopping early still leaves valid IR
  Small t;
  t.b.ret({t.b.create(SoftmaxOp{-1}, {t.x})});
  PatternSet toggle;
  toggle.add<ToggleSoftmaxAxis>();
  cfg = GreedyConfig{};
  cfg.max_iterations = 3;
  r = apply_patterns_greedily(t.m, toggle, cfg);
  CHECK_FALSE(r.converged);
  CHECK(r.iterations == 3);
  CHECK(r.rewrites == 3);
  CHECK(t.f->ops().front()->as<SoftmaxOp>()->axis == 1);
  cfg.max_iterations = 0;
  CHECK_THROWS(GreedyDriver(s.m, set, cfg));
}

TEST_CASE("greedy driver rejects a pattern that breaks the success contract", "[rewrite]") {
  Small s;
  s.b.ret({s.b.create(SiLUOp{}, {s.x})});
  PatternSet set;
  set.add<Liar>();
  CHECK_THROWS_WITH(apply_patterns_greedily(s.m, set),
                    Catch::Contains("'liar' reported success without changing the IR"));
}

TEST_CASE("canonicalization patterns fold no-op shape and dtype ops", "[rewrite][canonicalize]") {
  Small s;
  Value* v = s.b.create(ReshapeOp{{2, 8}}, {s.x});        // same shape
  v = s.b.create(ReshapeOp{{16}}, {v});                   // reshape of reshape ...
  v = s.b.create(ReshapeOp{{4, 4}}, {v});                 // ... -> one reshape
  v = s.b.create(PermuteOp{{0, 1}}, {v});                 // identity
  v = s.b.create(PermuteOp{{1, 0}}, {v});                 // permute of permute ...
  v = s.b.create(PermuteOp{{1, 0}}, {v});                 // ... -> identity -> gone
  v = s.b.create(SliceOp{{0, 0}, {4, 4}}, {v});           // whole tensor
  v = s.b.create(ConcatOp{0}, {v});                       // single operand
  v = s.b.create(CastOp{DType::f32}, {v});                // same dtype
  Value* kept = s.b.create(SliceOp{{1, 0}, {3, 4}}, {v}); // a real slice stays
  s.b.ret({kept});
  auto r = apply_patterns_greedily(s.m, patterns::canonicalization_patterns());
  CHECK(r.converged);
  CHECK(op_names(*s.f) == std::vector<std::string>{"top.Reshape", "top.Slice", "builtin.Return"});
  CHECK(s.f->ops().front()->operand(0) == s.x);
  CHECK(s.f->ops().front()->as<ReshapeOp>()->shape == std::vector<std::int64_t>{4, 4});
  for (const char* name :
       {"reshape-to-same-shape", "reshape-of-reshape", "permute-identity", "permute-of-permute",
        "slice-whole", "concat-single", "cast-to-same-type"})
    CHECK(r.applied.count(name) == 1);
  CHECK(verify_module(s.m).empty());
  CHECK(use_lists_exact(*s.f));
}

TEST_CASE("permute of permute composes the orders", "[rewrite][canonicalize]") {
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  Value* x = f.add_argument("x", TensorType({2, 3, 4}, DType::f32));
  Value* p = b.create(PermuteOp{{2, 0, 1}}, {x}); // [4, 2, 3]
  Value* q = b.create(PermuteOp{{0, 2, 1}}, {p}); // [4, 3, 2]
  b.ret({q});
  apply_patterns_greedily(m, patterns::canonicalization_patterns());
  REQUIRE(f.ops().size() == 2);
  const auto* only = f.ops().front()->as<PermuteOp>();
  REQUIRE(only);
  CHECK(only->order == std::vector<std::int64_t>{2, 1, 0});
  CHECK(f.ops().front()->result(0)->type().shape == std::vector<std::int64_t>{4, 3, 2});
}

TEST_CASE("canonicalization leaves real work alone", "[rewrite][canonicalize]") {
  Small s;
  Value* v = s.b.create(ReshapeOp{{16}}, {s.x});
  Value* w = s.b.create(PermuteOp{{1, 0}}, {s.x});
  Value* c = s.b.create(CastOp{DType::bf16}, {s.x});
  Value* k = s.b.create(ConcatOp{0}, {s.x, s.x});
  s.b.ret({v, w, c, k});
  auto r = apply_patterns_greedily(s.m, patterns::canonicalization_patterns());
  CHECK(r.converged);
  CHECK(r.rewrites == 0);
  CHECK(r.iterations == 1);
  CHECK(s.f->ops().size() == 5);
}

TEST_CASE("attribute equality goes member by member, floats by bits", "[rewrite][cse]") {
  CHECK(attributes_equal(OpVariant(RMSNormOp{1e-6f}), OpVariant(RMSNormOp{1e-6f})));
  CHECK_FALSE(attributes_equal(OpVariant(RMSNormOp{1e-6f}), OpVariant(RMSNormOp{1e-5f})));
  CHECK_FALSE(attributes_equal(OpVariant(RMSNormOp{0.0f}), OpVariant(RMSNormOp{-0.0f})));
  CHECK_FALSE(attributes_equal(OpVariant(SoftmaxOp{-1}), OpVariant(ArgMaxOp{-1})));
  FAttentionOp a{0.125f, 14, 2, 64, 0, true, std::nullopt};
  FAttentionOp b = a;
  CHECK(attributes_equal(a, b));
  CHECK(attributes_hash(OpVariant(a)) == attributes_hash(OpVariant(b)));
  b.causal = false;
  CHECK_FALSE(attributes_equal(a, b));
  b = a;
  b.history = 1;
  CHECK_FALSE(attributes_equal(a, b));
  CHECK_FALSE(
      attributes_equal(OpVariant(WeightOp{SymbolRef{"a"}}), OpVariant(WeightOp{SymbolRef{"b"}})));
  CHECK_FALSE(attributes_equal(OpVariant(PermuteOp{{0, 1}}), OpVariant(PermuteOp{{1, 0}})));
  CHECK(attributes_equal(OpVariant(AddOp{}), OpVariant(AddOp{})));
}
