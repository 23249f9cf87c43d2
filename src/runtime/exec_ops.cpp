// One handler per Tpu op: maps an instruction onto a kernel call of the reference library.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "exec_call.hpp"
#include "tpullm/kernels/elementwise.hpp"
#include "tpullm/kernels/embedding_gather.hpp"
#include "tpullm/kernels/flash_attention.hpp"
#include "tpullm/kernels/int8_linear.hpp"
#include "tpullm/kernels/matmul.hpp"
#include "tpullm/kernels/mlp.hpp"
#include "tpullm/kernels/moe.hpp"
#include "tpullm/kernels/packed_gather.hpp"
#include "tpullm/kernels/rms_norm.hpp"
#include "tpullm/memory/kv_geometry.hpp"
#include "tpullm/kernels/rope_gather.hpp"
#include "tpullm/kernels/sampling.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::runtime::detail {

namespace {

using codegen::TensorRef;
namespace k = tpullm::kernels;

template <class T>
std::span<const T> span_of(const void* p, std::int64_t n) {
  return {static_cast<const T*>(p), static_cast<std::size_t>(n)};
}
template <class T>
std::span<T> mspan_of(void* p, std::int64_t n) {
  return {static_cast<T*>(p), static_cast<std::size_t>(n)};
}

/// Calls f with a typed span over a float parameter (f32 / bf16 / f16 storage).
template <class F>
void with_param(const TensorRef& r, const void* p, std::int64_t n, F&& f) {
  switch (r.type.dtype) {
  case ir::DType::f32:
    return f(span_of<float>(p, n));
  case ir::DType::bf16:
    return f(span_of<bf16_t>(p, n));
  case ir::DType::f16:
    return f(span_of<f16_t>(p, n));
  default:
    break;
  }
  throw_error(ErrorKind::unsupported, "", "parameter type ", r.type.str(), " has no kernel");
}

/// f(span) over a KV cache of n values (`r`'s type: f32, bf16, f16, or i8 kv_rows: a span of
/// kv8_t over its codes and scales).
template <class F>
void with_kv(const TensorRef& r, const void* p, std::int64_t n, F&& f) {
  if (r.type.quant && r.type.quant->format == ir::QuantFormat::kv_rows) {
    const std::int64_t d = r.type.shape.back();
    return f(span_of<k::kv8_t>(p, r.type.with_shape({n / d, d}).byte_size()));
  }
  with_param(r, p, n, std::forward<F>(f));
}

/// [rows, last] view of a row-major activation ref for this call.
struct Rows {
  std::int64_t rows, cols;
};
Rows rows_cols(const Call& c, const TensorRef& r) {
  const std::int64_t cols = r.type.rank() ? r.type.shape.back() : 1;
  return {c.elems(r) / std::max<std::int64_t>(cols, 1), cols};
}

const k::PackedWeights& packed(const Call& c, std::size_t i);

void exec(const ir::tpu::EmbeddingOp&, Call& c) {
  using Op = ir::tpu::EmbeddingOp;
  const TensorRef& table = c.in.operands[Op::table];
  const std::int64_t L = c.elems(c.in.operands[Op::ids]);
  auto ids = span_of<std::int32_t>(c.operand(Op::ids), L);
  if (table.type.layout == ir::Layout::panels) { // the tied lm_head weight, [H, V]
    const k::PackedWeights& w = packed(c, Op::table);
    k::packed_embedding_gather(ids, w, mspan_of<float>(c.result(0), L * w.K), c.split);
    return;
  }
  const std::int64_t V = table.type.shape[0], H = table.type.shape[1];
  auto out = mspan_of<float>(c.result(0), L * H);
  const k::EmbeddingShape shape{V, H};
  with_param(table, c.weight(table.weight).bytes.data(), V * H,
             [&](auto t) { k::embedding_gather(ids, t, out, shape, c.split); });
}

void exec(const ir::tpu::RMSNormOp& o, Call& c) {
  using Op = ir::tpu::RMSNormOp;
  const auto [rows, H] = rows_cols(c, c.in.operands[Op::x]);
  const TensorRef& g = c.in.operands[Op::gamma];
  const void* gp = g.buffer.region == ir::Region::weight ? c.weight(g.weight).bytes.data()
                                                         : c.operand(Op::gamma, false);
  with_param(g, gp, H, [&](auto gamma) {
    k::rms_norm(span_of<float>(c.operand(Op::x), rows * H), gamma,
                mspan_of<float>(c.result(0), rows * H), {rows, H}, o.eps, c.split);
  });
}

void exec(const ir::tpu::AddRMSNormOp& o, Call& c) {
  using Op = ir::tpu::AddRMSNormOp;
  const auto [rows, H] = rows_cols(c, c.in.operands[Op::x]);
  const TensorRef& g = c.in.operands[Op::gamma];
  const void* gp = g.buffer.region == ir::Region::weight ? c.weight(g.weight).bytes.data()
                                                         : c.operand(Op::gamma, false);
  with_param(g, gp, H, [&](auto gamma) {
    k::add_rms_norm(span_of<float>(c.operand(Op::x), rows * H),
                    span_of<float>(c.operand(Op::residual), rows * H),
                    mspan_of<float>(c.result(0), rows * H), gamma,
                    mspan_of<float>(c.result(1), rows * H), {rows, H}, o.eps, c.split);
  });
}

const k::PackedWeights& packed(const Call& c, std::size_t i) {
  const TensorRef& w = c.in.operands.at(i);
  const WeightRef& ref = c.weight(w.weight);
  check(ref.packed != nullptr, ErrorKind::internal, c.in.where, "operand ", i,
        " is not a packed weight");
  return *ref.packed;
}

/// Whether a linear's act_quant runs on the W8A8 kernels (kernels/int8_linear.hpp): static
/// always (its weights are i8 per channel, the verifier's rule), dynamic when the weights are
/// i8 with one scale per output channel in natural order (what --mode int8 writes); every other
/// dynamic op rounds x to int8 per weight group in the weight-only kernels (XPrecision::int8).
bool runs_w8a8(ir::ActQuantKind kind, std::initializer_list<const k::PackedWeights*> ws) {
  if (kind == ir::ActQuantKind::static_tensor)
    return true;
  for (const k::PackedWeights* w : ws)
    if (w->format != k::WeightFormat::int8 || w->group_size != w->K || !w->k_perm.empty())
      return false;
  return true;
}

/// The weight-only kernels' precision of an op's act_quant (int8 when dynamic, else exact).
k::XPrecision x_precision(const std::optional<ir::ActQuantKind>& kind) {
  return kind == ir::ActQuantKind::dynamic ? k::XPrecision::int8 : k::XPrecision::exact;
}

/// The kernel's activation quantization of a W8A8 op's attributes (static: scale, zero).
k::ActQuant act_quant(ir::ActQuantKind kind, const std::optional<float>& scale,
                      const std::optional<std::int64_t>& zero) {
  k::ActQuant a;
  if (kind == ir::ActQuantKind::static_tensor) {
    a.kind = k::ActQuant::Kind::static_tensor;
    a.scale = scale.value_or(0.0f);
    a.zero = static_cast<std::int32_t>(zero.value_or(0));
  }
  return a;
}

void exec(const ir::tpu::MatMulOp& o, Call& c) {
  using Op = ir::tpu::MatMulOp;
  const k::PackedWeights& w = packed(c, Op::w);
  const std::int64_t M = c.elems(c.in.operands[Op::x]) / w.K;
  std::span<const float> bias;
  if (c.in.operands.size() == 3) {
    const TensorRef& b = c.in.operands[Op::bias];
    const void* bp = b.buffer.region == ir::Region::weight ? c.weight(b.weight).bytes.data()
                                                           : c.operand(Op::bias, false);
    bias = span_of<float>(bp, w.N);
  }
  if (o.act_quant && runs_w8a8(*o.act_quant, {&w})) { // W8A8 (--mode int8)
    k::linear_w8a8(span_of<float>(c.operand(Op::x), M * w.K), w, bias,
                   mspan_of<float>(c.result(0), M * w.N), {M, w.K, w.N},
                   act_quant(*o.act_quant, o.act_scale, o.act_zero), c.split);
    return;
  }
  k::linear(span_of<float>(c.operand(Op::x), M * w.K), w, bias,
            mspan_of<float>(c.result(0), M * w.N), {M, w.K, w.N}, c.split,
            x_precision(o.act_quant));
}

void exec(const ir::tpu::MatMulArgMaxOp& o, Call& c) {
  using Op = ir::tpu::MatMulArgMaxOp;
  const k::PackedWeights& w = packed(c, Op::w);
  // Logits in column chunks through the linear machinery; only the running best survives.
  constexpr std::int64_t kChunk = 8192; // columns per chunk (a multiple of the 32-col panel)
  std::vector<float> y(static_cast<std::size_t>(std::min(kChunk, w.N)));
  const float* x = c.f32_in(Op::x);
  std::vector<float> xp;
  const float* xk = k::detail::prepare_x(x, 1, w, xp);
  float best = 0;
  std::int64_t best_i = -1;
  for (std::int64_t n0 = 0; n0 < w.N; n0 += kChunk) {
    const std::int64_t n1 = std::min(w.N, n0 + kChunk);
    k::detail::LinearArgs a;
    a.x = xk;
    a.ldx = w.stored_rows();
    a.v = {&w, 0, w.stored_rows(), n0 / k::kPanelCols, (n1 + k::kPanelCols - 1) / k::kPanelCols};
    a.y = y.data();
    a.ldy = n1 - n0;
    a.M = 1;
    a.xprec = x_precision(o.act_quant);
    k::detail::linear_view(a, c.split);
    const std::int64_t i =
        k::argmax(std::span<const float>(y.data(), static_cast<std::size_t>(n1 - n0)));
    if (best_i < 0 || y[static_cast<std::size_t>(i)] > best) {
      best = y[static_cast<std::size_t>(i)];
      best_i = n0 + i;
    }
  }
  *reinterpret_cast<std::int32_t*>(c.result(0)) = static_cast<std::int32_t>(best_i);
}

void exec(const ir::tpu::MLPOp& o, Call& c) {
  using Op = ir::tpu::MLPOp;
  const k::PackedWeights& g = packed(c, Op::gate);
  const k::PackedWeights& u = packed(c, Op::up);
  const k::PackedWeights& d = packed(c, Op::down);
  const std::int64_t H = g.K, I = g.N;
  const std::int64_t M = c.elems(c.in.operands[Op::x]) / H;
  if (o.act_quant && runs_w8a8(*o.act_quant, {&g, &u, &d})) { // W8A8 (--mode int8)
    k::swiglu_mlp_w8a8(span_of<float>(c.operand(Op::x), M * H), g, u, d,
                       mspan_of<float>(c.result(0), M * H), {M, H, I},
                       act_quant(*o.act_quant, o.act_scale, o.act_zero),
                       act_quant(*o.act_quant, o.down_act_scale, o.down_act_zero),
                       static_cast<std::size_t>(c.local_memory), c.split);
    return;
  }
  k::swiglu_mlp(span_of<float>(c.operand(Op::x), M * H), g, u, d,
                mspan_of<float>(c.result(0), M * H), {M, H, I},
                static_cast<std::size_t>(c.local_memory), c.split, x_precision(o.act_quant));
}

void exec(const ir::tpu::MoEOp& o, Call& c) {
  using Op = ir::tpu::MoEOp;
  const k::PackedWeights& router = packed(c, Op::router);
  std::vector<k::MoeExpert> experts(static_cast<std::size_t>(o.experts));
  for (std::int64_t e = 0; e < o.experts; ++e) {
    const std::size_t i = Op::expert_gate(e); // then up, down
    experts[static_cast<std::size_t>(e)] = {&packed(c, i), &packed(c, i + 1), &packed(c, i + 2)};
  }
  const std::int64_t H = router.K, I = experts[0].gate->N;
  const std::int64_t M = c.elems(c.in.operands[Op::x]) / H;
  // W8A8 (--mode int8): dynamic per-row scales only; act-quant dynamic over other integer
  // expert weights: x rounded to int8 per weight group
  bool all_w8a8 = o.act_quant.has_value();
  for (std::size_t e = 0; all_w8a8 && e < experts.size(); ++e)
    all_w8a8 = runs_w8a8(*o.act_quant, {experts[e].gate, experts[e].up, experts[e].down});
  std::optional<k::ActQuant> w8a8;
  if (all_w8a8)
    w8a8 = act_quant(*o.act_quant, std::nullopt, std::nullopt);
  k::moe_mlp(span_of<float>(c.operand(Op::x), M * H), router, experts,
             mspan_of<float>(c.result(0), M * H), {M, H, I, o.experts, o.top_k, o.renormalize},
             static_cast<std::size_t>(c.local_memory), c.split, w8a8,
             w8a8 ? k::XPrecision::exact : x_precision(o.act_quant));
}

void exec(const ir::tpu::RopeOp& o, Call& c) {
  using Op = ir::tpu::RopeOp;
  const TensorRef& x = c.in.operands[Op::x];
  const std::int64_t heads = x.type.shape[2], d = x.type.shape[3];
  // Rows: the tile's of [1, L, ...]; every row of a batched decode's [B, 1, ...] (each its own
  // position, which rope_apply reads per row).
  const std::int64_t L = x.type.shape[0] > 1 ? x.type.shape[0] : c.rows(x);
  const TensorRef& ct = c.in.operands[Op::cos_table];
  const std::int64_t P = ct.type.shape[0], half = ct.type.shape[1];
  auto table = [&](std::size_t i) -> const float* {
    const TensorRef& t = c.in.operands[i];
    return reinterpret_cast<const float*>(t.buffer.region == ir::Region::weight
                                              ? c.weight(t.weight).bytes.data()
                                              : c.operand(i, false));
  };
  const k::RopeTablesView tables(span_of<float>(table(Op::cos_table), P * half),
                                 span_of<float>(table(Op::sin_table), P * half), P, half);
  k::rope_apply(
      span_of<float>(c.operand(Op::x), L * heads * d), mspan_of<float>(c.result(0), L * heads * d),
      span_of<std::int32_t>(c.operand(Op::positions), L), tables, {L, heads, d},
      o.mode == ir::RopeMode::halves ? k::RopeMode::halves : k::RopeMode::interleaved, c.split);
}

/// Stores n f32 values (whole head rows of d) into a KV cache of element type `t` (f32 copied;
/// f16 / bf16 rounded to nearest even; i8 quantized per head row, kernels/kv8.hpp).
void kv_convert_store(const float* src, std::byte* dst, std::int64_t n, ir::DType t,
                      std::int64_t d) {
  if (t == ir::DType::i8) {
    k::kv8_quantize_rows(src, reinterpret_cast<k::kv8_t*>(dst), n / d, d);
  } else if (t == ir::DType::f16) {
    auto* d = reinterpret_cast<std::uint16_t*>(dst);
    for (std::int64_t i = 0; i < n; ++i)
      d[i] = f32_to_f16(src[i]);
  } else if (t == ir::DType::bf16) {
    auto* d = reinterpret_cast<std::uint16_t*>(dst);
    for (std::int64_t i = 0; i < n; ++i)
      d[i] = f32_to_bf16(src[i]);
  } else {
    std::memmove(dst, src, static_cast<std::size_t>(n) * sizeof(float));
  }
}

/// A batched decode's KVStore: row b into slot row_slots[b]'s cache at position row_pos[b].
void kv_store_batched(Call& c) {
  using Op = ir::tpu::KVStoreOp;
  const TensorRef& rows = c.in.operands[Op::rows];
  const std::int64_t B = rows.type.shape[0];
  const ir::DType dt = c.in.results[0].type.dtype;
  const std::int64_t row_elems = rows.type.shape[2] * rows.type.shape[3];
  const std::int64_t row_bytes = memory::kv_row_bytes(c.in.results[0].type);
  check(static_cast<std::int64_t>(c.reg.row_slots.size()) == B && c.reg.row_pos != nullptr,
        ErrorKind::invalid_input, c.in.where, "a batched KV store of ", B,
        " rows needs a KV slot per row");
  const std::byte* src = c.operand(Op::rows, false);
  const std::int64_t offset = c.in.results[0].buffer.offset; // the layer's cache in a slot
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t p = c.reg.row_pos[b];
    check(p >= 0 && p < c.reg.kv_capacity, ErrorKind::invalid_input, c.in.where, "position ", p,
          " is beyond the KV cache of ", c.reg.kv_capacity, " slots");
    kv_convert_store(reinterpret_cast<const float*>(src) + b * row_elems,
                     c.reg.slot_kv(b) + offset + p * row_bytes, row_elems, dt, rows.type.shape[3]);
  }
}

