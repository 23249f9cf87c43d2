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
/// effects, its operand indices named by the op's `Operand` enum. op_kind.hpp refuses to
/// compile a Tpu op without one, and a KV op whose policy and KvCacheRef base disagree. A Tpu op
/// that computes what a Top op computes derives from it: it holds the Top op's attributes and
/// calls its infer() after its own storage checks, so the two dialects share one shape rule.
///
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

/// The cache a KV op addresses: layer `layer`'s keys or values. Exactly the ops whose policy
/// writes KV (MemoryEffect::writes_kv) or names a `kv_cache_operand` derive from it
/// (op_kind.hpp checks), so the planner finds a cache from the policy and this base alone.
struct KvCacheRef {
  std::int64_t layer = 0;
  KvKind kv = KvKind::key;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("layer", s.layer);
    f("kv", s.kv);
  }
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

/// How a linear over integer weights quantizes its input activation to int8. `dynamic`: a
/// scale computed at run time per weight group of each row (one scale per row for W8A8's
/// per-channel i8 weights, kernels/int8_linear.hpp ActQuant; per group of the weights'
/// group_size rows for the weight-only formats, kernels::XPrecision::int8). `static` (W8A8
/// only): the op's calibrated per-tensor `act_scale` / `act_zero`.
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
/// A KV cache tensor: f32, f16 or bf16 row-major, unquantized, or i8 with the kv_rows layout
/// (the cache's element type; kv_cache_type).
inline void require_kv(const TensorType& t, const char* what) {
  const bool float_cache =
      (t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16) && !t.quant;
  require(t.layout == Layout::row_major && (float_cache || t == kv_cache_type(t.shape, DType::i8)),
          std::string(what) + " must be an f32, f16, bf16 or int8 (kv_rows) KV tensor, got " +
              t.str());
}
/// A small float parameter stored row-major (norm gamma, bias, RoPE table, embedding table).
inline void require_param(const TensorType& t, const char* what) {
  require(is_float(t.dtype) && t.dtype != DType::f64 && !t.quant && t.layout == Layout::row_major,
          std::string(what) + " must be an f32/bf16/f16 row-major tensor, got " + t.str());
}
/// A packed linear weight [K, N]: f32/bf16/f16 panels, or i8 / i4 (symmetric) / u4 / u8 (with
/// zero points) panels with a `packed` QuantSpec. Returns {K, N}.
std::pair<std::int64_t, std::int64_t> require_packed(const TensorType& t, const char* what);
/// An f32 or i32 row-major tensor (what the copy ops move).
void require_copyable(const TensorType& t, const char* what);
inline void require_positions(const TensorType& p, std::int64_t L, const char* what) {
  require(p.dtype == DType::i32 && !p.quant && p.shape == std::vector<std::int64_t>{1, L},
          std::string(what) + " must be [1, " + std::to_string(L) + "] i32, got " + p.str());
}
/// position_ids of a block op over B rows of L tokens: [B, L] i32, where B > 1 (a batched
/// decode: each row its own conversation) holds one token per row.
void require_batch_positions(const TensorType& p, std::int64_t B, std::int64_t L, const char* what);
/// The activation-quantization attributes of a linear: without `kind` none of scale / zero may
/// be set (the op reads f32 activations, whatever its weights); `dynamic` takes no scale / zero
/// and integer weights (i8 / i4 / u4 / u8, any grouping); `static` needs i8 weights with one
/// scale per output channel (group = K), a finite scale > 0 and a zero point in [-128, 127]
/// (absent: 0).
void require_act_quant(const std::optional<ActQuantKind>& kind, const std::optional<float>& scale,
                       const std::optional<std::int64_t>& zero, const char* scale_name,
                       std::initializer_list<const TensorType*> weights);
} // namespace detail

