#pragma once
/// Top ops (namespace ir::top): framework-agnostic model semantics. One struct per op: typed
/// attributes as members, `attrs(self, f)` listing them for the printer/parser, and
/// `infer(operand types)` that checks operand rules and returns the result types (throwing
/// tpullm::Error(invalid_input) with the reason).
/// Shapes below use B = batch (1 here), L = query tokens, S = key slots, H = hidden size.

#include <algorithm>
#include <cstdint>
#include <limits>
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
inline std::int64_t norm_axis(std::int64_t axis, std::int64_t rank) {
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  require(a >= 0 && a < rank,
          "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}
/// NumPy broadcasting of two shapes.
inline std::vector<std::int64_t> broadcast(const std::vector<std::int64_t>& a,
                                           const std::vector<std::int64_t>& b) {
  const std::size_t r = std::max(a.size(), b.size());
  std::vector<std::int64_t> out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    require(da == db || da == 1 || db == 1,
            "shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}
inline std::vector<TensorType> infer_binary(Types in) {
  require_float(in[0], "lhs");
  require_float(in[1], "rhs");
  require(in[0].dtype == in[1].dtype,
          "operand dtypes differ: " + in[0].str() + " vs " + in[1].str());
  return {TensorType(broadcast(in[0].shape, in[1].shape), in[0].dtype)};
}
} // namespace detail

namespace top {

/// a [..., K] x b [K, N] (or b [N, K] when transpose_b) + bias [N] -> [..., N] in a's dtype.
/// b may be float (any width) or quantized integers (logical [K, N], transpose_b = false).
struct MatMulOp {
  static constexpr Arity operands{2, 3};
  static constexpr int results = 1;
  bool transpose_b = false; ///< b is stored [N, K] (HuggingFace Linear layout)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("transpose_b", s.transpose_b);
  }
  std::vector<TensorType> infer(Types in) const {
    const auto &a = in[0], &b = in[1];
    detail::require_float(a, "lhs");
    detail::require_weight(b, "rhs");
    detail::require(a.rank() >= 1 && b.rank() == 2, "lhs must have rank >= 1 and rhs rank 2");
    detail::require(!(b.quant && transpose_b),
                    "a quantized rhs is logical [K, N]: transpose_b must be false");
    const std::int64_t k = a.dim(-1);
    const std::int64_t bk = transpose_b ? b.shape[1] : b.shape[0];
    const std::int64_t n = transpose_b ? b.shape[0] : b.shape[1];
    detail::require(k == bk, "contracting dims differ: lhs " + shape_str(a.shape) + ", rhs " +
                                 shape_str(b.shape) + (transpose_b ? " (transposed)" : ""));
    if (in.size() == 3) {
      detail::require_float(in[2], "bias");
      detail::require(in[2].shape == std::vector<std::int64_t>{n},
                      "bias must be [" + std::to_string(n) + "], got " + shape_str(in[2].shape));
    }
    auto shape = a.shape;
    shape.back() = n;
    return {TensorType(shape, a.dtype)};
  }
};

/// RMS normalization over the last axis: x [..., H], gamma [H] -> [..., H] in x's dtype.
struct RMSNormOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  float eps = 1e-6f; ///< added to mean(x^2)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("eps", s.eps);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_float(in[0], "input");
    detail::require_float(in[1], "gamma");
    detail::require_min_rank(in[0], 1, "input");
    if (in[1].shape != std::vector<std::int64_t>{in[0].dim(-1)})
      detail::fail("gamma must be [", in[0].dim(-1), "], got ", shape_str(in[1].shape));
    detail::require(eps >= 0, "eps must be >= 0");
    return {in[0].with_shape(in[0].shape)};
  }
};

/// Rows of table [D0, ..., Dn] picked by integer indices along `axis`:
/// result = table.shape[:axis] + indices.shape + table.shape[axis+1:], table's dtype.
struct GatherOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  std::int64_t axis = 0; ///< table axis indexed
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("axis", s.axis);
  }
  std::vector<TensorType> infer(Types in) const {
    const auto &t = in[0], &idx = in[1];
    detail::require(!t.quant, "gather of a quantized table is not supported");
    detail::require_int_index(idx, "indices");
    const auto a = detail::norm_axis(axis, t.rank());
    std::vector<std::int64_t> shape(t.shape.begin(), t.shape.begin() + a);
    shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
    shape.insert(shape.end(), t.shape.begin() + a + 1, t.shape.end());
    return {TensorType(shape, t.dtype)};
  }
};

