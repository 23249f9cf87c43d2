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
                (t.dtype == DType::i4 && !q.zero_point && !q.min) || (u && q.zero_point != q.min),
            std::string(what) +
                " must be i8 or i4 (symmetric) or u4 / u8 with zero points or mins, got " +
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

} // namespace tpullm::ir::detail

namespace tpullm::ir::tpu {

auto EmbeddingOp::infer(Types in) const -> std::vector<TensorType> {
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

auto AddRMSNormOp::infer(Types in) const -> std::vector<TensorType> {
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

auto MatMulOp::infer(Types in) const -> std::vector<TensorType> {
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

auto MatMulArgMaxOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[0], "lhs");
  const auto [K, N] = detail::require_packed(in[1], "rhs");
  (void)N;
  detail::require(in[0].shape == std::vector<std::int64_t>{1, 1, K},
                  "lhs must be [1, 1, " + std::to_string(K) + "], got " + in[0].str());
  return {TensorType({1, 1, 1}, DType::i32)};
}

auto MLPOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[0], "input");
  const auto [gk, gn] = detail::require_packed(in[1], "gate");
  const auto [uk, un] = detail::require_packed(in[2], "up");
  const auto [dk, dn] = detail::require_packed(in[3], "down");
  detail::require_act_quant(act_quant, act_scale, act_zero, "act_scale", {&in[1], &in[2]});
  detail::require_act_quant(act_quant, down_act_scale, down_act_zero, "down_act_scale", {&in[3]});
  const std::int64_t H = in[0].rank() >= 1 ? in[0].dim(-1) : -1;
  detail::require(gk == H && uk == H && dn == H && gn == un && dk == gn,
                  "MLP weights do not match hidden " + std::to_string(H) + ": gate " + in[1].str() +
                      ", up " + in[2].str() + ", down " + in[3].str());
  return {in[0]};
}

auto MoEOp::infer(Types in) const -> std::vector<TensorType> {
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
  detail::require(!act_quant || *act_quant == ActQuantKind::dynamic,
                  "MoE takes act_quant = dynamic only (no per-expert calibration), got static");
  const auto [gk0, gn0] = detail::require_packed(in[2], "expert gate");
  (void)gk0;
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto& g = in[static_cast<std::size_t>(2 + 3 * e)];
    const auto& u = in[static_cast<std::size_t>(3 + 3 * e)];
    const auto& d = in[static_cast<std::size_t>(4 + 3 * e)];
    const auto [gk, gn] = detail::require_packed(g, "expert gate");
    const auto [uk, un] = detail::require_packed(u, "expert up");
    const auto [dk, dn] = detail::require_packed(d, "expert down");
    detail::require(gk == H && uk == H && dn == H && gn == gn0 && un == gn0 && dk == gn0, "expert ",
                    e, " weights do not match hidden ", H, " / intermediate ", gn0, ": gate ", g,
                    ", up ", u, ", down ", d);
    detail::require_act_quant(act_quant, std::nullopt, std::nullopt, "act_scale", {&g, &u, &d});
  }
  return {in[0]};
}

auto RopeOp::infer(Types in) const -> std::vector<TensorType> {
  const auto &x = in[0], &c = in[1], &s = in[2];
  detail::require_act(x, "input");
  detail::require(x.rank() == 4 && x.shape[0] >= 1 && x.shape[3] % 2 == 0,
                  "input must be [B, L, heads, d] with d even, got " + x.str());
  for (const auto* t : {&c, &s})
    detail::require(t->dtype == DType::f32 && t->rank() == 2 && t->shape[1] == x.shape[3] / 2 &&
                        t->layout == Layout::row_major && !t->quant,
                    "cos/sin tables must be [P, " + std::to_string(x.shape[3] / 2) + "] f32, got " +
                        t->str());
  detail::require(c.shape == s.shape, "cos and sin tables differ: " + c.str() + " vs " + s.str());
  detail::require_batch_positions(in[3], x.shape[0], x.shape[1], "position_ids");
  return {x};
}

