// Op policies (ir/op_policy.hpp): every Tpu op declares one, its facts are consistent with the
// op's arity, and the one core-split policy (tiling/core_split_plan.hpp) follows its SplitRule.
#include <catch2/catch.hpp>

#include <string_view>
#include <vector>

#include "tpullm/ir/ir.hpp"
#include "tpullm/ir/text/parser.hpp"
#include "tpullm/memory/plan_memory.hpp"
#include "tpullm/rewrite/side_effects.hpp"
#include "tpullm/tiling/core_split_plan.hpp"

using namespace tpullm;
using namespace tpullm::ir;

namespace {

/// An op struct shaped like a Tpu op but without a policy: op_kind.hpp's check refuses such a
/// struct when it is listed as a tpu op in ops.def.
struct NoPolicyOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
};
static_assert(!DeclaresPolicy<NoPolicyOp>);
static_assert(DeclaresPolicy<tpu::MatMulOp>);

/// Every operand index OpPolicy may name, for the Tpu op of variant index I.
template <std::size_t I>
void check_policy_fits_arity() {
  using T = std::variant_alternative_t<I, OpVariant>;
  if constexpr (dialect_of<T>() == Dialect::tpu) {
    constexpr OpPolicy p = T::policy;
    constexpr Arity a = T::operands;
    const int max_operands = a.max < 0 ? 31 : a.max;
    INFO(op_name(static_cast<OpKind>(I)));
    // Row operands exist, vector operands are row operands, and a non-row-local op names none.
    CHECK((p.row_operands >> max_operands) == 0);
    CHECK((p.vector_operands & ~p.row_operands) == 0);
    CHECK((p.row_local || p.row_operands == 0));
    CHECK((p.before_group >> max_operands) == 0);
    CHECK((p.before_group == 0 || p.row_local));
    CHECK(p.head_operand < max_operands);
    CHECK(p.kv_cache_operand < max_operands);
    CHECK(p.positions < max_operands);
    CHECK(p.split_operand < std::max(max_operands, 1));
    // A view produces no bytes of its own, so it cannot also overwrite its operand.
    CHECK(!(p.view && p.in_place));
  }
}

TensorType f32(std::vector<std::int64_t> s) {
  return TensorType(std::move(s), DType::f32);
}

SplitPlan split_of(const OpVariant& op, const std::vector<TensorType>& operands,
                   std::int64_t cores) {
  return tiling::core_split(
      op, operands.size(), [&](std::size_t i) -> const TensorType& { return operands.at(i); },
      cores);
}

} // namespace

TEST_CASE("every Tpu op's policy fits its arity", "[policy]") {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (check_policy_fits_arity<I>(), ...);
  }
  (std::make_index_sequence<kNumOpKinds>{});
}

TEST_CASE("builtin and Top ops have the empty policy", "[policy]") {
  for (std::size_t k = 0; k < kNumOpKinds; ++k) {
    if (dialect_of(static_cast<OpKind>(k)) == Dialect::tpu)
      continue;
    const OpPolicy& p = policy_of(static_cast<OpKind>(k));
    INFO(op_name(static_cast<OpKind>(k)));
    CHECK_FALSE(p.row_local);
    CHECK(p.split == SplitRule::none);
    CHECK(p.effect == MemoryEffect::none);
  }
}

TEST_CASE("side effects come from the policy's memory effect", "[policy]") {
  CHECK(rewrite::op_has_side_effects(OpKind::tpu_KVStore));
  CHECK(rewrite::op_has_side_effects(OpKind::builtin_Return));
  CHECK_FALSE(rewrite::op_has_side_effects(OpKind::tpu_KVAppend));
  CHECK_FALSE(rewrite::op_has_side_effects(OpKind::tpu_MatMul));
  CHECK_FALSE(rewrite::op_has_side_effects(OpKind::top_Concat));
}