namespace tpu {

/// Embedding lookup: ids [1, L] i32 -> [1, L, H] f32 from a table that is either [V, H]
/// f32/bf16/f16 row-major or a packed [K = H, N = V] weight of any packed format (a tied
/// checkpoint's lm_head weight, stored once: token v's row is column v).
struct EmbeddingOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { table, ids };
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({ids}),
                                   .split = SplitRule::rows_if_large,
                                   .split_operand = ids};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const;
};

/// RMSNorm over the last axis: x [..., H] f32, gamma [H] -> [..., H] f32.
struct RMSNormOp : top::RMSNormOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({x}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true};
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[x], "input");
    detail::require_param(in[gamma], "gamma");
    return top::RMSNormOp::infer(in); // the shape rule is Top's
  }
};

/// Residual add fused into the next RMSNorm: x, r [..., H] f32, gamma [H] ->
/// (h = x + r, y = rms_norm(h) * gamma), both [..., H] f32.
struct AddRMSNormOp {
  static constexpr Arity operands{3, 3};
  static constexpr int results = 2;
  enum Operand : std::uint8_t { x, residual, gamma };
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({x, residual}),
                                   .split = SplitRule::rows_if_large};
  float eps = 1e-6f;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("eps", s.eps);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Linear layer: x [..., K] f32, w packed [K, N], bias [N] f32 (optional) -> [..., N] f32.
struct MatMulOp {
  static constexpr Arity operands{2, 3};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x, w, bias };
  static constexpr OpPolicy policy{
      .row_local = true, .row_operands = operand_set({x}), .split = SplitRule::gemm};
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
  std::vector<TensorType> infer(Types in) const;
};

/// Greedy lm_head: x [1, 1, H] f32, w packed [H, V] -> [1, 1, 1] i32, the index of the largest
/// of x · w (first on ties), without materializing the logits.
struct MatMulArgMaxOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x, w };
  static constexpr OpPolicy policy{.split = SplitRule::gemm};
  /// dynamic: x rounded to int8 per weight group (integer weights only); absent: exact.
  std::optional<ActQuantKind> act_quant;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("act_quant", s.act_quant);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Gated MLP: x [..., H] f32, gate/up packed [H, I], down packed [I, H] ->
