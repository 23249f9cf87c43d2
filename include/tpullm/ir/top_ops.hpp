#pragma once
/// Top ops (namespace ir::top): framework-agnostic model semantics. One struct per op: typed
/// attributes as members, `attrs(self, f)` listing them for the printer/parser, and
/// `infer(operand types)` that checks operand rules and returns the result types (throwing
/// tpullm::Error(invalid_input) with the reason).
/// An op with more than one operand names them in an `Operand` enum (MatMulOp::b,
/// FAttentionOp::positions): builders, lowering, the planner, the tiler and the executor index
/// operands by these names, never by number.
/// Shapes below use B = batch (1 here), L = query tokens, S = key slots, H = hidden size.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpullm/ir/attributes.hpp"
#include "tpullm/ir/type.hpp"
#include "tpullm/support/checked.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::ir {

/// Operand count bounds of an op kind; max < 0 means variadic.
struct Arity {
  int min = 0;
  int max = 0;
};

using Types = std::span<const TensorType>;

namespace detail {
/// Throws Error(invalid_input) with str_cat(why...) (infer()'s way of refusing operands).
template <class... Args>
[[noreturn]] void fail(const Args&... why) {
  throw Error(ErrorKind::invalid_input, "", str_cat(why...));
}
/// Throws Error(invalid_input) with str_cat(why...) unless ok. The pieces are only formatted on
/// failure, so pass types and numbers as pieces (`require(ok, "got ", t)`) inside loops: a
/// message built eagerly per dimension makes a large rank quadratic.
template <class... Args>
void require(bool ok, const Args&... why) {
  if (!ok) [[unlikely]]
    fail(why...);
}
/// Throws unless `t` has exactly `rank` dimensions (call before indexing its shape).
inline void require_rank(const TensorType& t, std::int64_t rank, const char* what) {
  require(t.rank() == rank, what, " must have rank ", rank, ", got ", t.summary());
}
/// Throws unless `t` has at least `rank` dimensions (call before indexing its shape).
inline void require_min_rank(const TensorType& t, std::int64_t rank, const char* what) {
  require(t.rank() >= rank, what, " must have rank >= ", rank, ", got ", t.summary());
}
/// a + b for a dimension, offset or count; throws naming `what` when it overflows int64.
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  const auto r = tpullm::checked_add(a, b);
  require(r.has_value(), what, " overflows: ", a, " + ", b);
  return *r;
}
/// a * b for a dimension, offset or count; throws naming `what` when it overflows int64.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  const auto r = tpullm::checked_mul(a, b);
  require(r.has_value(), what, " overflows: ", a, " * ", b);
  return *r;
}
inline void require_float(const TensorType& t, const char* what) {
  require(is_float(t.dtype) && !t.quant && t.layout == Layout::row_major,
          std::string(what) + " must be a float tensor, got " + t.str());
}
inline void require_int_index(const TensorType& t, const char* what) {
  require((t.dtype == DType::i32 || t.dtype == DType::i64) && !t.quant &&
              t.layout == Layout::row_major,
          std::string(what) + " must be i32 or i64, got " + t.str());
}
/// A weight operand: float, or integers carrying a QuantSpec.
inline void require_weight(const TensorType& t, const char* what) {
  require(t.layout == Layout::row_major &&
              ((is_float(t.dtype) && !t.quant) || (is_integer(t.dtype) && t.quant)),
          std::string(what) + " must be float or quantized, got " + t.str());
}
std::int64_t norm_axis(std::int64_t axis, std::int64_t rank);
/// NumPy broadcasting of two shapes.
std::vector<std::int64_t> broadcast(const std::vector<std::int64_t>& a,
                                    const std::vector<std::int64_t>& b);
std::vector<TensorType> infer_binary(Types in);
} // namespace detail

