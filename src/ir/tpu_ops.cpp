// Out-of-line definitions of tpullm/ir/tpu_ops.hpp (compiled once into tpullm_core).
#include "tpullm/ir/tpu_ops.hpp"

namespace tpullm::ir::detail {

std::pair<std::int64_t, std::int64_t> require_packed(const TensorType& t, const char* what) {
  require(t.rank() == 2 && t.layout == Layout::panels,
          std::string(what) + " must be a packed [K, N] weight (layout panels), got " + t.str());
  if (t.quant) {
    const QuantSpec& q = *t.quant;
    require(q.format == QuantFormat::packed,
            std::string(what) + " must use the packed quantization format, got " + t.str());
    const bool u = t.dtype == DType::u4 || t.dtype == DType::u8;
    require((t.dtype == DType::i8 && !q.zero_point && !q.min) ||
                ((t.dtype == DType::i4 || t.dtype == DType::i6) && !q.zero_point && !q.min) ||
                (u && q.zero_point != q.min) || (t.dtype == DType::u6 && q.min && !q.zero_point),
            std::string(what) +
                " must be i8, i6 or i4 (symmetric), u4 / u8 with zero points or mins, or u6 with "
                "mins, got " +
                t.str());
    require(q.group_size > 0 && t.shape[0] % q.group_size == 0,
            std::string(what) + " group size must divide K = " + std::to_string(t.shape[0]) +
                ", got " + t.str());
    require(q.super_rows == 0 ||
                (q.super_rows > 0 && !q.zero_point && q.group_size < t.shape[0] &&
                 q.super_rows % q.group_size == 0 && t.shape[0] % q.super_rows == 0),
            std::string(what) +
                " two-level scales need super rows that are a multiple of the group size and "
                "divide K, and no zero points, got " +
                t.str());
  } else {
    require(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16,
            std::string(what) + " must be f32, bf16 or f16 panels or quantized, got " + t.str());
  }
  require(t.shape[0] > 0 && t.shape[1] > 0, std::string(what) + " must not be empty");
  return {t.shape[0], t.shape[1]};
}

void require_copyable(const TensorType& t, const char* what) {
  require(t.dtype == DType::f32 || t.dtype == DType::i32,
          std::string(what) + " must be f32 or i32, got " + t.str());
  require(t.layout == Layout::row_major && !t.quant,
          std::string(what) + " must be row-major, got " + t.str());
}

void require_batch_positions(const TensorType& p, std::int64_t B, std::int64_t L,
                             const char* what) {
  require(B == 1 || L == 1, "a batch of " + std::to_string(B) +
                                " rows holds one token per row, got " + std::to_string(L));
  require(p.dtype == DType::i32 && !p.quant && p.shape == std::vector<std::int64_t>{B, L},
          std::string(what) + " must be [" + std::to_string(B) + ", " + std::to_string(L) +
              "] i32, got " + p.str());
}

void require_act_quant(const std::optional<ActQuantKind>& kind, const std::optional<float>& scale,
                       const std::optional<std::int64_t>& zero, const char* scale_name,
                       std::initializer_list<const TensorType*> weights) {
  if (!kind) {
    require(!scale && !zero, std::string(scale_name) + " needs act_quant");
    return;
  }
  if (*kind == ActQuantKind::dynamic) {
    for (const TensorType* w : weights)
      require(w->quant.has_value(), "act_quant = dynamic needs integer weights, got " + w->str());
    require(!scale && !zero, std::string("act_quant = dynamic takes no ") + scale_name);
    return;
  }
  for (const TensorType* w : weights)
    require(w->dtype == DType::i8 && w->quant && w->quant->group_size == w->shape[0] &&
                !w->quant->act_order,
            "act_quant = static needs i8 weights with one scale per output channel, got " +
                w->str());
  require(scale && std::isfinite(*scale) && *scale > 0,
          std::string("act_quant = static needs a finite ") + scale_name + " > 0");
  require(!zero || (*zero >= -128 && *zero <= 127),
          std::string(scale_name) + "'s zero point must be in [-128, 127], got " +
              std::to_string(zero.value_or(0)));
}

} // namespace tpullm::ir::detail