void exec(const ir::tpu::KVStoreOp&, Call& c) {
  using Op = ir::tpu::KVStoreOp;
  if (c.in.operands[Op::rows].type.shape[0] > 1)
    return kv_store_batched(c);
  if (c.in.results[0].buffer.view)
    return; // its operand was produced in the cache slot already
  const TensorRef& rows = c.in.operands[Op::rows];
  const std::int64_t n = c.elems(rows);
  const std::int64_t cap = c.reg.kv_capacity;
  const std::int64_t row_elems = rows.type.shape[2] * rows.type.shape[3];
  const std::int64_t first = c.reg.pos0 + (c.sliced(rows) ? c.r0 : 0);
  check(first + n / row_elems <= cap, ErrorKind::invalid_input, c.in.where, "positions ", first,
        "..", first + n / row_elems - 1, " are beyond the KV cache of ", cap, " slots");
  kv_convert_store(c.f32_in(Op::rows), c.result(0), n, c.in.results[0].type.dtype,
                   rows.type.shape[3]);
}

/// A batched decode's attention: row b's one query over slot row_slots[b]'s cache up to its own
/// position row_pos[b] (flash-decoding over that row's history, split as planned).
void attention_batched(const ir::tpu::FAttentionOp& o, Call& c) {
  using Op = ir::tpu::FAttentionOp;
  const TensorRef& q = c.in.operands[Op::q];
  const TensorRef& kr = c.in.operands[Op::k];
  const TensorRef& vr = c.in.operands[Op::v];
  const std::int64_t B = q.type.shape[0], d = o.head_dim;
  check(o.kv_form == ir::KvForm::cache && kr.buffer.region == ir::Region::kv &&
            vr.buffer.region == ir::Region::kv &&
            static_cast<std::int64_t>(c.reg.row_slots.size()) == B && c.reg.row_pos != nullptr,
        ErrorKind::invalid_input, c.in.where,
        "a batched attention reads its rows' caches from their KV slots");
  k::AttentionShape s;
  s.L = 1;
  s.L_valid = 1;
  s.q_heads = o.q_heads;
  s.kv_heads = o.kv_heads;
  s.head_dim = d;
  s.scale = o.scale;
  s.causal = o.causal;
  s.window = o.window.value_or(0);
  s.S = kr.type.shape[1];
  const std::int64_t kv_elems = s.S * o.kv_heads * d;
  const std::int64_t q_elems = o.q_heads * d;
  const float* qp = c.f32_in(Op::q, false);
  float* out = c.f32_out(0, false);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int32_t* pos = c.reg.row_pos + b;
    s.S_valid = std::min<std::int64_t>(s.S, *pos + 1);
    const std::byte* vp = c.reg.slot_kv(b) + vr.buffer.offset;
    with_kv(kr, c.reg.slot_kv(b) + kr.buffer.offset, kv_elems, [&](auto ks) {
      using KV = typename decltype(ks)::element_type;
      k::flash_attention<std::remove_const_t<KV>>(
          span_of<float>(qp + b * q_elems, q_elems), ks,
          span_of<std::remove_const_t<KV>>(vp, static_cast<std::int64_t>(ks.size())),
          std::span<const std::int32_t>(pos, 1), mspan_of<float>(out + b * q_elems, q_elems), s,
          c.split, static_cast<std::size_t>(c.local_memory));
    });
  }
}

