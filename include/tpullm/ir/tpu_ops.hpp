#pragma once
/// Tpu ops (namespace ir::tpu): the Top semantics plus the target's decisions. Activations are
/// f32 row-major (accumulation in f32 everywhere); a weight operand's *type* carries its storage
/// decision (dtype, `panels` layout, quantization), so `tpu.MatMul` over
/// `tensor<896x4864xbf16, panels>` is the BF16 mode and over
/// `tensor<896x4864xu4, panels, quant<packed, group = 32, zero_point>>` is W4A16.
/// How and where an op runs (layer group, tiles, core split, buffers) is not part of the op
/// struct: see ir/plan.hpp and ir/buffer.hpp.
///
/// Op struct conventions as in top_ops.hpp, plus a required `static constexpr OpPolicy policy`
/// (ir/op_policy.hpp): row tiling, core split, view / in place, positions operand, memory
/// effects. op_kind.hpp refuses to compile a Tpu op without one. A Tpu op that computes what a
/// Top op computes derives from it: it holds the Top op's attributes and calls its infer() after
/// its own storage checks, so the two dialects share one shape rule.
/// Shapes: L = new tokens, S = history slots, H = hidden, d = head_dim, P = positions.

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpullm/ir/op_policy.hpp"
#include "tpullm/ir/top_ops.hpp"