namespace tpullm::ir::tpu {

auto EmbeddingOp::infer(Types in) const -> std::vector<TensorType> {
  std::int64_t H = 0;
  if (in[EmbeddingOp::table].layout == Layout::panels) {
    H = detail::require_packed(in[EmbeddingOp::table], "table").first;
  } else {
    detail::require_param(in[EmbeddingOp::table], "table");
    detail::require(in[EmbeddingOp::table].rank() == 2,
                    "table must be [V, H], got " + in[EmbeddingOp::table].str());
    H = in[EmbeddingOp::table].shape[1];
  }
  detail::require(in[EmbeddingOp::ids].dtype == DType::i32 && in[EmbeddingOp::ids].rank() == 2 &&
                      in[EmbeddingOp::ids].shape[0] == 1,
                  "ids must be [1, L] i32, got " + in[EmbeddingOp::ids].str());
  return {TensorType({1, in[EmbeddingOp::ids].shape[1], H}, DType::f32)};
}

auto AddRMSNormOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[AddRMSNormOp::x], "input");
  detail::require_act(in[AddRMSNormOp::residual], "residual");
  detail::require(in[AddRMSNormOp::x].shape == in[AddRMSNormOp::residual].shape,
                  "input and residual differ: " + in[AddRMSNormOp::x].str() + " vs " +
                      in[AddRMSNormOp::residual].str());
  detail::require_param(in[AddRMSNormOp::gamma], "gamma");
  detail::require(in[AddRMSNormOp::x].rank() >= 1 &&
                      in[AddRMSNormOp::gamma].shape ==
                          std::vector<std::int64_t>{in[AddRMSNormOp::x].dim(-1)},
                  "gamma must be [H], got " + in[AddRMSNormOp::gamma].str() + " for " +
                      in[AddRMSNormOp::x].str());
  detail::require(eps >= 0, "eps must be >= 0");
  return {in[AddRMSNormOp::x], in[AddRMSNormOp::x]};
}

auto MatMulOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[MatMulOp::x], "lhs");
  const auto [K, N] = detail::require_packed(in[MatMulOp::w], "rhs");
  detail::require_act_quant(act_quant, act_scale, act_zero, "act_scale", {&in[MatMulOp::w]});
  detail::require(in[MatMulOp::x].rank() >= 1 && in[MatMulOp::x].dim(-1) == K,
                  "lhs " + in[MatMulOp::x].str() + " does not contract with rhs " +
                      in[MatMulOp::w].str());
  if (in.size() == 3)
    detail::require(in[MatMulOp::bias].dtype == DType::f32 &&
                        in[MatMulOp::bias].shape == std::vector<std::int64_t>{N},
                    "bias must be [" + std::to_string(N) + "] f32, got " +
                        in[MatMulOp::bias].str());
  auto shape = in[MatMulOp::x].shape;
  shape.back() = N;
  return {TensorType(shape, DType::f32)};
}

auto MatMulArgMaxOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[MatMulArgMaxOp::x], "lhs");
  const auto [K, N] = detail::require_packed(in[MatMulArgMaxOp::w], "rhs");
  (void)N;
  detail::require(!act_quant || *act_quant == ActQuantKind::dynamic,
                  "MatMulArgMax takes act_quant = dynamic only");
  detail::require_act_quant(act_quant, std::nullopt, std::nullopt, "act_scale",
                            {&in[MatMulArgMaxOp::w]});
  detail::require(in[MatMulArgMaxOp::x].shape == std::vector<std::int64_t>{1, 1, K},
                  "lhs must be [1, 1, " + std::to_string(K) + "], got " +
                      in[MatMulArgMaxOp::x].str());
  return {TensorType({1, 1, 1}, DType::i32)};
}

auto MLPOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[MLPOp::x], "input");
  const auto [gk, gn] = detail::require_packed(in[MLPOp::gate], "gate");
  const auto [uk, un] = detail::require_packed(in[MLPOp::up], "up");
  const auto [dk, dn] = detail::require_packed(in[MLPOp::down], "down");
  detail::require_act_quant(act_quant, act_scale, act_zero, "act_scale",
                            {&in[MLPOp::gate], &in[MLPOp::up]});
  detail::require_act_quant(act_quant, down_act_scale, down_act_zero, "down_act_scale",
                            {&in[MLPOp::down]});
  const std::int64_t H = in[MLPOp::x].rank() >= 1 ? in[MLPOp::x].dim(-1) : -1;
  detail::require(gk == H && uk == H && dn == H && gn == un && dk == gn,
                  "MLP weights do not match hidden " + std::to_string(H) + ": gate " +
                      in[MLPOp::gate].str() + ", up " + in[MLPOp::up].str() + ", down " +
                      in[MLPOp::down].str());
  // The tiled kernel hands down the intermediate in row groups of its storage (kernels'
  // row_group: quads of i8 / u8, octets of i4 / u4, 16-row blocks of i6 / u6).
  const DType dd = in[MLPOp::down].dtype;
  const std::int64_t rg = !in[MLPOp::down].quant               ? 1
                          : dd == DType::i6 || dd == DType::u6 ? 16
                          : dd == DType::i4 || dd == DType::u4 ? 8
                                                               : 4;
  detail::require(dk % rg == 0, "MLP intermediate ", dk, " must be a multiple of ", rg,
                  " (the row group of down ", in[MLPOp::down], ")");
  return {in[MLPOp::x]};
}