void exec(const ir::tpu::FAttentionOp& o, Call& c) {
  using Op = ir::tpu::FAttentionOp;
  if (c.in.operands[Op::q].type.shape[0] > 1)
    return attention_batched(o, c);
  const TensorRef& q = c.in.operands[Op::q];
  const std::int64_t L = c.rows(q), L_all = Call::rows_of(q.type);
  const std::int64_t r0 = c.sliced(q) ? c.r0 : 0;
  const std::int32_t* pos = c.i32_in(Op::positions, false) + r0;
  const std::int64_t d = o.head_dim;
  k::AttentionShape s;
  s.L = L;
  s.L_valid = L;
  s.q_heads = o.q_heads;
  s.kv_heads = o.kv_heads;
  s.head_dim = d;
  s.scale = o.scale;
  s.causal = o.causal;
  s.window = o.window.value_or(0);
  const TensorRef& kr = c.in.operands[Op::k];
  const std::byte* kp = c.operand(Op::k, false);
  const std::byte* vp = c.operand(Op::v, false);
  std::vector<std::int32_t> rel;
  std::span<const std::int32_t> positions(pos, static_cast<std::size_t>(L));
  if (o.kv_form == ir::KvForm::cache) {
    // Slot j holds position j: keys up to this tile's last position exist.
    s.S = Call::rows_of(kr.type);
    s.S_valid = std::min<std::int64_t>(s.S, pos[L - 1] + 1);
  } else {
    // Only the new rows: slot t holds position pos0 + t; positions relative to pos0.
    const std::int32_t base = c.i32_in(Op::positions, false)[0];
    rel.resize(static_cast<std::size_t>(L));
    for (std::int64_t i = 0; i < L; ++i)
      rel[static_cast<std::size_t>(i)] = pos[i] - base;
    positions = rel;
    s.S = L_all;
    s.S_valid = r0 + L;
  }
  const std::int64_t kv_elems = s.S * o.kv_heads * d;
  // keys and values in the cache's dtype (f32, f16, bf16 or int8), widened inside the kernel
  with_kv(kr, kp, kv_elems, [&](auto ks) {
    using KV = std::remove_const_t<typename decltype(ks)::element_type>;
    k::flash_attention<KV>(span_of<float>(c.operand(Op::q), L * o.q_heads * d), ks,
                           span_of<KV>(vp, static_cast<std::int64_t>(ks.size())), positions,
                           mspan_of<float>(c.result(0), L * o.q_heads * d), s, c.split,
                           static_cast<std::size_t>(c.local_memory));
  });
}