/// Rotary embedding: x [B, L, heads, d], cos/sin [B, L, d/2] (one entry per frequency i, already
/// gathered by position) -> [B, L, heads, d]. Each pair (x1, x2) of frequency i becomes
/// (x1 * cos[i] - x2 * sin[i], x2 * cos[i] + x1 * sin[i]); `halves` pairs (x[i], x[i + d/2])
/// (HF rotate_half), `interleaved` pairs (x[2i], x[2i + 1]).
struct RopeOp {
  static constexpr Arity operands{3, 3};
  static constexpr int results = 1;
  RopeMode mode = RopeMode::halves;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("mode", s.mode);
  }
  std::vector<TensorType> infer(Types in) const {
    const auto &x = in[0], &c = in[1], &s = in[2];
    detail::require_float(x, "input");
    detail::require_float(c, "cos");
    detail::require_float(s, "sin");
    if (x.rank() != 4)
      detail::fail("input must be [B, L, heads, d], got ", shape_str(x.shape));
    detail::require(x.dim(3) % 2 == 0, "head_dim must be even, got " + std::to_string(x.dim(3)));
    const std::vector<std::int64_t> cs{x.dim(0), x.dim(1), x.dim(3) / 2};
    detail::require(c.shape == cs && s.shape == cs, "cos/sin must be " + shape_str(cs) + ", got " +
                                                        shape_str(c.shape) + " and " +
                                                        shape_str(s.shape));
    return {x};
  }
};

/// Same elements, new static shape (element counts must agree).
struct ReshapeOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  std::vector<std::int64_t> shape; ///< result shape
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("shape", s.shape);
  }
  std::vector<TensorType> infer(Types in) const {
    TensorType r = in[0].with_shape(shape);
    for (auto d : shape)
      if (d < 0)
        detail::fail("negative dimension in reshape target ", shape_str(shape));
    // num_elements() refuses types beyond the limits, so neither product overflows.
    if (r.num_elements() != in[0].num_elements())
      detail::fail("reshape ", shape_str(in[0].shape), " -> ", shape_str(shape),
                   " changes the element count");
    return {r};
  }
};

/// Axis permutation: result.shape[i] = x.shape[order[i]].
struct PermuteOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  std::vector<std::int64_t> order; ///< a permutation of [0, rank)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("order", s.order);
  }
  std::vector<TensorType> infer(Types in) const {
    const auto& x = in[0];
    if (static_cast<std::int64_t>(order.size()) != x.rank())
      detail::fail("order ", shape_str(order), " does not match rank ", x.rank());
    std::vector<bool> seen(order.size(), false);
    std::vector<std::int64_t> shape;
    shape.reserve(order.size());
    for (const std::int64_t o : order) {
      if (o < 0 || o >= x.rank() || seen[static_cast<std::size_t>(o)])
        detail::fail("order ", shape_str(order), " is not a permutation");
      seen[static_cast<std::size_t>(o)] = true;
      shape.push_back(x.shape[static_cast<std::size_t>(o)]);
    }
    return {x.with_shape(shape)};
  }
};

