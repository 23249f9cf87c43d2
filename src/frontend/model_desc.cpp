// Out-of-line definitions of tpullm/frontend/model_desc.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/model_desc.hpp"

#include <algorithm>
#include <cmath>

namespace tpullm::frontend {

auto WeightRef::name() const -> std::string {
  if (const auto* p = std::get_if<PlainWeight>(&storage))
    return p->tensor.name;
  if (const auto* q = std::get_if<QuantizedWeight>(&storage))
    return q->qweight.name;
  if (const auto* g = std::get_if<GgmlWeight>(&storage))
    return g->name;
  return {};
}

} // namespace tpullm::frontend

namespace tpullm::frontend::detail {

auto DescBuilder::need(const std::string& name, std::string_view why) -> const TensorView& {
  const TensorView* v = ckpt.find(name);
  if (!v)
    throw_error(ErrorKind::invalid_input, ckpt.dir().string(), "missing tensor '", name, "' (", why,
                ")");
  used.insert(name);
  return *v;
}

auto DescBuilder::maybe(const std::string& name) -> const TensorView* {
  const TensorView* v = ckpt.find(name);
  if (v)
    used.insert(name);
  return v;
}

auto DescBuilder::plain(const std::string& name, std::vector<std::int64_t> shape,
                        WeightLayout layout, std::string_view what) -> WeightRef {
  const TensorView& v = need(name, what);
  expect_float(v);
  expect_shape(v, std::move(shape), what);
  return WeightRef{PlainWeight{v, layout}};
}

auto DescBuilder::linear(const std::string& prefix, std::int64_t k, std::int64_t n,
                         std::string_view what) -> WeightRef {
  const std::optional<LinearQuant> lq = linear_quant(cfg.quant, prefix);
  if (!lq)
    return plain(prefix + ".weight", {n, k}, WeightLayout::out_in, what);
  return quantized(prefix, *lq, k, n, what);
}

auto DescBuilder::quantized(const std::string& prefix, const LinearQuant& lq, std::int64_t k,
                            std::int64_t n, std::string_view what) -> WeightRef {
  const char* method = quant_method_name(cfg.quant.method).data();
  QuantizedWeight q;
  q.bits = lq.bits;
  q.in_features = k;
  q.out_features = n;
  q.zero_offset = lq.zero_offset;
  q.sym = lq.sym;
  q.act_order = lq.desc_act;
  q.group_size = lq.group_size == -1 ? k : lq.group_size;
  q.groups = (k + q.group_size - 1) / q.group_size;
  const std::int64_t pack = 32 / lq.bits;
  const std::string where = str_cat(ckpt.dir().string(), ": ", prefix);
  check(n % pack == 0, ErrorKind::unsupported, where, what, ": out_features ", n,
        " is not a multiple of ", pack, " (", lq.bits, "-bit packing)");
  const bool ct = lq.layout == QuantLayout::ct_packed;
  const std::string qw_name = prefix + (ct ? ".weight_packed" : ".qweight");
  const std::string qw_what = str_cat(what, " ", method, ct ? " weight_packed" : " qweight");
  switch (lq.layout) {
  case QuantLayout::gptq:
    q.format = QuantFormat::gptq;
    check(k % pack == 0, ErrorKind::unsupported, where, what, ": in_features ", k,
          " is not a multiple of ", pack, " (", lq.bits, "-bit packing)");
    q.qweight = need(qw_name, qw_what);
    expect_i32(q.qweight);
    expect_shape(q.qweight, {k / pack, n}, str_cat(qw_what, " [K/", pack, ", N]"));
    break;
  case QuantLayout::awq:
    q.format = QuantFormat::awq;
    check(lq.bits == 4, ErrorKind::unsupported, where, what, ": ", lq.bits,
          "-bit AWQ GEMM weights are not supported (the layout is 4-bit only)");
    q.qweight = need(qw_name, qw_what);
    expect_i32(q.qweight);
    expect_shape(q.qweight, {k, n / pack}, str_cat(qw_what, " [K, N/", pack, "]"));
    break;
  case QuantLayout::ct_packed: {
    q.format = QuantFormat::compressed;
    check(k % pack == 0, ErrorKind::unsupported, where, what, ": in_features ", k,
          " is not a multiple of ", pack, " (", lq.bits, "-bit packing)");
    q.qweight = need(qw_name, qw_what);
    expect_i32(q.qweight);
    expect_shape(q.qweight, {n, k / pack}, str_cat(qw_what, " [N, K/", pack, "]"));
    if (const TensorView* shape = maybe(prefix + ".weight_shape")) {
      check(shape->dtype == DType::i32 || shape->dtype == DType::i64, ErrorKind::invalid_input,
            shape->where(), "dtype ", dtype_name(shape->dtype), ", expected I32 or I64");
      expect_shape(*shape, {2}, "weight_shape [2]");
      std::int64_t dims[2];
      for (int i = 0; i < 2; ++i)
        dims[i] = shape->dtype == DType::i32 ? shape->to_i32()[static_cast<std::size_t>(i)]
                                             : shape->to_i64()[static_cast<std::size_t>(i)];
      check(dims[0] == n && dims[1] == k, ErrorKind::invalid_input, shape->where(),
            "weight_shape [", dims[0], ", ", dims[1], "] is not the linear's [", n, ", ", k, "]");
    }
    break;
  }
  }
  // What every consumer of a quantized linear needs (the interpreter's dequantizer and the
  // kernel repacking alike) is checked here, once, so import and verify accept the same files.
  check(q.group_size > 0 && k % q.group_size == 0, ErrorKind::unsupported, where, what,
        ": group_size ", q.group_size, " does not divide in_features ", k);
  check(lq.bits != 4 || (k % 8 == 0 && n % 8 == 0), ErrorKind::unsupported, where, what,
        ": 4-bit weights need in_features and out_features that are multiples of 8, got ", k,
        " and ", n);
  if (ct) {
    q.scales = need(prefix + ".weight_scale", str_cat(what, " weight_scale"));
    expect_float(q.scales);
    expect_shape(q.scales, {n, q.groups}, str_cat(what, " weight_scale [N, K/group]"));
  } else {
    q.scales = need(prefix + ".scales", str_cat(what, " scales"));
    check(q.scales.dtype == DType::f16, ErrorKind::unsupported, q.scales.where(), "dtype ",
          dtype_name(q.scales.dtype), " is not supported for ", method, " scales (F16 only)");
    expect_shape(q.scales, {q.groups, n}, str_cat(what, " scales [K/group, N]"));
  }
  const std::string z_name = prefix + (ct ? ".weight_zero_point" : ".qzeros");
  const TensorView* z = nullptr;
  if (q.format == QuantFormat::gptq || (q.format == QuantFormat::awq && lq.zero_point) ||
      (ct && !lq.sym))
    z = &need(z_name, str_cat(what, ct ? " weight_zero_point" : " qzeros"));
  else if (q.format == QuantFormat::awq)
    z = maybe(z_name); // symmetric AWQ-layout exports may still store their (midpoint) zeros
  if (z) {
    q.qzeros = *z;
    expect_i32(*q.qzeros);
    if (ct)
      expect_shape(*q.qzeros, {n / pack, q.groups},
                   str_cat(what, " weight_zero_point [N/", pack, ", K/group]"));
    else
      expect_shape(*q.qzeros, {q.groups, n / pack},
                   str_cat(what, " qzeros [K/group, N/", pack, "]"));
    if (opts.check_g_idx_values && q.zero_offset != 0) {
      const auto zv = q.qzeros->to_i32();
      const std::uint32_t mask = (1u << lq.bits) - 1;
      for (std::size_t i = 0; i < zv.size(); ++i)
        for (std::int64_t j = 0; j < pack; ++j) {
          const std::int64_t zero =
              ((static_cast<std::uint32_t>(zv[i]) >> (lq.bits * j)) & mask) + q.zero_offset;
          check(zero >= 0 && zero <= static_cast<std::int64_t>(mask), ErrorKind::invalid_input,
                q.qzeros->where(), "zero point ", zero, " (stored ", zero - q.zero_offset,
                " + offset ", q.zero_offset, ") at element ", i, " is outside [0, ", mask, "]");
        }
    }
  }
  if (q.format != QuantFormat::awq) {
    const std::string g_name = prefix + (ct ? ".weight_g_idx" : ".g_idx");
    if (const TensorView* g = maybe(g_name)) {
      expect_i32(*g);
      expect_shape(*g, {k}, str_cat(what, " g_idx [K]"));
      q.g_idx = *g;
      if (opts.check_g_idx_values) {
        const auto idx = g->to_i32();
        for (std::int64_t i = 0; i < k; ++i) {
          const std::int32_t gi = idx[static_cast<std::size_t>(i)];
          check(gi >= 0 && gi < q.groups, ErrorKind::invalid_input, g->where(), "g_idx[", i,
                "] = ", gi, " is outside [0, ", q.groups, ")");
          if (gi != i / q.group_size)
            q.g_idx_trivial = false;
        }
      } else {
        q.g_idx_trivial = false;
      }
    } else {
      check(!lq.desc_act, ErrorKind::invalid_input, where, what,
            ": desc_act (act-order) checkpoint has no g_idx tensor '", g_name, "'");
    }
  }
  if (ct) { // the GPTQ layout with exact zeros, once per linear (docs on QuantFormat)
    q.qweight = transposed(q.qweight);
    q.scales = transposed(q.scales);
    if (q.qzeros)
      q.qzeros = transposed(*q.qzeros);
  }
  return WeightRef{std::move(q)};
}

auto DescBuilder::transposed(const TensorView& t) -> TensorView {
  const std::int64_t rows = t.shape.at(0), cols = t.shape.at(1);
  const std::size_t es = dtype_size(t.dtype);
  auto buf = std::make_shared<std::vector<std::byte>>(t.bytes.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      std::memcpy(buf->data() + static_cast<std::size_t>(c * rows + r) * es,
                  t.bytes.data() + static_cast<std::size_t>(r * cols + c) * es, es);
  TensorView v = t;
  v.shape = {cols, rows};
  v.bytes = std::span<const std::byte>(*buf);
  v.keepalive = std::shared_ptr<const void>(buf);
  return v;
}

} // namespace tpullm::frontend::detail

namespace tpullm::frontend {

ModelDesc describe_config(const HfConfig& cfg) {
  ModelDesc d;
  d.family = cfg.family;
  d.dims = ModelDims{cfg.hidden_size,         cfg.intermediate_size,      cfg.num_hidden_layers,
                     cfg.num_attention_heads, cfg.num_key_value_heads,    cfg.head_dim,
                     cfg.vocab_size,          cfg.max_position_embeddings};
  if (cfg.rope.type == RopeType::yarn) {
    const double scaled =
        std::floor(static_cast<double>(cfg.rope.original_max_position_embeddings) *
                   cfg.rope.factor);
    if (scaled > static_cast<double>(d.dims.max_position))
      d.dims.max_position = static_cast<std::int64_t>(std::min(scaled, 0x1p31));
  }
  d.rope = cfg.rope;
  d.sliding_windows = cfg.sliding_windows;
  d.norm_eps = cfg.rms_norm_eps;
  d.tie_word_embeddings = cfg.tie_word_embeddings;
  d.qkv_bias = cfg.qkv_bias;
  d.o_bias = cfg.o_bias;
  d.qk_norm = cfg.qk_norm;
  d.quant = cfg.quant;
  d.moe = cfg.moe;
  d.bos_token_id = cfg.bos_token_id;
  d.eos_token_ids = cfg.eos_token_ids;
  d.torch_dtype = cfg.torch_dtype;
  d.config = cfg;
  return d;
}

ModelDesc describe_model(const HfConfig& cfg, std::shared_ptr<const Checkpoint> ckpt,
                         const LoadOptions& opts) {
  check(ckpt != nullptr, ErrorKind::internal, "describe_model", "null checkpoint");
  ModelDesc d = describe_config(cfg);
  d.dir = ckpt->dir();
  check(!cfg.moe.enabled() || cfg.quant.method == QuantMethod::none, ErrorKind::unsupported,
        ckpt->dir().string(), "quantized (", quant_method_name(cfg.quant.method), ") ",
        family_name(cfg.family),
        " checkpoints are not supported: mixture-of-experts weights "
        "must be F32, F16 or BF16");
  d.checkpoint = ckpt;

  detail::DescBuilder b(cfg, *ckpt, opts);
  const ModelFamily f = cfg.family;
  const ModelDims& m = d.dims;
  const std::int64_t q_dim = m.q_dim(), kv_dim = m.kv_dim();

  d.embedding = b.plain(hf_embedding_name(f), {m.vocab, m.hidden}, WeightLayout::table,
                        "embedding [vocab, hidden]");
  d.final_norm =
      b.plain(hf_final_norm_name(f), {m.hidden}, WeightLayout::vector, "final norm [hidden]");
  check(!cfg.tie_word_embeddings || !linear_quant(cfg.quant, "lm_head"), ErrorKind::unsupported,
        ckpt->dir().string(), "a quantized lm_head tied to the float embedding is not supported");
  if (cfg.tie_word_embeddings) {
    d.lm_head = WeightRef{PlainWeight{d.embedding.tensor(), WeightLayout::out_in}};
    if (ckpt->contains(hf_lm_head_name(f)))
      b.used.insert(hf_lm_head_name(f)); // a saved copy of a tied head is ignored, as in HF
  } else if (linear_quant(cfg.quant, "lm_head")) {
    d.lm_head = b.linear("lm_head", m.hidden, m.vocab, "lm_head [vocab, hidden] (quantized)");
  } else {
    d.lm_head = b.plain(hf_lm_head_name(f), {m.vocab, m.hidden}, WeightLayout::out_in,
                        "lm_head [vocab, hidden] (tie_word_embeddings is false)");
  }

  d.layers.resize(static_cast<std::size_t>(m.layers));
  for (std::int64_t i = 0; i < m.layers; ++i) {
    LayerWeights& L = d.layers[static_cast<std::size_t>(i)];
    const auto lp = [&](LinearSlot s) { return hf_linear_prefix(f, i, s); };
    L.attn_norm = b.plain(hf_norm_name(f, i, NormSlot::attn), {m.hidden}, WeightLayout::vector,
                          "attention norm [hidden]");
    L.mlp_norm = b.plain(hf_norm_name(f, i, NormSlot::mlp), {m.hidden}, WeightLayout::vector,
                         "mlp norm [hidden]");
    L.q = b.linear(lp(LinearSlot::q), m.hidden, q_dim, "q_proj [heads*head_dim, hidden]");
    L.k = b.linear(lp(LinearSlot::k), m.hidden, kv_dim, "k_proj [kv_heads*head_dim, hidden]");
    L.v = b.linear(lp(LinearSlot::v), m.hidden, kv_dim, "v_proj [kv_heads*head_dim, hidden]");
    L.o = b.linear(lp(LinearSlot::o), q_dim, m.hidden, "o_proj [hidden, heads*head_dim]");
    if (cfg.moe.sparse_layer(i)) {
      const MoeConfig& e = cfg.moe;
      L.moe.router = b.plain(hf_router_name(f, i), {e.experts, m.hidden}, WeightLayout::out_in,
                             "router [experts, hidden]");
      for (std::int64_t x = 0; x < e.experts; ++x) {
        const auto ep = [&](ExpertSlot s) { return hf_expert_prefix(f, i, x, s) + ".weight"; };
        const std::int64_t I = e.expert_intermediate;
        ExpertWeights w;
        w.gate = b.plain(ep(ExpertSlot::gate), {I, m.hidden}, WeightLayout::out_in,
                         "expert gate [expert_intermediate, hidden]");
        w.up = b.plain(ep(ExpertSlot::up), {I, m.hidden}, WeightLayout::out_in,
                       "expert up [expert_intermediate, hidden]");
        w.down = b.plain(ep(ExpertSlot::down), {m.hidden, I}, WeightLayout::out_in,
                         "expert down [hidden, expert_intermediate]");
        L.moe.experts.push_back(std::move(w));
      }
    } else {
      L.gate = b.linear(lp(LinearSlot::gate), m.hidden, m.intermediate,
                        "gate_proj [intermediate, hidden]");
      L.up =
          b.linear(lp(LinearSlot::up), m.hidden, m.intermediate, "up_proj [intermediate, hidden]");
      L.down = b.linear(lp(LinearSlot::down), m.intermediate, m.hidden,
                        "down_proj [hidden, intermediate]");
    }
    L.q_bias = b.optional_plain(lp(LinearSlot::q) + ".bias", cfg.qkv_bias, q_dim,
                                "q_proj bias [heads*head_dim]");
    L.k_bias = b.optional_plain(lp(LinearSlot::k) + ".bias", cfg.qkv_bias, kv_dim,
                                "k_proj bias [kv_heads*head_dim]");
    L.v_bias = b.optional_plain(lp(LinearSlot::v) + ".bias", cfg.qkv_bias, kv_dim,
                                "v_proj bias [kv_heads*head_dim]");
    L.o_bias =
        b.optional_plain(lp(LinearSlot::o) + ".bias", cfg.o_bias, m.hidden, "o_proj bias [hidden]");
    L.q_norm = b.optional_plain(hf_norm_name(f, i, NormSlot::q), cfg.qk_norm, m.head_dim,
                                "q_norm [head_dim]");
    L.k_norm = b.optional_plain(hf_norm_name(f, i, NormSlot::k), cfg.qk_norm, m.head_dim,
                                "k_norm [head_dim]");
  }

  for (const std::string& name : ckpt->names()) {
    if (b.used.count(name) || hf_is_ignorable_tensor(f, name))
      continue;
    if (opts.allow_unused_tensors) {
      d.unused_tensors.push_back(name);
      continue;
    }
    throw_error(ErrorKind::invalid_input, ckpt->at(name).where(),
                "unexpected tensor: not used by a ", family_name(f),
                " model with this config (e.g. a bias while attention_bias is false, or a "
                "layer index >= num_hidden_layers)");
  }
  return d;
}

} // namespace tpullm::frontend