auto MoEOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require(experts >= 1 && experts <= (std::int64_t{1} << 20), "experts = ", experts,
                  " must be in [1, 2^20]");
  detail::require(top_k >= 1 && top_k <= experts, "top_k = ", top_k,
                  " must be in [1, experts = ", experts, "]");
  detail::require(static_cast<std::int64_t>(in.size()) == MoEOp::first_expert + 3 * experts,
                  "MoE with ", experts, " experts takes 2 + 3 * ", experts, " operands, got ",
                  in.size());
  detail::require_act(in[MoEOp::x], "input");
  detail::require_min_rank(in[MoEOp::x], 1, "input");
  const std::int64_t H = in[MoEOp::x].dim(-1);
  const auto [rk, rn] = detail::require_packed(in[MoEOp::router], "router");
  detail::require(in[MoEOp::router].dtype == DType::f32 && !in[MoEOp::router].quant && rk == H &&
                      rn == experts,
                  "router must be packed [", H, ", ", experts, "] f32, got ", in[MoEOp::router]);
  detail::require(!act_quant || *act_quant == ActQuantKind::dynamic,
                  "MoE takes act_quant = dynamic only (no per-expert calibration), got static");
  const auto [gk0, gn0] = detail::require_packed(in[MoEOp::first_expert], "expert gate");
  (void)gk0;
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto& g = in[static_cast<std::size_t>(MoEOp::first_expert + 3 * e)];
    const auto& u = in[static_cast<std::size_t>(MoEOp::first_expert + 1 + 3 * e)];
    const auto& d = in[static_cast<std::size_t>(MoEOp::first_expert + 2 + 3 * e)];
    const auto [gk, gn] = detail::require_packed(g, "expert gate");
    const auto [uk, un] = detail::require_packed(u, "expert up");
    const auto [dk, dn] = detail::require_packed(d, "expert down");
    detail::require(gk == H && uk == H && dn == H && gn == gn0 && un == gn0 && dk == gn0, "expert ",
                    e, " weights do not match hidden ", H, " / intermediate ", gn0, ": gate ", g,
                    ", up ", u, ", down ", d);
    detail::require_act_quant(act_quant, std::nullopt, std::nullopt, "act_scale", {&g, &u, &d});
  }
  return {in[MoEOp::x]};
}

auto RopeOp::infer(Types in) const -> std::vector<TensorType> {
  const auto &x = in[RopeOp::x], &c = in[RopeOp::cos_table], &s = in[RopeOp::sin_table];
  detail::require_act(x, "input");
  detail::require(x.rank() == 4 && x.shape[0] >= 1 && x.shape[3] % 2 == 0,
                  "input must be [B, L, heads, d] with d even, got " + x.str());
  for (const auto* t : {&c, &s})
    detail::require(t->dtype == DType::f32 && t->rank() == 2 && t->shape[1] == x.shape[3] / 2 &&
                        t->layout == Layout::row_major && !t->quant,
                    "cos/sin tables must be [P, " + std::to_string(x.shape[3] / 2) + "] f32, got " +
                        t->str());
  detail::require(c.shape == s.shape, "cos and sin tables differ: " + c.str() + " vs " + s.str());
  detail::require_batch_positions(in[RopeOp::positions], x.shape[0], x.shape[1], "position_ids");
  return {x};
}

auto KVStoreOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[KVStoreOp::rows], "rows");
  detail::require(in[KVStoreOp::rows].rank() == 4 && in[KVStoreOp::rows].shape[0] >= 1,
                  "rows must be [B, L, kv_heads, d], got " + in[KVStoreOp::rows].str());
  detail::require_batch_positions(in[KVStoreOp::positions], in[KVStoreOp::rows].shape[0],
                                  in[KVStoreOp::rows].shape[1], "position_ids");
  detail::require(layer >= 0, "layer must be >= 0");
  const DType t = dtype.value_or(DType::f32);
  detail::require(t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::i8,
                  "dtype must be f32, f16, bf16 or i8, got " + std::string(name(t)));
  return {kv_cache_type(in[KVStoreOp::rows].shape, t)};
}

