// Out-of-line definitions of tpullm/frontend/stage_builder.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/stage_builder.hpp"

namespace tpullm::frontend::detail {

ir::Value* linear(ir::Builder& b, ir::Value* x, const std::string& name, const WeightRef& w,
                  const WeightRef& bias, const std::string& suffix) {
  ir::Value* wv = b.weight(slot_weight(name + suffix, w));
  std::vector<ir::Value*> operands{x, wv};
  if (bias.present())
    operands.push_back(b.weight(slot_weight(name + "_bias" + suffix, bias)));
  return b.create(ir::top::MatMulOp{w.stored_out_in()}, operands);
}

ir::Value* mlp(ir::Builder& b, ir::Value* x, const std::string& prefix, const LayerWeights& w,
               const std::string& suffix) {
  const bool q = w.gate.is_quantized(), t = w.gate.stored_out_in();
  if (w.up.is_quantized() == q && w.down.is_quantized() == q && w.up.stored_out_in() == t &&
      w.down.stored_out_in() == t)
    return b.create(ir::top::MLPOp{ir::Activation::silu, t},
                    {x, b.weight(slot_weight(prefix + "gate" + suffix, w.gate)),
                     b.weight(slot_weight(prefix + "up" + suffix, w.up)),
                     b.weight(slot_weight(prefix + "down" + suffix, w.down))});
  const WeightRef none;
  ir::Value* g = b.create(ir::top::SiLUOp{}, {linear(b, x, prefix + "gate", w.gate, none, suffix)});
  ir::Value* u = linear(b, x, prefix + "up", w.up, none, suffix);
  return linear(b, b.create(ir::top::MulOp{}, {g, u}), prefix + "down", w.down, none, suffix);
}

ir::Value* moe(ir::Builder& b, ir::Value* x, const std::string& prefix, const ModelDesc& d,
               const LayerWeights& w) {
  std::vector<ir::Value*> operands{x, b.weight(slot_weight(prefix + "router", w.moe.router))};
  for (std::size_t e = 0; e < w.moe.experts.size(); ++e) {
    const ExpertWeights& ew = w.moe.experts[e];
    const std::string ep = prefix + "expert." + std::to_string(e) + ".";
    operands.push_back(b.weight(slot_weight(ep + "gate", ew.gate)));
    operands.push_back(b.weight(slot_weight(ep + "up", ew.up)));
    operands.push_back(b.weight(slot_weight(ep + "down", ew.down)));
  }
  ir::top::MoEOp op;
  op.experts = static_cast<std::int64_t>(w.moe.experts.size());
  op.top_k = d.moe.top_k;
  op.renormalize = d.moe.renormalize;
  op.transpose_b = true;
  return b.create(op, operands);
}

} // namespace tpullm::frontend::detail