namespace tpullm::ir {

/// Which cache of a layer a KV op addresses.
enum class KvKind : std::uint8_t { key, value };
template <>
struct EnumNames<KvKind> {
  static constexpr std::array<std::pair<KvKind, std::string_view>, 2> items = {
      {{KvKind::key, "key"}, {KvKind::value, "value"}}};
};

/// Where tpu.FAttention finds keys and values.
///   rows  : k/v [B, L, kv_heads, d] hold only the new tokens; key t has position pos[t]
///   cache : k/v come from tpu.KVAppend: slot j holds position j for j < pos[0] + L
enum class KvForm : std::uint8_t { rows, cache };
template <>
struct EnumNames<KvForm> {
  static constexpr std::array<std::pair<KvForm, std::string_view>, 2> items = {
      {{KvForm::rows, "rows"}, {KvForm::cache, "cache"}}};
};

/// How a W8A8 linear (`--mode int8`) quantizes its input activation to int8
/// (kernels/int8_linear.hpp ActQuant): `dynamic` computes a scale per row at run time;
/// `static` uses the op's calibrated per-tensor `act_scale` / `act_zero`.
enum class ActQuantKind : std::uint8_t { dynamic, static_tensor };
template <>
struct EnumNames<ActQuantKind> {
  static constexpr std::array<std::pair<ActQuantKind, std::string_view>, 2> items = {
      {{ActQuantKind::dynamic, "dynamic"}, {ActQuantKind::static_tensor, "static"}}};
};

namespace detail {
/// An f32 row-major activation.
inline void require_act(const TensorType& t, const char* what) {
  require(t.dtype == DType::f32 && !t.quant && t.layout == Layout::row_major,
          std::string(what) + " must be an f32 activation, got " + t.str());
}
/// A small float parameter stored row-major (norm gamma, bias, RoPE table, embedding table).
inline void require_param(const TensorType& t, const char* what) {
  require(is_float(t.dtype) && t.dtype != DType::f64 && !t.quant && t.layout == Layout::row_major,
          std::string(what) + " must be an f32/bf16/f16 row-major tensor, got " + t.str());
}
/// A packed linear weight [K, N]: f32/bf16/f16 panels, or i8 / i4 (symmetric) / u4 / u8 (with
/// zero points) panels with a `packed` QuantSpec. Returns {K, N}.
inline std::pair<std::int64_t, std::int64_t> require_packed(const TensorType& t, const char* what) {
  require(t.rank() == 2 && t.layout == Layout::panels,
          std::string(what) + " must be a packed [K, N] weight (layout panels), got " + t.str());
  if (t.quant) {
    const QuantSpec& q = *t.quant;
    require(q.format == QuantFormat::packed,
            std::string(what) + " must use the packed quantization format, got " + t.str());
    require((t.dtype == DType::i8 && !q.zero_point) || (t.dtype == DType::i4 && !q.zero_point) ||
                (t.dtype == DType::u4 && q.zero_point) || (t.dtype == DType::u8 && q.zero_point),
            std::string(what) + " must be i8 or i4 (symmetric) or u4 / u8 with zero points, got " +
                t.str());
    require(q.group_size > 0 && t.shape[0] % q.group_size == 0,
            std::string(what) + " group size must divide K = " + std::to_string(t.shape[0]) +
                ", got " + t.str());
  } else {
    require(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16,
            std::string(what) + " must be f32, bf16 or f16 panels or quantized, got " + t.str());
  }
  require(t.shape[0] > 0 && t.shape[1] > 0, std::string(what) + " must not be empty");
  return {t.shape[0], t.shape[1]};
}
/// An f32 or i32 row-major tensor (what the copy ops move).
inline void require_copyable(const TensorType& t, const char* what) {
  require(t.dtype == DType::f32 || t.dtype == DType::i32,
          std::string(what) + " must be f32 or i32, got " + t.str());
  require(t.layout == Layout::row_major && !t.quant,
          std::string(what) + " must be row-major, got " + t.str());
}
inline void require_positions(const TensorType& p, std::int64_t L, const char* what) {
  require(p.dtype == DType::i32 && !p.quant && p.shape == std::vector<std::int64_t>{1, L},
          std::string(what) + " must be [1, " + std::to_string(L) + "] i32, got " + p.str());
}
/// position_ids of a block op over B rows of L tokens: [B, L] i32, where B > 1 (a batched
/// decode: each row its own conversation) holds one token per row.
inline void require_batch_positions(const TensorType& p, std::int64_t B, std::int64_t L,
                                    const char* what) {
  require(B == 1 || L == 1, "a batch of " + std::to_string(B) +
                                " rows holds one token per row, got " + std::to_string(L));
  require(p.dtype == DType::i32 && !p.quant && p.shape == std::vector<std::int64_t>{B, L},
          std::string(what) + " must be [" + std::to_string(B) + ", " + std::to_string(L) +
              "] i32, got " + p.str());
}
/// The activation-quantization attributes of a W8A8 op: without `kind` none of scale / zero may
/// be set (the op reads f32 activations, whatever its weights); with it every
/// weight is i8 with one scale per output channel (group = K), `dynamic` takes no scale / zero,
/// `static` needs a finite scale > 0 and a zero point in [-128, 127] (absent: 0).
inline void require_act_quant(const std::optional<ActQuantKind>& kind,
                              const std::optional<float>& scale,
                              const std::optional<std::int64_t>& zero, const char* scale_name,
                              std::initializer_list<const TensorType*> weights) {
  if (!kind) {
    require(!scale && !zero, std::string(scale_name) + " needs act_quant");
    return;
  }
  for (const TensorType* w : weights)
    require(w->dtype == DType::i8 && w->quant && w->quant->group_size == w->shape[0] &&
                !w->quant->act_order,
            "act_quant needs i8 weights with one scale per output channel, got " + w->str());
  if (*kind == ActQuantKind::dynamic) {
    require(!scale && !zero, std::string("act_quant = dynamic takes no ") + scale_name);
    return;
  }
  require(scale && std::isfinite(*scale) && *scale > 0,
          std::string("act_quant = static needs a finite ") + scale_name + " > 0");
  require(!zero || (*zero >= -128 && *zero <= 127),
          std::string(scale_name) + "'s zero point must be in [-128, 127], got " +
              std::to_string(zero.value_or(0)));
}
} // namespace detail

namespace tpu {

/// Embedding lookup: ids [1, L] i32 -> [1, L, H] f32 from a table that is either [V, H]
/// f32/bf16/f16 row-major or a packed [K = H, N = V] weight of any packed format (a tied
/// checkpoint's lm_head weight, stored once: token v's row is column v).
struct EmbeddingOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({1}),
                                   .split = SplitRule::rows_if_large,
                                   .split_operand = 1};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    std::int64_t H = 0;
    if (in[0].layout == Layout::panels) {
      H = detail::require_packed(in[0], "table").first;
    } else {
      detail::require_param(in[0], "table");
      detail::require(in[0].rank() == 2, "table must be [V, H], got " + in[0].str());
      H = in[0].shape[1];
    }
    detail::require(in[1].dtype == DType::i32 && in[1].rank() == 2 && in[1].shape[0] == 1,
                    "ids must be [1, L] i32, got " + in[1].str());
    return {TensorType({1, in[1].shape[1], H}, DType::f32)};
  }
};

/// RMSNorm over the last axis: x [..., H] f32, gamma [H] -> [..., H] f32.
struct RMSNormOp : top::RMSNormOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({0}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true};
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "input");
    detail::require_param(in[1], "gamma");
    return top::RMSNormOp::infer(in); // the shape rule is Top's
  }
};