auto KVAppendOp::infer(Types in) const -> std::vector<TensorType> {
  const auto &h = in[KVAppendOp::history], &n = in[KVAppendOp::rows];
  detail::require_kv(h, "history");
  detail::require_kv(n, "new rows");
  detail::require(h.dtype == n.dtype,
                  "history and new rows must have one dtype, got " + h.str() + " and " + n.str());
  detail::require(h.rank() == 4 && n.rank() == 4 && h.shape[0] >= 1 && n.shape[0] == h.shape[0] &&
                      h.shape[2] == n.shape[2] && h.shape[3] == n.shape[3],
                  "history and new rows must be [B, S, kv_heads, d] and [B, L, kv_heads, d], "
                  "got " +
                      h.str() + " and " + n.str());
  detail::require_batch_positions(in[KVAppendOp::positions], n.shape[0], n.shape[1],
                                  "position_ids");
  detail::require(layer >= 0, "layer must be >= 0");
  const std::int64_t slots = detail::checked_add(h.shape[1], n.shape[1], "S + L cache slots");
  return {h.with_shape({h.shape[0], slots, h.shape[2], h.shape[3]})};
}

auto FAttentionOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[FAttentionOp::q], "q");
  detail::require_kv(in[FAttentionOp::k], "k");
  detail::require_kv(in[FAttentionOp::v], "v");
  detail::require(in[FAttentionOp::k].dtype == in[FAttentionOp::v].dtype,
                  "k and v must have one dtype, got " + in[FAttentionOp::k].str() + " and " +
                      in[FAttentionOp::v].str());
  detail::require(kv_form == KvForm::cache || history == 0,
                  "kv_form = rows holds no history (history must be 0)");
  // the shape rule is Top's, on the shapes (Top's K and V are float; the cache's type was checked)
  std::vector<TensorType> shapes(in.begin(), in.end());
  for (auto i : {FAttentionOp::k, FAttentionOp::v})
    shapes[i] = TensorType(shapes[i].shape, DType::f32);
  auto r = top::FAttentionOp::infer(shapes);
  detail::require(in[FAttentionOp::positions].dtype == DType::i32,
                  "position_ids must be i32, got " + in[FAttentionOp::positions].str());
  detail::require(in[FAttentionOp::q].shape[0] == 1 ||
                      (kv_form == KvForm::cache && in[FAttentionOp::q].shape[1] == 1),
                  "a batch above 1 needs kv_form = cache and one token per row, got " +
                      in[FAttentionOp::q].str());
  return r;
}

auto AddOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[AddOp::lhs], "lhs");
  detail::require_act(in[AddOp::rhs], "rhs");
  detail::require(in[AddOp::lhs].shape == in[AddOp::rhs].shape ||
                      (in[AddOp::rhs].rank() == 1 && in[AddOp::lhs].rank() >= 1 &&
                       in[AddOp::rhs].shape[0] == in[AddOp::lhs].dim(-1)),
                  "rhs must have lhs's shape or be [N] with N its last dimension, got " +
                      in[AddOp::lhs].str() + " and " + in[AddOp::rhs].str());
  return {in[AddOp::lhs]};
}

auto RoundOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[RoundOp::x], "input");
  detail::require(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
                  "round target must be f32, bf16 or f16, got " + std::string(name(dtype)));
  return {in[RoundOp::x]};
}

auto ConcatOp::infer(Types in) const -> std::vector<TensorType> {
  for (const auto& t : in)
    detail::require((t.dtype == DType::f32 || t.dtype == DType::i32) &&
                        t.layout == Layout::row_major,
                    "operands must be f32 or i32 row-major, got ", t);
  return top::ConcatOp::infer(in);
}

auto GatherOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_param(in[GatherOp::table], "table");
  detail::require(in[GatherOp::table].rank() >= 1, "table must have rank >= 1");
  detail::require(in[GatherOp::indices].dtype == DType::i32 && !in[GatherOp::indices].quant,
                  "indices must be i32, got " + in[GatherOp::indices].str());
  auto r = top::GatherOp{0}.infer(in);
  r[0].dtype = DType::f32;
  return r;
}

std::int64_t SliceOp::view_offset(const TensorType& in) const {
  const std::int64_t r = in.rank();
  // Find the first axis whose size is not 1; every later axis must be taken whole.
  std::int64_t a = 0;
  while (a < r && sizes[static_cast<std::size_t>(a)] == 1)
    ++a;
  for (std::int64_t i = a + 1; i < r; ++i)
    if (offsets[static_cast<std::size_t>(i)] != 0 ||
        sizes[static_cast<std::size_t>(i)] != in.shape[static_cast<std::size_t>(i)])
      return -1;
  std::int64_t linear = 0;
  for (std::int64_t i = 0; i < r; ++i)
    linear = linear * in.shape[static_cast<std::size_t>(i)] + offsets[static_cast<std::size_t>(i)];
  return byte_size(in.dtype, linear);
}

} // namespace tpullm::ir::tpu