namespace tpullm::frontend {

namespace {

/// The keys, values and o-projected attention of one block (everything before the residual).
struct AttentionOut {
  ir::Value* out; ///< o(attention) (+ o_bias) [B, L, H]
  ir::Value* k;   ///< new keys [B, L, kv_heads, D] after RoPE
  ir::Value* v;   ///< new values [B, L, kv_heads, D]
};

/// The attention of block `s` on `input` [B, L, H] at `pos` [B, L], reading `hist_k` /
/// `hist_v` [B, S, kv_heads, D] before the new keys when S = s.history > 0.
AttentionOut attention_branch(ir::Builder& b, const ModelDesc& d, const BlockShape& s,
                              const RopeWeights& rope, ir::Value* input, ir::Value* pos,
                              ir::Value* hist_k, ir::Value* hist_v) {
  const auto& dims = d.dims;
  const LayerWeights& w = d.layers[static_cast<std::size_t>(s.layer)];
  const std::string p = "layers." + std::to_string(s.layer) + ".", &sfx = s.weight_suffix;
  const std::int64_t L = s.tokens, D = dims.head_dim, B = s.batch;
  ir::Value* x = detail::rms_norm(b, input, p + "attn_norm", w.attn_norm, d.norm_eps);
  ir::Value* q = detail::linear(b, x, p + "q", w.q, w.q_bias, sfx);
  ir::Value* k = detail::linear(b, x, p + "k", w.k, w.k_bias, sfx);
  ir::Value* v = detail::linear(b, x, p + "v", w.v, w.v_bias, sfx);
  q = b.create(ir::top::ReshapeOp{{B, L, dims.heads, D}}, {q});
  k = b.create(ir::top::ReshapeOp{{B, L, dims.kv_heads, D}}, {k});
  v = b.create(ir::top::ReshapeOp{{B, L, dims.kv_heads, D}}, {v});
  if (d.qk_norm) {
    q = detail::rms_norm(b, q, p + "q_norm", w.q_norm, d.norm_eps);
    k = detail::rms_norm(b, k, p + "k_norm", w.k_norm, d.norm_eps);
  }
  ir::Value* cos = b.create(ir::top::GatherOp{0}, {b.weight(rope.cos), pos});
  ir::Value* sin = b.create(ir::top::GatherOp{0}, {b.weight(rope.sin), pos});
  q = b.create(ir::top::RopeOp{ir::RopeMode::halves}, {q, cos, sin});
  k = b.create(ir::top::RopeOp{ir::RopeMode::halves}, {k, cos, sin});
  ir::Value *k_all = k, *v_all = v;
  if (s.history > 0) {
    k_all = b.create(ir::top::ConcatOp{1}, {hist_k, k});
    v_all = b.create(ir::top::ConcatOp{1}, {hist_v, v});
  }
  ir::top::FAttentionOp fa;
  fa.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  fa.q_heads = dims.heads;
  fa.kv_heads = dims.kv_heads;
  fa.head_dim = D;
  fa.history = s.history;
  fa.causal = true;
  // a sliding window only where it hides a key: past it, the block's history + L slots
  if (const std::int64_t win =
          d.sliding_windows.empty() ? 0 : d.sliding_windows[static_cast<std::size_t>(s.layer)];
      win > 0 && win < s.history + L)
    fa.window = win;
  ir::Value* attn = b.create(fa, {q, k_all, v_all, pos});
  return {detail::linear(b, attn, p + "o", w.o, w.o_bias, sfx), k, v};
}

/// The MLP of block `s` on the post-attention hidden `h`: mlp_norm, then the gated or routed
/// MLP (no residual add).
ir::Value* mlp_branch(ir::Builder& b, const ModelDesc& d, const BlockShape& s, ir::Value* h) {
  const LayerWeights& w = d.layers[static_cast<std::size_t>(s.layer)];
  const std::string p = "layers." + std::to_string(s.layer) + ".";
  ir::Value* n2 = detail::rms_norm(b, h, p + "mlp_norm", w.mlp_norm, d.norm_eps);
  return w.sparse() ? detail::moe(b, n2, p, d, w) : detail::mlp(b, n2, p, w, s.weight_suffix);
}

/// The stage a block variant runs as.
ir::StageKind block_stage(const BlockShape& s) {
  if (s.part == BlockPart::mlp)
    return s.tokens == 1 ? ir::StageKind::decode : ir::StageKind::prefill;
  return s.history == 0  ? ir::StageKind::prefill
         : s.tokens == 1 ? ir::StageKind::decode
                         : ir::StageKind::prefill_kv;
}

} // namespace

ir::Module build_block(const ModelDesc& d, const BlockShape& s, const RopeWeights& rope,
                       const std::string& name) {
  const auto& dims = d.dims;
  check(s.layer >= 0 && s.layer < dims.layers, ErrorKind::invalid_input, name, "layer ", s.layer,
        " out of range [0, ", dims.layers, ")");
  check(s.tokens >= 1 && s.history >= 0 && s.batch >= 1, ErrorKind::invalid_input, name,
        "bad block shape: ", s.tokens, " tokens, ", s.history, " history slots, batch ", s.batch);
  check(s.batch == 1 || (s.tokens == 1 && s.history > 0), ErrorKind::invalid_input, name,
        "a batch above 1 is a decode block (1 token, history > 0)");
  check(s.part != BlockPart::mlp || s.history == 0, ErrorKind::invalid_input, name,
        "an MLP half reads no history");
  const std::int64_t L = s.tokens, H = dims.hidden, D = dims.head_dim, B = s.batch;

  ir::Module m(name);
  ir::Function& f = m.add_function(name);
  f.set_info({block_stage(s), s.layer, std::nullopt});
  ir::Builder b(m, f);
  b.set_loc(Location{name});
  ir::Value* input = f.add_argument("input_states", ir::TensorType({B, L, H}, ir::DType::f32));
  if (s.part == BlockPart::mlp) {
    b.ret({mlp_branch(b, d, s, input)});
    return m;
  }
  ir::Value* pos = f.add_argument("position_ids", ir::TensorType({B, L}, ir::DType::i32));
  ir::Value *hist_k = nullptr, *hist_v = nullptr;
  if (s.history > 0) {
    const ir::TensorType ht({B, s.history, dims.kv_heads, D}, ir::DType::f32);
    hist_k = f.add_argument("history_k", ht);
    hist_v = f.add_argument("history_v", ht);
  }
  const AttentionOut a = attention_branch(b, d, s, rope, input, pos, hist_k, hist_v);
  if (s.part == BlockPart::attention) {
    b.ret({a.out, a.k, a.v});
    return m;
  }
  ir::Value* h = b.create(ir::top::AddOp{}, {input, a.out});
  ir::Value* out = b.create(ir::top::AddOp{}, {h, mlp_branch(b, d, s, h)});
  b.ret({out, a.k, a.v});
  return m;
}

ir::Module build_embedding(const ModelDesc& d, std::int64_t tokens, const std::string& name) {
  ir::Module m(name);
  ir::Function& f = m.add_function(name);
  f.set_info({ir::StageKind::embedding, -1, std::nullopt});
  ir::Builder b(m, f);
  b.set_loc(Location{name});
  ir::Value* ids = f.add_argument("input_ids", ir::TensorType({1, tokens}, ir::DType::i32));
  ir::Value* h =
      b.create(ir::top::GatherOp{0}, {b.weight(slot_weight("embedding", d.embedding)), ids});
  if (h->type().dtype != ir::DType::f32)
    h = b.create(ir::top::CastOp{ir::DType::f32}, {h});
  b.ret({h});
  return m;
}

ir::Module build_lm_head(const ModelDesc& d, bool greedy, const std::string& name,
                         std::int64_t batch, const std::string& weight_suffix) {
  ir::Module m(name);
  ir::Function& f = m.add_function(name);
  f.set_info({ir::StageKind::lm_head, -1, std::nullopt});
  ir::Builder b(m, f);
  b.set_loc(Location{name});
  ir::Value* h =
      f.add_argument("hidden", ir::TensorType({batch, 1, d.dims.hidden}, ir::DType::f32));
  ir::Value* n = detail::rms_norm(b, h, "final_norm", d.final_norm, d.norm_eps);
  const bool tied = d.tie_word_embeddings;
  ir::Value* head = b.weight(slot_weight((tied ? "embedding" : "lm_head") + weight_suffix,
                                         tied ? d.embedding : d.lm_head));
  // A GPTQ / AWQ head is logical [hidden, vocab] (like every such linear), a float or ggml one
  // [vocab, hidden].
  const WeightRef& head_ref = tied ? d.embedding : d.lm_head;
  ir::Value* logits = b.create(ir::top::MatMulOp{head_ref.stored_out_in()}, {n, head});
  if (greedy)
    b.ret({b.create(ir::top::ArgMaxOp{-1}, {logits})});
  else
    b.ret({logits});
  return m;
}

ir::Module build_final_norm(const ModelDesc& d, const std::string& name) {
  ir::Module m(name);
  ir::Function& f = m.add_function(name);
  f.set_info({ir::StageKind::lm_head, -1, std::nullopt});
  ir::Builder b(m, f);
  b.set_loc(Location{name});
  ir::Value* h = f.add_argument("hidden", ir::TensorType({1, 1, d.dims.hidden}, ir::DType::f32));
  // The same op and weight as lm_head's first op, so an embedding is what the head reads.
  b.ret({detail::rms_norm(b, h, "final_norm", d.final_norm, d.norm_eps)});
  return m;
}

void append_embedding_modules(std::vector<ir::Module>& out, const ModelDesc& d,
                              const StageParams& params) {
  out.push_back(build_embedding(d, params.max_input_length, "embedding"));
  out.push_back(build_embedding(d, 1, "embedding_cache"));
}

void append_head_modules(std::vector<ir::Module>& out, const ModelDesc& d,
                         const StageParams& params) {
  out.push_back(build_lm_head(d, false, "lm_head"));
  out.push_back(build_lm_head(d, true, "lm_head_greedy"));
  for (std::int64_t batch : params.decode_batch_sizes())
    out.push_back(build_lm_head(d, false, StageNames::lm_head(batch), batch));
  out.push_back(build_final_norm(d, "final_norm"));
}

std::vector<std::pair<BlockShape, std::string>> block_variants(std::int64_t i,
                                                               const StageParams& params) {
  std::vector<std::pair<BlockShape, std::string>> out;
  for (std::int64_t len : params.prefill_lengths()) {
    out.emplace_back(BlockShape{i, len, 0}, StageNames::block(i, len, params));
    if (params.with_history)
      out.emplace_back(BlockShape{i, len, params.prefill_kv_history(len)},
                       StageNames::block_kv(i, len, params));
  }
  for (std::int64_t len : params.decode_lengths())
    out.emplace_back(BlockShape{i, 1, len}, StageNames::block_cache(i, len));
  for (std::int64_t batch : params.decode_batch_sizes())
    for (std::int64_t len : params.decode_lengths())
      out.emplace_back(BlockShape{i, 1, len, batch}, StageNames::block_cache(i, len, batch));
  return out;
}

std::vector<ir::Module> build_top_modules(const ModelDesc& d, const StageParams& params) {
  params.validate(d.dims.max_position);
  const RopeWeights rope = rope_weights(d, params.seq_length); // one table for every block
  std::vector<ir::Module> out;
  append_embedding_modules(out, d, params);
  for (std::int64_t i = 0; i < d.dims.layers; ++i)
    for (const auto& [shape, name] : block_variants(i, params))
      out.push_back(build_block(d, shape, rope, name));
  append_head_modules(out, d, params);
  return out;
}

} // namespace tpullm::frontend