/// Residual add fused into the next RMSNorm: x, r [..., H] f32, gamma [H] ->
/// (h = x + r, y = rms_norm(h) * gamma), both [..., H] f32.
struct AddRMSNormOp {
  static constexpr Arity operands{3, 3};
  static constexpr int results = 2;
  static constexpr OpPolicy policy{
      .row_local = true, .row_operands = operand_set({0, 1}), .split = SplitRule::rows_if_large};
  float eps = 1e-6f;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("eps", s.eps);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "input");
    detail::require_act(in[1], "residual");
    detail::require(in[0].shape == in[1].shape,
                    "input and residual differ: " + in[0].str() + " vs " + in[1].str());
    detail::require_param(in[2], "gamma");
    detail::require(in[0].rank() >= 1 && in[2].shape == std::vector<std::int64_t>{in[0].dim(-1)},
                    "gamma must be [H], got " + in[2].str() + " for " + in[0].str());
    detail::require(eps >= 0, "eps must be >= 0");
    return {in[0], in[0]};
  }
};

/// Linear layer: x [..., K] f32, w packed [K, N], bias [N] f32 (optional) -> [..., N] f32.
struct MatMulOp {
  static constexpr Arity operands{2, 3};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{
      .row_local = true, .row_operands = operand_set({0}), .split = SplitRule::gemm};
  /// W8A8 (`--mode int8`): how lhs is quantized; absent for the float and weight-only modes.
  std::optional<ActQuantKind> act_quant;
  std::optional<float> act_scale;       ///< static: lhs ~= act_scale * (q - act_zero)
  std::optional<std::int64_t> act_zero; ///< static: zero point (absent: 0, symmetric)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("act_quant", s.act_quant);
    f("act_scale", s.act_scale);
    f("act_zero", s.act_zero);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "lhs");
    const auto [K, N] = detail::require_packed(in[1], "rhs");
    detail::require_act_quant(act_quant, act_scale, act_zero, "act_scale", {&in[1]});
    detail::require(in[0].rank() >= 1 && in[0].dim(-1) == K,
                    "lhs " + in[0].str() + " does not contract with rhs " + in[1].str());
    if (in.size() == 3)
      detail::require(in[2].dtype == DType::f32 && in[2].shape == std::vector<std::int64_t>{N},
                      "bias must be [" + std::to_string(N) + "] f32, got " + in[2].str());
    auto shape = in[0].shape;
    shape.back() = N;
    return {TensorType(shape, DType::f32)};
  }
};

/// Greedy lm_head: x [1, 1, H] f32, w packed [H, V] -> [1, 1, 1] i32, the index of the largest
/// of x · w (first on ties), without materializing the logits.
struct MatMulArgMaxOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.split = SplitRule::gemm};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "lhs");
    const auto [K, N] = detail::require_packed(in[1], "rhs");
    (void)N;
    detail::require(in[0].shape == std::vector<std::int64_t>{1, 1, K},
                    "lhs must be [1, 1, " + std::to_string(K) + "], got " + in[0].str());
    return {TensorType({1, 1, 1}, DType::i32)};
  }
};

/// Gated MLP: x [..., H] f32, gate/up packed [H, I], down packed [I, H] ->
/// down(act(x · gate) * (x · up)) [..., H] f32, the [rows, I] activation tiled to local memory.
struct MLPOp {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{
      .row_local = true, .row_operands = operand_set({0}), .split = SplitRule::gemm};
  Activation activation = Activation::silu;
  /// W8A8 (`--mode int8`): how the input (for gate / up) and the activation entering down are
  /// quantized; absent for the float and weight-only modes.
  std::optional<ActQuantKind> act_quant;
  std::optional<float> act_scale;            ///< static: the input's scale
  std::optional<std::int64_t> act_zero;      ///< static: the input's zero point (absent: 0)
  std::optional<float> down_act_scale;       ///< static: the down projection input's scale
  std::optional<std::int64_t> down_act_zero; ///< static: its zero point (absent: 0)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("activation", s.activation);
    f("act_quant", s.act_quant);
    f("act_scale", s.act_scale);
    f("act_zero", s.act_zero);
    f("down_act_scale", s.down_act_scale);
    f("down_act_zero", s.down_act_zero);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "input");
    const auto [gk, gn] = detail::require_packed(in[1], "gate");
    const auto [uk, un] = detail::require_packed(in[2], "up");
    const auto [dk, dn] = detail::require_packed(in[3], "down");
    detail::require_act_quant(act_quant, act_scale, act_zero, "act_scale", {&in[1], &in[2]});
    detail::require_act_quant(act_quant, down_act_scale, down_act_zero, "down_act_scale", {&in[3]});
    const std::int64_t H = in[0].rank() >= 1 ? in[0].dim(-1) : -1;
    detail::require(gk == H && uk == H && dn == H && gn == un && dk == gn,
                    "MLP weights do not match hidden " + std::to_string(H) + ": gate " +
                        in[1].str() + ", up " + in[2].str() + ", down " + in[3].str());
    return {in[0]};
  }
};