template <k::BinaryOp Op>
void binary(Call& c) {
  const auto [rows, cols] = rows_cols(c, c.in.operands[ir::tpu::AddOp::lhs]);
  const TensorRef& b = c.in.operands[ir::tpu::AddOp::rhs];
  const bool bcast =
      b.type.rank() == 1 &&
      b.type.num_elements() != c.in.operands[ir::tpu::AddOp::lhs].type.num_elements();
  const void* bp = b.buffer.region == ir::Region::weight ? c.weight(b.weight).bytes.data()
                                                         : c.operand(ir::tpu::AddOp::rhs, !bcast);
  k::binary(Op, span_of<float>(c.operand(ir::tpu::AddOp::lhs), rows * cols),
            span_of<float>(bp, bcast ? cols : rows * cols),
            mspan_of<float>(c.result(0), rows * cols), {rows, cols}, c.split);
}
void exec(const ir::tpu::AddOp&, Call& c) {
  binary<k::BinaryOp::add>(c);
}
void exec(const ir::tpu::MulOp&, Call& c) {
  binary<k::BinaryOp::mul>(c);
}

void exec(const ir::tpu::SiLUOp&, Call& c) {
  using Op = ir::tpu::SiLUOp;
  const std::int64_t n = c.elems(c.in.operands[Op::x]);
  k::silu(span_of<float>(c.operand(Op::x), n), mspan_of<float>(c.result(0), n), c.split);
}

