// Out-of-line definitions of tpullm/ir/top_ops.hpp (compiled once into tpullm_core).
#include "tpullm/ir/top_ops.hpp"

namespace tpullm::ir::detail {

std::int64_t norm_axis(std::int64_t axis, std::int64_t rank) {
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  require(a >= 0 && a < rank,
          "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}

std::vector<std::int64_t> broadcast(const std::vector<std::int64_t>& a,
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

std::vector<TensorType> infer_binary(Types in) {
  require_float(in[0], "lhs");
  require_float(in[1], "rhs");
  require(in[0].dtype == in[1].dtype,
          "operand dtypes differ: " + in[0].str() + " vs " + in[1].str());
  return {TensorType(broadcast(in[0].shape, in[1].shape), in[0].dtype)};
}

} // namespace tpullm::ir::detail

namespace tpullm::ir::top {

auto MatMulOp::infer(Types in) const -> std::vector<TensorType> {
  const auto &a = in[MatMulOp::a], &b = in[MatMulOp::b];
  detail::require_float(a, "lhs");
  detail::require_weight(b, "rhs");
  detail::require(a.rank() >= 1 && b.rank() == 2, "lhs must have rank >= 1 and rhs rank 2");
  detail::require(!b.quant || quant_stored_as_rows(*b.quant) == transpose_b,
                  transpose_b ? "a quantized rhs is logical [K, N]: transpose_b must be false"
                              : "a ggml-quantized rhs is stored [N, K]: transpose_b must be true");
  const std::int64_t k = a.dim(-1);
  const std::int64_t bk = transpose_b ? b.shape[1] : b.shape[0];
  const std::int64_t n = transpose_b ? b.shape[0] : b.shape[1];
  detail::require(k == bk, "contracting dims differ: lhs " + shape_str(a.shape) + ", rhs " +
                               shape_str(b.shape) + (transpose_b ? " (transposed)" : ""));
  if (in.size() == 3) {
    detail::require_float(in[MatMulOp::bias], "bias");
    detail::require(in[MatMulOp::bias].shape == std::vector<std::int64_t>{n},
                    "bias must be [" + std::to_string(n) + "], got " +
                        shape_str(in[MatMulOp::bias].shape));
  }
  auto shape = a.shape;
  shape.back() = n;
  return {TensorType(shape, a.dtype)};
}

auto RMSNormOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_float(in[RMSNormOp::x], "input");
  detail::require_float(in[RMSNormOp::gamma], "gamma");
  detail::require_min_rank(in[RMSNormOp::x], 1, "input");
  if (in[RMSNormOp::gamma].shape != std::vector<std::int64_t>{in[RMSNormOp::x].dim(-1)})
    detail::fail("gamma must be [", in[RMSNormOp::x].dim(-1), "], got ",
                 shape_str(in[RMSNormOp::gamma].shape));
  detail::require(eps >= 0, "eps must be >= 0");
  return {in[RMSNormOp::x].with_shape(in[RMSNormOp::x].shape)};
}

auto GatherOp::infer(Types in) const -> std::vector<TensorType> {
  const auto &t = in[GatherOp::table], &idx = in[GatherOp::indices];
  detail::require(!t.quant || (quant_stored_as_rows(*t.quant) && t.rank() == 2 && axis == 0),
                  "gather of a quantized table is supported only for rows of a ggml table");
  detail::require_int_index(idx, "indices");
  const auto a = detail::norm_axis(axis, t.rank());
  std::vector<std::int64_t> shape(t.shape.begin(), t.shape.begin() + a);
  shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
  shape.insert(shape.end(), t.shape.begin() + a + 1, t.shape.end());
  return {TensorType(shape, t.quant ? DType::f32 : t.dtype)}; // ggml rows gather dequantized
}

auto RopeOp::infer(Types in) const -> std::vector<TensorType> {
  const auto &x = in[RopeOp::x], &c = in[RopeOp::cosines], &s = in[RopeOp::sines];
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

auto ReshapeOp::infer(Types in) const -> std::vector<TensorType> {
  TensorType r = in[ReshapeOp::x].with_shape(shape);
  for (auto d : shape)
    if (d < 0)
      detail::fail("negative dimension in reshape target ", shape_str(shape));
  // num_elements() refuses types beyond the limits, so neither product overflows.
  if (r.num_elements() != in[ReshapeOp::x].num_elements())
    detail::fail("reshape ", shape_str(in[ReshapeOp::x].shape), " -> ", shape_str(shape),
                 " changes the element count");
  return {r};
}

auto PermuteOp::infer(Types in) const -> std::vector<TensorType> {
  const auto& x = in[PermuteOp::x];
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

auto SliceOp::infer(Types in) const -> std::vector<TensorType> {
  const auto& x = in[SliceOp::x];
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

auto ConcatOp::infer(Types in) const -> std::vector<TensorType> {
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

auto CastOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_float(in[CastOp::x], "input");
  detail::require(is_float(dtype),
                  "cast target must be a float type, got " + std::string(name(dtype)));
  return {TensorType(in[CastOp::x].shape, dtype)};
}

auto FAttentionOp::infer(Types in) const -> std::vector<TensorType> {
  const auto &q = in[FAttentionOp::q], &k = in[FAttentionOp::k], &v = in[FAttentionOp::v],
             &p = in[FAttentionOp::positions];
  detail::require_float(q, "q");
  detail::require_float(k, "k");
  detail::require_float(v, "v");
  detail::require_int_index(p, "position_ids");
  detail::require(q_heads > 0 && kv_heads > 0 && head_dim > 0 && q_heads % kv_heads == 0,
                  "q_heads must be a positive multiple of kv_heads");
  detail::require(history >= 0, "history must be >= 0");
  detail::require(!window || (*window > 0 && causal),
                  "window must be > 0, on causal attention only");
  detail::require(q.rank() == 4 && q.dim(2) == q_heads && q.dim(3) == head_dim,
                  "q must be [B, L, " + std::to_string(q_heads) + ", " + std::to_string(head_dim) +
                      "], got " + shape_str(q.shape));
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

auto MLPOp::infer(Types in) const -> std::vector<TensorType> {
  const auto &x = in[MLPOp::x], &g = in[MLPOp::gate], &u = in[MLPOp::up], &d = in[MLPOp::down];
  detail::require_float(x, "input");
  for (const auto* w : {&g, &u, &d})
    detail::require_weight(*w, "MLP weight");
  detail::require_min_rank(x, 1, "input");
  detail::require(g.rank() == 2 && u.rank() == 2 && d.rank() == 2, "MLP weights must be rank 2");
  for (const auto* w : {&g, &u, &d})
    detail::require(!w->quant || quant_stored_as_rows(*w->quant) == transpose_b,
                    transpose_b ? "quantized MLP weights are logical [in, out]: transpose_b must "
                                  "be false"
                                : "ggml-quantized MLP weights are stored [out, in]: transpose_b "
                                  "must be true");
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

auto MoEOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require(experts >= 1 && experts <= (std::int64_t{1} << 20), "experts = ", experts,
                  " must be in [1, 2^20]");
  detail::require(top_k >= 1 && top_k <= experts, "top_k = ", top_k,
                  " must be in [1, experts = ", experts, "]");
  detail::require(static_cast<std::int64_t>(in.size()) == MoEOp::first_expert + 3 * experts,
                  "MoE with ", experts, " experts takes 2 + 3 * ", experts,
                  " operands (x, router, gate/up/down per "
                  "expert), got ",
                  in.size());
  const auto& x = in[MoEOp::x];
  detail::require_float(x, "input");
  detail::require_min_rank(x, 1, "input");
  const std::int64_t h = x.dim(-1);
  auto io = [&](std::int64_t in_dim, std::int64_t out_dim) {
    return transpose_b ? std::vector<std::int64_t>{out_dim, in_dim}
                       : std::vector<std::int64_t>{in_dim, out_dim};
  };
  for (std::size_t i = 1; i < in.size(); ++i) {
    // Experts (i >= 2) may also be ggml blocks, stored [out, in] as a float HF weight is.
    const bool ggml = i >= 2 && in[i].quant && quant_stored_as_rows(*in[i].quant) && transpose_b;
    detail::require(
        ggml || (is_float(in[i].dtype) && !in[i].quant && in[i].layout == Layout::row_major),
        "MoE weight #", i,
        " must be a float row-major tensor (experts: or ggml blocks read with "
        "transpose_b), got ",
        in[i]);
    detail::require(in[i].rank() == 2, "MoE weight #", i, " must be rank 2, got ", in[i]);
  }
  detail::require(in[MoEOp::router].shape == io(h, experts), "router must be ",
                  shape_str(io(h, experts)), " for hidden ", h, " and ", experts, " experts, got ",
                  in[MoEOp::router]);
  const std::int64_t i0 =
      transpose_b ? in[MoEOp::first_expert].shape[0] : in[MoEOp::first_expert].shape[1];
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto& g = in[static_cast<std::size_t>(MoEOp::first_expert + 3 * e)];
    const auto& u = in[static_cast<std::size_t>(MoEOp::first_expert + 1 + 3 * e)];
    const auto& d = in[static_cast<std::size_t>(MoEOp::first_expert + 2 + 3 * e)];
    detail::require(g.shape == io(h, i0) && u.shape == io(h, i0) && d.shape == io(i0, h), "expert ",
                    e, " weights do not match hidden ", h, " / intermediate ", i0, ": gate ", g,
                    ", up ", u, ", down ", d);
  }
  return {x};
}

auto ArgMaxOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_float(in[ArgMaxOp::x], "input");
  auto shape = in[ArgMaxOp::x].shape;
  shape[detail::norm_axis(axis, in[ArgMaxOp::x].rank())] = 1;
  return {TensorType(shape, DType::i32)};
}

auto TopKOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_float(in[TopKOp::x], "input");
  auto shape = in[TopKOp::x].shape;
  const auto a = detail::norm_axis(axis, in[TopKOp::x].rank());
  detail::require(k >= 1 && k <= shape[a],
                  "k = " + std::to_string(k) + " must be in [1, " + std::to_string(shape[a]) + "]");
  shape[a] = k;
  return {TensorType(shape, in[TopKOp::x].dtype), TensorType(shape, DType::i32)};
}

} // namespace tpullm::ir::top