/// down(act(x · gate) * (x · up)) [..., H] f32, the [rows, I] activation tiled to local memory.
struct MLPOp : top::GatedMLP {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{
      .row_local = true, .row_operands = operand_set({x}), .split = SplitRule::gemm};
  /// W8A8 (`--mode int8`): how the input (for gate / up) and the activation entering down are
  /// quantized; absent for the float and weight-only modes.
  std::optional<ActQuantKind> act_quant{};
  std::optional<float> act_scale{};            ///< static: the input's scale
  std::optional<std::int64_t> act_zero{};      ///< static: the input's zero point (absent: 0)
  std::optional<float> down_act_scale{};       ///< static: the down projection input's scale
  std::optional<std::int64_t> down_act_zero{}; ///< static: its zero point (absent: 0)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    top::GatedMLP::attrs(s, f); // Top's semantics (after them: the activation quantization)
    f("act_quant", s.act_quant);
    f("act_scale", s.act_scale);
    f("act_zero", s.act_zero);
    f("down_act_scale", s.down_act_scale);
    f("down_act_zero", s.down_act_zero);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Routed mixture-of-experts MLP (top.MoE's semantics): x [..., H] f32, router packed [H, E]
/// f32 (routing decisions are made in f32 whatever the expert weights' mode), then per expert
/// gate/up packed [H, I] and down packed [I, H] -> [..., H] f32. Prefill groups the rows by
/// expert (each expert one GEMM over its rows); decode reads only the chosen experts. Not
/// row-local: its data-dependent grouping runs ungrouped, with a scratch sized for the worst
/// case (all rows * top_k pairs, kernels/moe.hpp).
struct MoEOp : top::MoERouting {
  static constexpr Arity operands{5, -1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.split = SplitRule::gemm};
  /// W8A8 (`--mode int8`): every expert's gate / up / down run int8 x int8 with the activation
  /// quantized per row (dynamic only: a static per-tensor scale would need calibration per
  /// expert); with other integer expert weights (act-quant dynamic outside mode int8) each
  /// expert's products round their input to int8 per weight group; absent: f32 activations.
  /// The router stays f32.
  std::optional<ActQuantKind> act_quant{};
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    top::MoERouting::attrs(s, f); // Top's semantics (after them: the activation quantization)
    f("act_quant", s.act_quant);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Rotary embedding with the table gather inside: x [B, L, heads, d] f32 (B > 1: a batched
/// decode, L = 1), cos/sin tables [P, d/2] f32 (row p = position p), position_ids [B, L] i32
/// -> [B, L, heads, d] f32.
struct RopeOp : top::RopeOp {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x, cos_table, sin_table, positions };
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({x}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true,
                                   .positions = positions};
  std::vector<TensorType> infer(Types in) const;
};

/// The new tokens' keys or values stored into layer `layer`'s cache at their positions:
/// rows [1, L, kv_heads, d] f32, position_ids [1, L] i32 -> the same rows in the cache's dtype
/// (`dtype`: f32 when absent, f16 or bf16, rounded to nearest even on store), now living in the
/// cache (slot = position; positions must be consecutive). Writes persistent state.
/// Batched decode: rows [B, 1, kv_heads, d], position_ids [B, 1]; row b goes into the cache of
/// the conversation the run gives row b, at its own position.
struct KVStoreOp : KvCacheRef {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { rows, positions };
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({rows}),
                                   .positions = positions,
                                   .effect = MemoryEffect::writes_kv};
  std::optional<DType> dtype; ///< the cache's element type: f32 (absent), f16, bf16 or i8
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    KvCacheRef::attrs(s, f);
    f("dtype", s.dtype);
  }
  std::vector<TensorType> infer(Types in) const;
};
static_assert(KVStoreOp::rows == kSourceOperand, "a KV store stores its source operand");

/// The paper's Concat of history and new keys as an address, not a copy: history
/// [1, S, kv_heads, d] (the cache), new rows [1, L, kv_heads, d] (a tpu.KVStore result of the
/// same layer and kind), position_ids [1, L] -> the cache as [1, S + L, kv_heads, d] in which
/// slot j holds position j for j < position_ids[0] + L (other slots are never read). History,
/// new rows and result share the cache's type (f32, f16, bf16, or i8 with kv_rows).
/// Batched decode: history [B, S, kv_heads, d], new rows [B, 1, kv_heads, d], position_ids
/// [B, 1] -> [B, S + 1, kv_heads, d], row b being the cache of row b's conversation.
struct KVAppendOp : KvCacheRef {
  static constexpr Arity operands{3, 3};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { history, rows, positions };
  static constexpr OpPolicy policy{
      .view = true, .positions = positions, .kv_cache_operand = history};
  std::vector<TensorType> infer(Types in) const;
};
static_assert(KVAppendOp::history == kSourceOperand, "a KV append is a view of its history");

/// Causal attention with GQA, tiled flash attention with an online softmax:
/// q [1, L, q_heads, d], k/v as `kv_form` says, position_ids [1, L] -> [1, L, q_heads * d].
/// kv_form = rows: k/v [1, L, kv_heads, d] (history must be 0); kv_form = cache: k/v
/// [1, history + L, kv_heads, d] from tpu.KVAppend. k and v are f32, f16 or bf16 (one dtype: the
/// KV cache's), q and the result f32. Query i sees keys at positions <=
/// position_ids[i]. Positions must be consecutive. A batch B > 1 (batched decode, kv_form =
/// cache, L = 1): row b attends to its own conversation's cache up to its own position.
struct FAttentionOp : top::FAttentionOp {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({q}),
                                   .before_group = operand_set({k, v}),
                                   .split = SplitRule::attention,
                                   .head_operand = k,
                                   .positions = positions};
  KvForm kv_form = KvForm::rows; ///< where keys and values come from (after Top's attributes)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    top::FAttentionOp::attrs(s, f);
    f("kv_form", s.kv_form);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Elementwise a + b: a [..., N] f32, b the same shape or [N] (broadcast over rows) -> a's type.
struct AddOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { lhs, rhs };
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({lhs, rhs}),
                                   .vector_operands = operand_set({rhs}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const;
};

/// Elementwise a * b with the broadcasting rules of tpu.Add.
struct MulOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { lhs, rhs };
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({lhs, rhs}),
                                   .vector_operands = operand_set({rhs}),
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
  enum Operand : std::uint8_t { x };
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({x}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[x], "input");
    return top::SiLUOp{}.infer(in);
  }
};