void exec(const ir::tpu::SoftmaxOp&, Call& c) {
  using Op = ir::tpu::SoftmaxOp;
  const auto [rows, cols] = rows_cols(c, c.in.operands[Op::x]);
  k::softmax_rows(span_of<float>(c.operand(Op::x), rows * cols),
                  mspan_of<float>(c.result(0), rows * cols), {rows, cols}, c.split);
}

void exec(const ir::tpu::RoundOp& o, Call& c) {
  using Op = ir::tpu::RoundOp;
  const std::int64_t n = c.elems(c.in.operands[Op::x]);
  const float* x = c.f32_in(Op::x);
  float* y = c.f32_out(0);
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = o.dtype == ir::DType::bf16  ? bf16_to_f32(f32_to_bf16(x[i]))
           : o.dtype == ir::DType::f16 ? f16_to_f32(f32_to_f16(x[i]))
                                       : x[i];
}

void exec(const ir::tpu::ReshapeOp&, Call&) {}  // a view
void exec(const ir::tpu::KVAppendOp&, Call&) {} // an address

/// Strided copy: out[i...] = in[offsets + perm(i)...]; shared by Slice and Permute.
void strided_copy(const std::byte* in, const std::vector<std::int64_t>& in_strides, std::byte* out,
                  const std::vector<std::int64_t>& shape, std::int64_t esz) {
  const std::int64_t n =
      std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t off = 0;
    for (std::size_t a = 0; a < shape.size(); ++a)
      off += idx[a] * in_strides[a];
    std::memcpy(out + i * esz, in + off * esz, static_cast<std::size_t>(esz));
    for (std::size_t a = shape.size(); a-- > 0;)
      if (++idx[a] < shape[a])
        break;
      else
        idx[a] = 0;
  }
}