/// Static box: result[i...] = x[offsets + i...], result shape = sizes.
struct SliceOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  std::vector<std::int64_t> offsets; ///< start per axis
  std::vector<std::int64_t> sizes;   ///< extent per axis
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("offsets", s.offsets);
    f("sizes", s.sizes);
  }
  std::vector<TensorType> infer(Types in) const {
    const auto& x = in[0];
    detail::require(static_cast<std::int64_t>(offsets.size()) == x.rank() &&
                        static_cast<std::int64_t>(sizes.size()) == x.rank(),
                    "offsets and sizes need one entry per axis (rank " + std::to_string(x.rank()) +
                        ")");
    for (std::size_t i = 0; i < x.shape.size(); ++i) {
      // offset + size <= dim, written so that nothing overflows for any int64 attribute.
      const std::int64_t o = offsets[i], n = sizes[i], d = x.shape[i];
      if (o < 0 || n < 0 || n > d || o > d - n)
        detail::fail("slice offsets ", shape_str(offsets), " sizes ", shape_str(sizes),
                     " out of bounds of ", shape_str(x.shape));
    }
    return {x.with_shape(sizes)};
  }
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
  std::vector<TensorType> infer(Types in) const {
    const auto a = detail::norm_axis(axis, in[0].rank());
    auto shape = in[0].shape;
    shape[a] = 0;
    for (const auto& t : in) {
      if (t.quant || t.dtype != in[0].dtype || t.rank() != in[0].rank())
        detail::fail("concat operands must share dtype and rank: ", in[0], " vs ", t);
      for (std::int64_t i = 0; i < t.rank(); ++i)
        if (i != a && t.shape[i] != in[0].shape[i])
          detail::fail("concat operands differ outside axis ", a, ": ", shape_str(in[0].shape),
                       " vs ", shape_str(t.shape));
      shape[a] = detail::checked_add(shape[a], t.shape[a], "concat result dimension");
    }
    return {in[0].with_shape(shape)};
  }
};

/// Elementwise a + b with NumPy broadcasting; same float dtype.
struct AddOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const { return detail::infer_binary(in); }
};

/// Elementwise a * b with NumPy broadcasting; same float dtype.
struct MulOp {
  static constexpr Arity operands{2, 2};
  static constexpr int results = 1;
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const { return detail::infer_binary(in); }
};

/// x * sigmoid(x), elementwise.
struct SiLUOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  template <class S, class F>
  static void attrs(S&, F&&) {}
  std::vector<TensorType> infer(Types in) const {
    detail::require_float(in[0], "input");
    return {in[0]};
  }
};

/// Softmax along `axis`.
struct SoftmaxOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  std::int64_t axis = -1;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("axis", s.axis);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_float(in[0], "input");
    detail::norm_axis(axis, in[0].rank());
    return {in[0]};
  }
};

/// Element type conversion between float types (round to nearest even when narrowing).
struct CastOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  DType dtype = DType::f32; ///< result element type
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("dtype", s.dtype);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_float(in[0], "input");
    detail::require(is_float(dtype),
                    "cast target must be a float type, got " + std::string(name(dtype)));
    return {TensorType(in[0].shape, dtype)};
  }
};