namespace top {

/// a [..., K] x b [K, N] (or b [N, K] when transpose_b) + bias [N] -> [..., N] in a's dtype.
/// b may be float (any width) or quantized integers (logical [K, N], transpose_b = false).
struct MatMulOp {
  static constexpr Arity operands{2, 3};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { a, b, bias };
  bool transpose_b = false; ///< b is stored [N, K] (HuggingFace Linear layout)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("transpose_b", s.transpose_b);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// RMS normalization over the last axis: x [..., H], gamma [H] -> [..., H] in x's dtype.
struct RMSNormOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x, gamma };
  float eps = 1e-6f; ///< added to mean(x^2)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("eps", s.eps);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Rows of table [D0, ..., Dn] picked by integer indices along `axis`:
/// result = table.shape[:axis] + indices.shape + table.shape[axis+1:], table's dtype.
struct GatherOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { table, indices };
  std::int64_t axis = 0; ///< table axis indexed
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("axis", s.axis);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Rotary embedding: x [B, L, heads, d], cos/sin [B, L, d/2] (one entry per frequency i, already
/// gathered by position) -> [B, L, heads, d]. Each pair (x1, x2) of frequency i becomes
/// (x1 * cos[i] - x2 * sin[i], x2 * cos[i] + x1 * sin[i]); `halves` pairs (x[i], x[i + d/2])
/// (HF rotate_half), `interleaved` pairs (x[2i], x[2i + 1]).
struct RopeOp {
  static constexpr Arity operands{3, 3};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x, cosines, sines };
  RopeMode mode = RopeMode::halves;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("mode", s.mode);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Same elements, new static shape (element counts must agree).
struct ReshapeOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  std::vector<std::int64_t> shape; ///< result shape
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("shape", s.shape);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Axis permutation: result.shape[i] = x.shape[order[i]].
struct PermuteOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  std::vector<std::int64_t> order; ///< a permutation of [0, rank)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("order", s.order);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Static box: result[i...] = x[offsets + i...], result shape = sizes.
struct SliceOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  std::vector<std::int64_t> offsets; ///< start per axis
  std::vector<std::int64_t> sizes;   ///< extent per axis
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("offsets", s.offsets);
    f("sizes", s.sizes);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Concatenation along `axis`; all operands share dtype and every other dimension.
struct ConcatOp {
  static constexpr Arity operands{1, -1};
  static constexpr int results = 1;
  std::int64_t axis = 0;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("axis", s.axis);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Elementwise a + b with NumPy broadcasting; same float dtype.
struct AddOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { lhs, rhs };
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const { return detail::infer_binary(in); }
};

/// Elementwise a * b with NumPy broadcasting; same float dtype.
struct MulOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { lhs, rhs };
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const { return detail::infer_binary(in); }
};

/// x * sigmoid(x), elementwise.
struct SiLUOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_float(in[x], "input");
    return {in[x]};
  }
};

/// Softmax along `axis`.
struct SoftmaxOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  std::int64_t axis = -1;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("axis", s.axis);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_float(in[x], "input");
    detail::norm_axis(axis, in[x].rank());
    return {in[x]};
  }
};