std::vector<std::int64_t> strides_of(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (std::size_t a = shape.size(); a-- > 1;)
    s[a - 1] = s[a] * shape[a];
  return s;
}

void exec(const ir::tpu::SliceOp& o, Call& c) {
  if (c.in.results[0].buffer.view)
    return; // a contiguous slice is an address
  const TensorRef& x = c.in.operands[ir::tpu::SliceOp::x];
  const auto st = strides_of(x.type.shape);
  std::int64_t base = 0;
  for (std::size_t a = 0; a < st.size(); ++a)
    base += o.offsets[a] * st[a];
  const std::int64_t esz = ir::byte_size(x.type.dtype, 1);
  strided_copy(c.operand(ir::tpu::SliceOp::x, false) + base * esz, st, c.result(0, false), o.sizes,
               esz);
}

void exec(const ir::tpu::PermuteOp& o, Call& c) {
  using Op = ir::tpu::PermuteOp;
  const TensorRef& x = c.in.operands[Op::x];
  const auto st = strides_of(x.type.shape);
  std::vector<std::int64_t> ps;
  for (auto a : o.order)
    ps.push_back(st[static_cast<std::size_t>(a)]);
  strided_copy(c.operand(Op::x, false), ps, c.result(0, false), c.in.results[0].type.shape,
               ir::byte_size(x.type.dtype, 1));
}