/// Scaled dot-product attention with GQA, causal by position, no mask tensor.
/// q [B, L, q_heads, d], k/v [B, S, kv_heads, d] with S = history + L, position_ids [B, L]
/// -> [B, L, q_heads * d]. Key slots: slot j < history holds position j and exists only when
/// j < position_ids[b, 0] (the history is what precedes the first new token); slot history + t
/// holds position position_ids[b, t]. Query i sees key slots whose position <= position_ids[b, i]
/// (all existing slots when causal = false). q head h reads kv head h / (q_heads / kv_heads).
struct FAttentionOp {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  float scale = 1.0f;        ///< multiplies q.k (usually 1/sqrt(d))
  std::int64_t q_heads = 1;  ///< query heads
  std::int64_t kv_heads = 1; ///< key/value heads; divides q_heads
  std::int64_t head_dim = 1; ///< d
  std::int64_t history = 0;  ///< leading key slots that are history (0 in prefill)
  bool causal = true;        ///< mask keys at later positions
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("scale", s.scale);
    f("q_heads", s.q_heads);
    f("kv_heads", s.kv_heads);
    f("head_dim", s.head_dim);
    f("history", s.history);
    f("causal", s.causal);
  }
  std::vector<TensorType> infer(Types in) const {
    const auto &q = in[0], &k = in[1], &v = in[2], &p = in[3];
    detail::require_float(q, "q");
    detail::require_float(k, "k");
    detail::require_float(v, "v");
    detail::require_int_index(p, "position_ids");
    detail::require(q_heads > 0 && kv_heads > 0 && head_dim > 0 && q_heads % kv_heads == 0,
                    "q_heads must be a positive multiple of kv_heads");
    detail::require(history >= 0, "history must be >= 0");
    detail::require(q.rank() == 4 && q.dim(2) == q_heads && q.dim(3) == head_dim,
                    "q must be [B, L, " + std::to_string(q_heads) + ", " +
                        std::to_string(head_dim) + "], got " + shape_str(q.shape));
    const std::int64_t b = q.dim(0), l = q.dim(1);
    const std::int64_t slots = detail::checked_add(history, l, "history + L key slots");
    const std::int64_t width = detail::checked_mul(q_heads, head_dim, "q_heads * head_dim");
    const std::vector<std::int64_t> kv{b, slots, kv_heads, head_dim};
    detail::require(k.shape == kv && v.shape == kv,
                    "k and v must be " + shape_str(kv) + " (history + L slots), got " +
                        shape_str(k.shape) + " and " + shape_str(v.shape));
    detail::require(p.shape == std::vector<std::int64_t>{b, l},
                    "position_ids must be [B, L] = " + shape_str({b, l}) + ", got " +
                        shape_str(p.shape));
    return {TensorType({b, l, width}, q.dtype)};
  }
};

/// Gated MLP: x [..., H] -> down(act(x * gate) * (x * up)) [..., H].
/// gate/up are [H, I] and down [I, H] (or [I, H] / [H, I] when transpose_b, HF layout).
struct MLPOp {
  static constexpr Arity operands{4, 4};
  static constexpr int results = 1;
  Activation activation = Activation::silu;
  bool transpose_b = false; ///< weights stored [out, in]
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("activation", s.activation);
    f("transpose_b", s.transpose_b);
  }
  std::vector<TensorType> infer(Types in) const {
    const auto &x = in[0], &g = in[1], &u = in[2], &d = in[3];
    detail::require_float(x, "input");
    for (const auto* w : {&g, &u, &d})
      detail::require_weight(*w, "MLP weight");
    detail::require_min_rank(x, 1, "input");
    detail::require(g.rank() == 2 && u.rank() == 2 && d.rank() == 2, "MLP weights must be rank 2");
    detail::require(!(transpose_b && (g.quant || u.quant || d.quant)),
                    "quantized MLP weights are logical [in, out]: transpose_b must be false");
    const std::int64_t h = x.dim(-1);
    const std::int64_t i = transpose_b ? g.shape[0] : g.shape[1];
    auto io = [&](std::int64_t in_dim, std::int64_t out_dim) {
      return transpose_b ? std::vector<std::int64_t>{out_dim, in_dim}
                         : std::vector<std::int64_t>{in_dim, out_dim};
    };
    detail::require(g.shape == io(h, i) && u.shape == io(h, i) && d.shape == io(i, h),
                    "MLP weights do not match hidden " + std::to_string(h) + " / intermediate " +
                        std::to_string(i) + ": gate " + shape_str(g.shape) + ", up " +
                        shape_str(u.shape) + ", down " + shape_str(d.shape));
    return {x};
  }
};