auto KVStoreOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[0], "rows");
  detail::require(in[0].rank() == 4 && in[0].shape[0] >= 1,
                  "rows must be [B, L, kv_heads, d], got " + in[0].str());
  detail::require_batch_positions(in[1], in[0].shape[0], in[0].shape[1], "position_ids");
  detail::require(layer >= 0, "layer must be >= 0");
  const DType t = dtype.value_or(DType::f32);
  detail::require(t == DType::f32 || t == DType::f16 || t == DType::bf16,
                  "dtype must be f32, f16 or bf16, got " + std::string(name(t)));
  return {TensorType(in[0].shape, t)};
}

auto KVAppendOp::infer(Types in) const -> std::vector<TensorType> {
  const auto &h = in[0], &n = in[1];
  detail::require_kv(h, "history");
  detail::require_kv(n, "new rows");
  detail::require(h.dtype == n.dtype,
                  "history and new rows must have one dtype, got " + h.str() + " and " + n.str());
  detail::require(h.rank() == 4 && n.rank() == 4 && h.shape[0] >= 1 && n.shape[0] == h.shape[0] &&
                      h.shape[2] == n.shape[2] && h.shape[3] == n.shape[3],
                  "history and new rows must be [B, S, kv_heads, d] and [B, L, kv_heads, d], "
                  "got " +
                      h.str() + " and " + n.str());
  detail::require_batch_positions(in[2], n.shape[0], n.shape[1], "position_ids");
  detail::require(layer >= 0, "layer must be >= 0");
  const std::int64_t slots = detail::checked_add(h.shape[1], n.shape[1], "S + L cache slots");
  return {TensorType({h.shape[0], slots, h.shape[2], h.shape[3]}, h.dtype)};
}

auto FAttentionOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[0], "q");
  detail::require_kv(in[1], "k");
  detail::require_kv(in[2], "v");
  detail::require(in[1].dtype == in[2].dtype,
                  "k and v must have one dtype, got " + in[1].str() + " and " + in[2].str());
  detail::require(kv_form == KvForm::cache || history == 0,
                  "kv_form = rows holds no history (history must be 0)");
  auto r = top::FAttentionOp::infer(in); // the shape rule is Top's
  detail::require(in[3].dtype == DType::i32, "position_ids must be i32, got " + in[3].str());
  detail::require(in[0].shape[0] == 1 || (kv_form == KvForm::cache && in[0].shape[1] == 1),
                  "a batch above 1 needs kv_form = cache and one token per row, got " +
                      in[0].str());
  return r;
}

auto AddOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[0], "lhs");
  detail::require_act(in[1], "rhs");
  detail::require(in[0].shape == in[1].shape ||
                      (in[1].rank() == 1 && in[0].rank() >= 1 && in[1].shape[0] == in[0].dim(-1)),
                  "rhs must have lhs's shape or be [N] with N its last dimension, got " +
                      in[0].str() + " and " + in[1].str());
  return {in[0]};
}

auto RoundOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_act(in[0], "input");
  detail::require(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
                  "round target must be f32, bf16 or f16, got " + std::string(name(dtype)));
  return {in[0]};
}

auto ConcatOp::infer(Types in) const -> std::vector<TensorType> {
  for (const auto& t : in)
    detail::require((t.dtype == DType::f32 || t.dtype == DType::i32) &&
                        t.layout == Layout::row_major,
                    "operands must be f32 or i32 row-major, got ", t);
  return top::ConcatOp::infer(in);
}

auto GatherOp::infer(Types in) const -> std::vector<TensorType> {
  detail::require_param(in[0], "table");
  detail::require(in[0].rank() >= 1, "table must have rank >= 1");
  detail::require(in[1].dtype == DType::i32 && !in[1].quant,
                  "indices must be i32, got " + in[1].str());
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