/// Routed mixture-of-experts MLP (top.MoE's semantics): x [..., H] f32, router packed [H, E]
/// f32 (routing decisions are made in f32 whatever the expert weights' mode), then per expert
/// gate/up packed [H, I] and down packed [I, H] -> [..., H] f32. Prefill groups the rows by
/// expert (each expert one GEMM over its rows); decode reads only the chosen experts. Not
/// row-local: its data-dependent grouping runs ungrouped, with a scratch sized for the worst
/// case (all rows * top_k pairs, kernels/moe.hpp).
struct MoEOp {
  static constexpr Arity operands{5, -1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.split = SplitRule::gemm};
  std::int64_t experts = 1;
  std::int64_t top_k = 1;
  bool renormalize = false;
  Activation activation = Activation::silu;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("experts", s.experts);
    f("top_k", s.top_k);
    f("renormalize", s.renormalize);
    f("activation", s.activation);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require(experts >= 1 && experts <= (std::int64_t{1} << 20), "experts = ", experts,
                    " must be in [1, 2^20]");
    detail::require(top_k >= 1 && top_k <= experts, "top_k = ", top_k,
                    " must be in [1, experts = ", experts, "]");
    detail::require(static_cast<std::int64_t>(in.size()) == 2 + 3 * experts, "MoE with ", experts,
                    " experts takes 2 + 3 * ", experts, " operands, got ", in.size());
    detail::require_act(in[0], "input");
    detail::require_min_rank(in[0], 1, "input");
    const std::int64_t H = in[0].dim(-1);
    const auto [rk, rn] = detail::require_packed(in[1], "router");
    detail::require(in[1].dtype == DType::f32 && !in[1].quant && rk == H && rn == experts,
                    "router must be packed [", H, ", ", experts, "] f32, got ", in[1]);
    const auto [gk0, gn0] = detail::require_packed(in[2], "expert gate");
    (void)gk0;
    for (std::int64_t e = 0; e < experts; ++e) {
      const auto& g = in[static_cast<std::size_t>(2 + 3 * e)];
      const auto& u = in[static_cast<std::size_t>(3 + 3 * e)];
      const auto& d = in[static_cast<std::size_t>(4 + 3 * e)];
      const auto [gk, gn] = detail::require_packed(g, "expert gate");
      const auto [uk, un] = detail::require_packed(u, "expert up");
      const auto [dk, dn] = detail::require_packed(d, "expert down");
      detail::require(gk == H && uk == H && dn == H && gn == gn0 && un == gn0 && dk == gn0,
                      "expert ", e, " weights do not match hidden ", H, " / intermediate ", gn0,
                      ": gate ", g, ", up ", u, ", down ", d);
    }
    return {in[0]};
  }
};

/// Rotary embedding with the table gather inside: x [B, L, heads, d] f32 (B > 1: a batched
/// decode, L = 1), cos/sin tables [P, d/2] f32 (row p = position p), position_ids [B, L] i32
/// -> [B, L, heads, d] f32.
struct RopeOp : top::RopeOp {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({0}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true,
                                   .positions = 3};
  std::vector<TensorType> infer(Types in) const {
    const auto &x = in[0], &c = in[1], &s = in[2];
    detail::require_act(x, "input");
    detail::require(x.rank() == 4 && x.shape[0] >= 1 && x.shape[3] % 2 == 0,
                    "input must be [B, L, heads, d] with d even, got " + x.str());
    for (const auto* t : {&c, &s})
      detail::require(t->dtype == DType::f32 && t->rank() == 2 && t->shape[1] == x.shape[3] / 2 &&
                          t->layout == Layout::row_major && !t->quant,
                      "cos/sin tables must be [P, " + std::to_string(x.shape[3] / 2) +
                          "] f32, got " + t->str());
    detail::require(c.shape == s.shape, "cos and sin tables differ: " + c.str() + " vs " + s.str());
    detail::require_batch_positions(in[3], x.shape[0], x.shape[1], "position_ids");
    return {x};
  }
};