/// Routed mixture-of-experts MLP (kept fused like MLP): x [..., H], router [E, H] (or [H, E]
/// without transpose_b), then for each expert e = 0..E-1 its gate, up [I, H] and down [H, I]
/// (transposed as MLP's) -> [..., H]. Per row: p = softmax(x · router) over the E experts,
/// the top_k largest p (lower expert index first on ties), divided by their sum when
/// `renormalize`, and y = sum over the chosen e of p_e * down_e(silu(x · gate_e) * (x · up_e)).
/// Operands: 2 + 3 * experts, in the order x, router, gate_0, up_0, down_0, gate_1, ...
struct MoEOp {
  static constexpr Arity operands{5, -1};
  static constexpr int results = 1;
  std::int64_t experts = 1; ///< E
  std::int64_t top_k = 1;   ///< experts per token, 1 <= top_k <= E
  bool renormalize = false; ///< divide the chosen probabilities by their sum
  Activation activation = Activation::silu;
  bool transpose_b = true; ///< router and expert weights stored [out, in] (HF Linear layout)
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("experts", s.experts);
    f("top_k", s.top_k);
    f("renormalize", s.renormalize);
    f("activation", s.activation);
    f("transpose_b", s.transpose_b);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require(experts >= 1 && experts <= (std::int64_t{1} << 20), "experts = ", experts,
                    " must be in [1, 2^20]");
    detail::require(top_k >= 1 && top_k <= experts, "top_k = ", top_k,
                    " must be in [1, experts = ", experts, "]");
    detail::require(static_cast<std::int64_t>(in.size()) == 2 + 3 * experts, "MoE with ", experts,
                    " experts takes 2 + 3 * ", experts,
                    " operands (x, router, gate/up/down per "
                    "expert), got ",
                    in.size());
    const auto& x = in[0];
    detail::require_float(x, "input");
    detail::require_min_rank(x, 1, "input");
    const std::int64_t h = x.dim(-1);
    auto io = [&](std::int64_t in_dim, std::int64_t out_dim) {
      return transpose_b ? std::vector<std::int64_t>{out_dim, in_dim}
                         : std::vector<std::int64_t>{in_dim, out_dim};
    };
    for (std::size_t i = 1; i < in.size(); ++i) {
      detail::require(is_float(in[i].dtype) && !in[i].quant && in[i].layout == Layout::row_major,
                      "MoE weight #", i, " must be a float row-major tensor, got ", in[i]);
      detail::require(in[i].rank() == 2, "MoE weight #", i, " must be rank 2, got ", in[i]);
    }
    detail::require(in[1].shape == io(h, experts), "router must be ", shape_str(io(h, experts)),
                    " for hidden ", h, " and ", experts, " experts, got ", in[1]);
    const std::int64_t i0 = transpose_b ? in[2].shape[0] : in[2].shape[1];
    for (std::int64_t e = 0; e < experts; ++e) {
      const auto& g = in[static_cast<std::size_t>(2 + 3 * e)];
      const auto& u = in[static_cast<std::size_t>(3 + 3 * e)];
      const auto& d = in[static_cast<std::size_t>(4 + 3 * e)];
      detail::require(g.shape == io(h, i0) && u.shape == io(h, i0) && d.shape == io(i0, h),
                      "expert ", e, " weights do not match hidden ", h, " / intermediate ", i0,
                      ": gate ", g, ", up ", u, ", down ", d);
    }
    return {x};
  }
};

/// Index of the largest element along `axis` (first on ties); that axis becomes 1; i32.
struct ArgMaxOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 1;
  std::int64_t axis = -1;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("axis", s.axis);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_float(in[0], "input");
    auto shape = in[0].shape;
    shape[detail::norm_axis(axis, in[0].rank())] = 1;
    return {TensorType(shape, DType::i32)};
  }
};

/// The k largest elements along `axis`, descending (lower index first on ties):
/// results values (input dtype) and indices (i32), that axis becoming k.
struct TopKOp {
  static constexpr Arity operands{1, 1};
  static constexpr int results = 2;
  std::int64_t k = 1;
  std::int64_t axis = -1;
  template <class S, class F>
  static void attrs(S& s, F&& f) {
    f("k", s.k);
    f("axis", s.axis);
  }
  std::vector<TensorType> infer(Types in) const {
    detail::require_float(in[0], "input");
    auto shape = in[0].shape;
    const auto a = detail::norm_axis(axis, in[0].rank());
    detail::require(k >= 1 && k <= shape[a], "k = " + std::to_string(k) + " must be in [1, " +
                                                 std::to_string(shape[a]) + "]");
    shape[a] = k;
    return {TensorType(shape, in[0].dtype), TensorType(shape, DType::i32)};
  }
};

} // namespace top

} // namespace tpullm::ir