TEST_CASE("the core split follows each op's SplitRule", "[policy][split]") {
  const TensorType w({64, 64}, DType::f32, std::nullopt, Layout::panels);
  SECTION("projections split columns at decode size and rows at prefill size") {
    const OpVariant mm = tpu::MatMulOp{};
    CHECK(split_of(mm, {f32({1, 1, 64}), w}, 4) == SplitPlan{SliceDim::cols, 4});
    CHECK(split_of(mm, {f32({1, 4, 64}), w}, 4) == SplitPlan{SliceDim::cols, 4});
    CHECK(split_of(mm, {f32({1, 5, 64}), w}, 4) == SplitPlan{SliceDim::rows, 4});
    CHECK(split_of(mm, {f32({1, 5, 64}), w}, 1) == SplitPlan{});
  }
  SECTION("decode attention splits heads when every core gets one, else rows") {
    tpu::FAttentionOp a;
    a.kv_heads = 4;
    const std::vector<TensorType> ops = {f32({1, 1, 8, 16}), f32({1, 9, 4, 16}), f32({1, 9, 4, 16}),
                                         TensorType({1, 1}, DType::i32)};
    CHECK(split_of(a, ops, 4) == SplitPlan{SliceDim::heads, 4});
    CHECK(split_of(a, ops, 8) == SplitPlan{SliceDim::rows, 8});
  }
  SECTION("elementwise ops split rows only with 64 rows per core") {
    const OpVariant add = tpu::AddOp{};
    CHECK(split_of(add, {f32({1, 256, 8}), f32({8})}, 4) == SplitPlan{SliceDim::rows, 4});
    CHECK(split_of(add, {f32({1, 255, 8}), f32({8})}, 4) == SplitPlan{});
  }
  SECTION("Embedding counts the ids' matrix rows, not the table's ([1, L] ids: one core)") {
    const OpVariant e = tpu::EmbeddingOp{};
    const TensorType table({4096, 8}, DType::f32);
    CHECK(split_of(e, {table, TensorType({1, 2}, DType::i32)}, 2) == SplitPlan{});
    CHECK(split_of(e, {table, TensorType({128, 1}, DType::i32)}, 2) ==
          SplitPlan{SliceDim::rows, 2});
  }
  SECTION("ops without a split rule run on one core") {
    CHECK(split_of(tpu::KVStoreOp{}, {f32({1, 512, 2, 16}), TensorType({1, 512}, DType::i32)}, 4) ==
          SplitPlan{});
  }
}

TEST_CASE("exactly the ops whose policy touches a KV cache name one", "[policy][kv]") {
  std::vector<std::string_view> touching;
  for (std::size_t k = 0; k < kNumOpKinds; ++k) {
    const auto kind = static_cast<OpKind>(k);
    const OpPolicy& p = policy_of(kind);
    const bool touches = p.effect == MemoryEffect::writes_kv || p.kv_cache_operand >= 0;
    INFO(op_name(kind));
    CHECK((kv_cache_of(make_op(kind)) != nullptr) == touches);
    if (touches)
      touching.push_back(op_name(kind));
  }
  CHECK(touching == std::vector<std::string_view>{"tpu.KVStore", "tpu.KVAppend"});
}

TEST_CASE("the KV capacity comes from the ops whose policy touches the cache", "[policy][kv]") {
  // Layer 1's decode block over 8 history slots: a store of one new row of 2 heads x 16 f32
  // (128 bytes) and the append that views 9 slots; the MatMul is no KV op.
  const Module m = text::parse_module(R"(module @m {
  weight @w : tensor<32x32xf32, panels>
  func @f(%x: tensor<1x1x32xf32>, %pos: tensor<1x1xi32>, %hk: tensor<1x8x2x16xf32>) -> (tensor<1x9x2x16xf32>) attributes {stage = decode, layer = 1} {
    %w = "builtin.Weight"() {name = @w} : () -> tensor<32x32xf32, panels>
    %k = "tpu.MatMul"(%x, %w) : (tensor<1x1x32xf32>, tensor<32x32xf32, panels>) -> tensor<1x1x32xf32>
    %k4 = "tpu.Reshape"(%k) {shape = [1, 1, 2, 16]} : (tensor<1x1x32xf32>) -> tensor<1x1x2x16xf32>
    %s = "tpu.KVStore"(%k4, %pos) {layer = 1 : i64, kv = key} : (tensor<1x1x2x16xf32>, tensor<1x1xi32>) -> tensor<1x1x2x16xf32>
    %a = "tpu.KVAppend"(%hk, %s, %pos) {layer = 1 : i64, kv = key} : (tensor<1x8x2x16xf32>, tensor<1x1x2x16xf32>, tensor<1x1xi32>) -> tensor<1x9x2x16xf32>
    "builtin.Return"(%a) : (tensor<1x9x2x16xf32>) -> ()
  }
})");
  const memory::KvNeeds need = memory::kv_needs(m);
  CHECK(need.capacity == 9);
  CHECK(need.row == 128);
  // Widening: an earlier module's larger capacity stays; a disagreeing row size is refused.
  CHECK(memory::kv_needs(m, {16, 128}).capacity == 16);
  CHECK_THROWS_AS(memory::kv_needs(m, {16, 64}), Error);
}