void exec(const ir::tpu::ConcatOp& o, Call& c) {
  const TensorRef& out = c.in.results[0];
  const std::int64_t r = out.type.rank();
  const std::int64_t axis = o.axis < 0 ? o.axis + r : o.axis;
  const std::int64_t esz = ir::byte_size(out.type.dtype, 1);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t a = 0; a < axis; ++a)
    outer *= out.type.shape[static_cast<std::size_t>(a)];
  for (std::int64_t a = axis + 1; a < r; ++a)
    inner *= out.type.shape[static_cast<std::size_t>(a)];
  const std::int64_t out_row = out.type.shape[static_cast<std::size_t>(axis)] * inner * esz;
  std::byte* dst = c.result(0, false);
  std::int64_t col = 0;
  for (std::size_t i = 0; i < c.in.operands.size(); ++i) {
    const TensorRef& in = c.in.operands[i];
    const std::int64_t row = in.type.shape[static_cast<std::size_t>(axis)] * inner * esz;
    const std::byte* src = c.operand(i, false);
    for (std::int64_t o2 = 0; o2 < outer; ++o2)
      std::memcpy(dst + o2 * out_row + col, src + o2 * row, static_cast<std::size_t>(row));
    col += row;
  }
}

void exec(const ir::tpu::GatherOp&, Call& c) {
  using Op = ir::tpu::GatherOp;
  const TensorRef& t = c.in.operands[Op::table];
  const std::int64_t R = t.type.shape[0];
  const std::int64_t row = t.type.num_elements() / std::max<std::int64_t>(R, 1);
  const std::int64_t n = c.in.operands[Op::indices].type.num_elements();
  const void* tp = t.buffer.region == ir::Region::weight ? c.weight(t.weight).bytes.data()
                                                         : c.operand(Op::table, false);
  k::EmbeddingShape shape{R, row};
  with_param(t, tp, R * row, [&](auto table) {
    k::embedding_gather(span_of<std::int32_t>(c.operand(Op::indices, false), n), table,
                        mspan_of<float>(c.result(0, false), n * row), shape, c.split);
  });
}