/// Softmax along the last axis, f32.
struct SoftmaxOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  static constexpr OpPolicy policy{.row_local = true,
                                   .row_operands = operand_set({x}),
                                   .split = SplitRule::rows_if_large,
                                   .in_place = true};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[x], "input");
    detail::require(in[x].rank() >= 1, "input must have rank >= 1");
    return top::SoftmaxOp{-1}.infer(in); // along the last axis
  }
};

/// Rounds f32 values to `dtype`'s precision (f32, bf16 or f16; round to nearest even) and keeps
/// them in f32: the Tpu form of a Top Cast whose activations stay f32.
struct RoundOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  static constexpr OpPolicy policy{
      .row_local = true, .row_operands = operand_set({x}), .in_place = true};
  DType dtype = DType::bf16;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("dtype", s.dtype);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Same bytes, new static shape (a view).
struct ReshapeOp : top::ReshapeOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{
      .row_local = true, .row_operands = operand_set({x}), .view = true};
  std::vector<TensorType> infer(Types in) const {
    detail::require(in[x].layout == Layout::row_major && !in[x].quant,
                    "input must be a row-major tensor, got " + in[x].str());
    return top::ReshapeOp::infer(in);
  }
};

/// A one-input Top op that Tpu runs as a copy (tpu.Permute, tpu.Slice): Top's attributes and
/// shape rule, over an f32 or i32 row-major input.
template <class TopOp>
struct CopyOp : TopOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{};
  std::vector<TensorType> infer(Types in) const {
    detail::require_copyable(in[TopOp::x], "input");
    return TopOp::infer(in);
  }
};

/// Axis permutation (a strided copy): result.shape[i] = x.shape[order[i]].
using PermuteOp = CopyOp<top::PermuteOp>;

/// Static box copy: result[i...] = x[offsets + i...]; an offset view of x where the box is one
/// contiguous range of it (view_offset).
struct SliceOp : CopyOp<top::SliceOp> {
  static constexpr OpPolicy policy{.offset_view = true};
  /// Byte offset into a row-major `in` of a box that is one contiguous range of it, or -1.
  std::int64_t view_offset(const TensorType& in) const;
};

/// Concatenation along `axis` (a copy).
struct ConcatOp : top::ConcatOp {
  static constexpr Arity operands{1, -1};
  static constexpr int results = 1;
  static constexpr OpPolicy policy{};
  std::vector<TensorType> infer(Types in) const;
};

/// Rows of a row-major table picked along axis 0: table [R, ...] (f32/bf16/f16), indices (i32)
/// -> indices.shape + table.shape[1:], f32.
struct GatherOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { table, indices };
  static constexpr OpPolicy policy{};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const;
};

/// Index of the largest element along the last axis (first on ties): [..., N] f32 ->
/// [..., 1] i32.
struct ArgMaxOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  static constexpr OpPolicy policy{};
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[x], "input");
    return top::ArgMaxOp{-1}.infer(in);
  }
};

/// The k largest elements along the last axis, descending (lower index first on ties):
/// values [..., k] f32 and indices [..., k] i32.
struct TopKOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 2;
  enum Operand : std::uint8_t { x };
  static constexpr OpPolicy policy{};
  std::int64_t k = 1;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("k", s.k);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_act(in[x], "input");
    return top::TopKOp{k, -1}.infer(in);
  }
};

} // namespace tpu

} // namespace tpullm::ir