/// Element type conversion between float types (round to nearest even when narrowing).
struct CastOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  DType dtype = DType::f32; ///< result element type
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("dtype", s.dtype);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Scaled dot-product attention with GQA, causal by position, no mask tensor.
/// q [B, L, q_heads, d], k/v [B, S, kv_heads, d] with S = history + L, position_ids [B, L]
/// -> [B, L, q_heads * d]. Key slots: slot j < history holds position j and exists only when
/// j < position_ids[b, 0] (the history is what precedes the first new token); slot history + t
/// holds position position_ids[b, t]. Query i sees key slots whose position <= position_ids[b, i]
/// (all existing slots when causal = false). q head h reads kv head h / (q_heads / kv_heads).
/// A sliding window W (causal only) further hides key positions <= position_ids[b, i] - W, so a
/// query sees its W latest positions (transformers' sliding_window).
struct FAttentionOp {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { q, k, v, positions };
  float scale = 1.0f;        ///< multiplies q.k (usually 1/sqrt(d))
  std::int64_t q_heads = 1;  ///< query heads
  std::int64_t kv_heads = 1; ///< key/value heads; divides q_heads
  std::int64_t head_dim = 1; ///< d
  std::int64_t history = 0;  ///< leading key slots that are history (0 in prefill)
  bool causal = true;        ///< mask keys at later positions
  std::optional<std::int64_t> window = std::nullopt; ///< sliding window (> 0); none: all history
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("scale", s.scale);
    f("q_heads", s.q_heads);
    f("kv_heads", s.kv_heads);
    f("head_dim", s.head_dim);
    f("history", s.history);
    f("causal", s.causal);
    f("window", s.window);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// The semantics of a gated MLP both dialects share: its operands and activation
/// (top::MLPOp adds the weights' layout, tpu::MLPOp the activation quantization).
struct GatedMLP {
  enum Operand : std::uint8_t { x, gate, up, down };
  Activation activation = Activation::silu;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("activation", s.activation);
  }
};

/// Gated MLP: x [..., H] -> down(act(x * gate) * (x * up)) [..., H].
/// gate/up are [H, I] and down [I, H] (or [I, H] / [H, I] when transpose_b, HF layout).
struct MLPOp : GatedMLP {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  bool transpose_b = false; ///< weights stored [out, in]
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    GatedMLP::attrs(s, f);
    f("transpose_b", s.transpose_b);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// The routing semantics of a mixture-of-experts MLP both dialects share: its operands, expert
/// count, top-k choice and activation (top::MoEOp adds the weights' layout, tpu::MoEOp the
/// activation quantization). Operands: 2 + 3 * experts, in the order x, router, gate_0, up_0,
/// down_0, gate_1, ...
struct MoERouting {
  enum Operand : std::uint8_t { x, router, first_expert };
  /// The operand of expert e's gate (up: + 1, down: + 2).
  static constexpr std::size_t expert_gate(std::int64_t e) {
    return first_expert + 3 * static_cast<std::size_t>(e);
  }
  std::int64_t experts = 1; ///< E
  std::int64_t top_k = 1;   ///< experts per token, 1 <= top_k <= E
  bool renormalize = false; ///< divide the chosen probabilities by their sum
  Activation activation = Activation::silu;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("experts", s.experts);
    f("top_k", s.top_k);
    f("renormalize", s.renormalize);
    f("activation", s.activation);
  }
};

/// Routed mixture-of-experts MLP (kept fused like MLP): x [..., H], router [E, H] (or [H, E]
/// without transpose_b), then for each expert e = 0..E-1 its gate, up [I, H] and down [H, I]
/// (transposed as MLP's) -> [..., H]. Per row: p = softmax(x · router) over the E experts,
/// the top_k largest p (lower expert index first on ties), divided by their sum when
/// `renormalize`, and y = sum over the chosen e of p_e * down_e(silu(x · gate_e) * (x · up_e)).
struct MoEOp : MoERouting {
  static constexpr Arity operands{5, -1};
  static constexpr int results = 1;
  bool transpose_b = true; ///< router and expert weights stored [out, in] (HF Linear layout)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    MoERouting::attrs(s, f);
    f("transpose_b", s.transpose_b);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// Index of the largest element along `axis` (first on ties); that axis becomes 1; i32.
struct ArgMaxOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  enum Operand : std::uint8_t { x };
  std::int64_t axis = -1;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("axis", s.axis);
  }
  std::vector<TensorType> infer(Types in) const;
};

/// The k largest elements along `axis`, descending (lower index first on ties):
/// results values (input dtype) and indices (i32), that axis becoming k.
struct TopKOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 2;
  enum Operand : std::uint8_t { x };
  std::int64_t k = 1;
  std::int64_t axis = -1;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("k", s.k);
    f("axis", s.axis);
  }
  std::vector<TensorType> infer(Types in) const;
};

} // namespace top

} // namespace tpullm::ir