/// The new tokens' keys or values stored into layer `layer`'s cache at their positions:
/// rows [1, L, kv_heads, d] f32, position_ids [1, L] i32 -> the same rows, now living in the
/// cache (slot = position; positions must be consecutive). Writes persistent state.
/// Batched decode: rows [B, 1, kv_heads, d], position_ids [B, 1]; row b goes into the cache of
/// the conversation the run gives row b, at its own position.
struct KVStoreOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({0}),
                                   .positions = 1,
                                   .effect = MemoryEffect::writes_kv};
  std::int64_t layer = 0;
  KvKind kv = KvKind::key;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("layer", s.layer);
    f("kv", s.kv);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "rows");
    detail::require(in[0].rank() == 4 && in[0].shape[0] >= 1,
                    "rows must be [B, L, kv_heads, d], got " + in[0].str());
    detail::require_batch_positions(in[1], in[0].shape[0], in[0].shape[1], "position_ids");
    detail::require(layer >= 0, "layer must be >= 0");
    return {in[0]};
  }
};

/// The paper's Concat of history and new keys as an address, not a copy: history
/// [1, S, kv_heads, d] (the cache), new rows [1, L, kv_heads, d] (a tpu.KVStore result of the
/// same layer and kind), position_ids [1, L] -> the cache as [1, S + L, kv_heads, d] in which
/// slot j holds position j for j < position_ids[0] + L (other slots are never read).
/// Batched decode: history [B, S, kv_heads, d], new rows [B, 1, kv_heads, d], position_ids
/// [B, 1] -> [B, S + 1, kv_heads, d], row b being the cache of row b's conversation.
struct KVAppendOp {
  static constexpr Arity operands{3, 3};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.view = true, .positions = 2};
  std::int64_t layer = 0;
  KvKind kv = KvKind::key;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("layer", s.layer);
    f("kv", s.kv);
  }
  std::vector<TensorType> infer(Types in) const {
    const auto &h = in[0], &n = in[1];
    detail::require_act(h, "history");
    detail::require_act(n, "new rows");
    detail::require(h.rank() == 4 && n.rank() == 4 && h.shape[0] >= 1 && n.shape[0] == h.shape[0] &&
                        h.shape[2] == n.shape[2] && h.shape[3] == n.shape[3],
                    "history and new rows must be [B, S, kv_heads, d] and [B, L, kv_heads, d], "
                    "got " +
                        h.str() + " and " + n.str());
    detail::require_batch_positions(in[2], n.shape[0], n.shape[1], "position_ids");
    detail::require(layer >= 0, "layer must be >= 0");
    const std::int64_t slots = detail::checked_add(h.shape[1], n.shape[1], "S + L cache slots");
    return {TensorType({h.shape[0], slots, h.shape[2], h.shape[3]}, DType::f32)};
  }
};

/// Causal attention with GQA, tiled flash attention with an online softmax:
/// q [1, L, q_heads, d], k/v as `kv_form` says, position_ids [1, L] -> [1, L, q_heads * d].
/// kv_form = rows: k/v [1, L, kv_heads, d] (history must be 0); kv_form = cache: k/v
/// [1, history + L, kv_heads, d] from tpu.KVAppend. Query i sees keys at positions <=
/// position_ids[i]. Positions must be consecutive. A batch B > 1 (batched decode, kv_form =
/// cache, L = 1): row b attends to its own conversation's cache up to its own position.
struct FAttentionOp : top::FAttentionOp {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({0}),
                                   .kv_before_group = true,
                                   .split = SplitRule::attention,
                                   .positions = 3};
  KvForm kv_form = KvForm::rows; ///< where keys and values come from (after Top's attributes)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    top::FAttentionOp::attrs(s, f);
    f("kv_form", s.kv_form);
  }
  std::vector<TensorType> infer(Types in) const {
    for (int i = 0; i < 3; ++i)
      detail::require_act(in[i], i == 0 ? "q" : i == 1 ? "k" : "v");
    detail::require(kv_form == KvForm::cache || history == 0,
                    "kv_form = rows holds no history (history must be 0)");
    auto r = top::FAttentionOp::infer(in); // the shape rule is Top's
    detail::require(in[3].dtype == DType::i32, "position_ids must be i32, got " + in[3].str());
    detail::require(in[0].shape[0] == 1 || (kv_form == KvForm::cache && in[0].shape[1] == 1),
                    "a batch above 1 needs kv_form = cache and one token per row, got " +
                        in[0].str());
    return r;
  }
};