void exec(const ir::tpu::ArgMaxOp&, Call& c) {
  using Op = ir::tpu::ArgMaxOp;
  const auto [rows, cols] = rows_cols(c, c.in.operands[Op::x]);
  const float* x = c.f32_in(Op::x);
  auto* y = reinterpret_cast<std::int32_t*>(c.result(0));
  for (std::int64_t r = 0; r < rows; ++r)
    y[r] = static_cast<std::int32_t>(k::argmax(span_of<float>(x + r * cols, cols)));
}

void exec(const ir::tpu::TopKOp& o, Call& c) {
  using Op = ir::tpu::TopKOp;
  const auto [rows, cols] = rows_cols(c, c.in.operands[Op::x]);
  const float* x = c.f32_in(Op::x);
  float* vals = c.f32_out(0);
  auto* idx = reinterpret_cast<std::int32_t*>(c.result(1));
  for (std::int64_t r = 0; r < rows; ++r) {
    const k::TopK t = k::top_k(span_of<float>(x + r * cols, cols), o.k);
    for (std::int64_t j = 0; j < o.k; ++j) {
      vals[r * o.k + j] = t.values[static_cast<std::size_t>(j)];
      idx[r * o.k + j] = static_cast<std::int32_t>(t.indices[static_cast<std::size_t>(j)]);
    }
  }
}

template <class T>
requires(ir::dialect_of<T>() != ir::Dialect::tpu) void exec(const T&, Call& c) {
  throw_error(ErrorKind::internal, c.in.where, "not a Tpu instruction");
}

} // namespace

std::byte* Call::addr(const codegen::TensorRef& r, bool slice) const {
  const ir::Buffer& b = r.buffer;
  std::byte* p = nullptr;
  switch (b.region) {
  case ir::Region::input:
    p = const_cast<std::byte*>(reg.inputs[static_cast<std::size_t>(b.slot)].data()) + b.offset;
    break;
  case ir::Region::output:
    p = reg.outputs[static_cast<std::size_t>(b.slot)].data() + b.offset;
    break;
  case ir::Region::kv:
    p = reg.kv + b.offset + reg.pos0 * b.pos_stride;
    break;
  case ir::Region::arena:
    p = reg.arena + b.offset;
    break;
  case ir::Region::local:
    p = reg.local + core * reg.local_stride + b.offset;
    break;
  case ir::Region::weight:
    return const_cast<std::byte*>(weight(r.weight).bytes.data());
  }
  if (slice && sliced(r) && b.region != ir::Region::local)
    p += b.size / rows_total * r0;
  return p;
}

void execute(Call& c) {
  ir::visit_op(c.in.op, [&](const auto& o) { exec(o, c); });
}

} // namespace tpullm::runtime::detail