/// Elementwise a + b: a [..., N] f32, b the same shape or [N] (broadcast over rows) -> a's type.
struct AddOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({0, 1}),
                                   .vector_operands = operand_set({1}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "lhs");
    detail::require_act(in[1], "rhs");
    detail::require(in[0].shape == in[1].shape ||
                        (in[1].rank() == 1 && in[0].rank() >= 1 && in[1].shape[0] == in[0].dim(-1)),
                    "rhs must have lhs's shape or be [N] with N its last dimension, got " +
                        in[0].str() + " and " + in[1].str());
    return {in[0]};
  }
};

/// Elementwise a * b with the broadcasting rules of tpu.Add.
struct MulOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({0, 1}),
                                   .vector_operands = operand_set({1}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const { return AddOp{}.infer(in); }
};

/// x * sigmoid(x), elementwise, f32.
struct SiLUOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({0}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "input");
    return top::SiLUOp{}.infer(in);
  }
};

/// Softmax along the last axis, f32.
struct SoftmaxOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({0}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "input");
    detail::require(in[0].rank() >= 1, "input must have rank >= 1");
    return top::SoftmaxOp{-1}.infer(in); // along the last axis
  }
};

/// Rounds f32 values to `dtype`'s precision (f32, bf16 or f16; round to nearest even) and keeps
/// them in f32: the Tpu form of a Top Cast whose activations stay f32.
struct RoundOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{
      .row_local = true, .row_operands = operand_set({0}), .in_place = true};
  DType dtype = DType::bf16;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("dtype", s.dtype);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "input");
    detail::require(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
                    "round target must be f32, bf16 or f16, got " + std::string(name(dtype)));
    return {in[0]};
  }
};

/// Same bytes, new static shape (a view).
struct ReshapeOp : top::ReshapeOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{
      .row_local = true, .row_operands = operand_set({0}), .view = true};
  std::vector<TensorType> infer(Types in) const {
    detail::require(in[0].layout == Layout::row_major && !in[0].quant,
                    "input must be a row-major tensor, got " + in[0].str());
    return top::ReshapeOp::infer(in);
  }
};

/// Axis permutation (a strided copy): result.shape[i] = x.shape[order[i]].
struct PermuteOp : top::PermuteOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{};
  std::vector<TensorType> infer(Types in) const {
    detail::require_copyable(in[0], "input");
    return top::PermuteOp::infer(in);
  }
};

/// Static box copy: result[i...] = x[offsets + i...].
struct SliceOp : top::SliceOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{};
  std::vector<TensorType> infer(Types in) const {
    detail::require_copyable(in[0], "input");
    return top::SliceOp::infer(in);
  }
};

/// Concatenation along `axis` (a copy).
struct ConcatOp : top::ConcatOp {
  static constexpr Arity operands{1, -1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{};
  std::vector<TensorType> infer(Types in) const {
    for (const auto& t : in)
      detail::require((t.dtype == DType::f32 || t.dtype == DType::i32) &&
                          t.layout == Layout::row_major,
                      "operands must be f32 or i32 row-major, got ", t);
    return top::ConcatOp::infer(in);
  }
};

/// Rows of a row-major table picked along axis 0: table [R, ...] (f32/bf16/f16), indices (i32)
/// -> indices.shape + table.shape[1:], f32.
struct GatherOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_param(in[0], "table");
    detail::require(in[0].rank() >= 1, "table must have rank >= 1");
    detail::require(in[1].dtype == DType::i32 && !in[1].quant,
                    "indices must be i32, got " + in[1].str());
    auto r = top::GatherOp{0}.infer(in);
    r[0].dtype = DType::f32;
    return r;
  }
};

/// Index of the largest element along the last axis (first on ties): [..., N] f32 ->
/// [..., 1] i32.
struct ArgMaxOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "input");
    return top::ArgMaxOp{-1}.infer(in);
  }
};

/// The k largest elements along the last axis, descending (lower index first on ties):
/// values [..., k] f32 and indices [..., k] i32.
struct TopKOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 2;
  static constexpr OpPolicy policy{};
  std::int64_t k = 1;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("k", s.k);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[0], "input");
    return top::TopKOp{k, -1}.infer(in);
  }
};

} // namespace tpu

} // namespace tpullm::ir
