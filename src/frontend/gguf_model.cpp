// A GGUF file as a ModelDesc (frontend/gguf_model.hpp).
#include "tpullm/frontend/gguf_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "tpullm/conversion/ggml_blocks.hpp"
#include "tpullm/frontend/gguf_text.hpp"

namespace tpullm::frontend {

namespace {

using conversion::GgmlType;

/// Metadata reads of one architecture's keys ("{arch}.embedding_length"), naming the file.
struct GgufKeys {
  const GgufFile& f;
  std::string arch;

  std::string key(std::string_view k) const { return arch + "." + std::string(k); }
  std::int64_t dim(std::string_view k) const {
    const auto v = f.get_int(key(k));
    check(v.has_value(), ErrorKind::invalid_input, f.source(), "missing metadata key '", key(k),
          "'");
    check(*v > 0 && *v <= (std::int64_t{1} << 31), ErrorKind::invalid_input, f.source(), "'",
          key(k), "' = ", *v, " is out of range (1 .. 2^31)");
    return *v;
  }
  std::int64_t dim_or(std::string_view k, std::int64_t def) const {
    return f.get_int(key(k)) ? dim(k) : def;
  }
};

/// ne of a tensor as "[a, b]" (innermost first, as ggml prints it).
std::string ne_str(const std::vector<std::int64_t>& ne) {
  std::string s = "[";
  for (std::size_t i = 0; i < ne.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

DType plain_dtype(GgmlType t) {
  switch (t) {
  case GgmlType::f32:
    return DType::f32;
  case GgmlType::f16:
    return DType::f16;
  case GgmlType::bf16:
    return DType::bf16;
  default:
    break;
  }
  throw_error(ErrorKind::internal, "gguf", "not a float ggml type");
}

/// Builds the weight slots of one GGUF, recording which tensors were used.
struct GgufWeights {
  const GgufFile& f;
  const LoadOptions& opts;
  std::set<std::string, std::less<>> used;

  const GgufTensor& need(const std::string& name, std::string_view what) {
    const GgufTensor* t = f.find_tensor(name);
    check(t != nullptr, ErrorKind::invalid_input, f.source(), "missing tensor '", name, "' (", what,
          ")");
    used.insert(name);
    return *t;
  }
  const GgufTensor* maybe(const std::string& name) {
    const GgufTensor* t = f.find_tensor(name);
    if (t)
      used.insert(name);
    return t;
  }

  static void expect_ne(const GgufTensor& t, std::vector<std::int64_t> ne, std::string_view what) {
    check(t.ne == ne, ErrorKind::invalid_input, t.where(), "ne ", ne_str(t.ne), ", expected ",
          ne_str(ne), " (", what, ")");
  }

  /// rows x cols of `t` starting at row `row0` as a weight slot: plain for F32 / F16 / BF16,
  /// ggml blocks for an importable block type; other types refused by name.
  static WeightRef slot(const GgufTensor& t, std::int64_t row0, std::int64_t rows,
                        std::int64_t cols, WeightLayout layout) {
    const auto info = conversion::ggml_info(t.type);
    const auto rb = conversion::ggml_row_bytes(t.type, cols);
    check(rb.has_value(), ErrorKind::invalid_input, t.where(), "rows of ", cols,
          " elements are not whole ", info.name, " blocks of ", info.block_elems);
    const auto off = static_cast<std::size_t>(row0 * *rb),
               len = static_cast<std::size_t>(rows * *rb);
    check(off + len <= t.bytes.size(), ErrorKind::invalid_input, t.where(), "holds ",
          t.bytes.size(), " bytes, fewer than ", rows, " rows of ", *rb);
    const auto bytes = t.bytes.subspan(off, len);
    if (conversion::ggml_is_float(t.type)) {
      TensorView v;
      v.name = t.name;
      v.dtype = plain_dtype(t.type);
      v.shape = layout == WeightLayout::vector ? std::vector<std::int64_t>{cols}
                                               : std::vector<std::int64_t>{rows, cols};
      v.bytes = bytes;
      v.keepalive = t.keepalive;
      v.source = t.source;
      return WeightRef{PlainWeight{std::move(v), layout}};
    }
    check(conversion::ggml_packing(t.type).bits != 0, ErrorKind::unsupported, t.where(), "type ",
          info.name,
          " is not imported by tpullm (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, "
          "Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS are)");
    check(layout != WeightLayout::vector, ErrorKind::unsupported, t.where(),
          "a 1-D tensor of type ", info.name, " (norms and biases must be F32, F16 or BF16)");
    GgmlWeight g;
    g.type = t.type;
    g.rows = rows;
    g.cols = cols;
    g.bytes = bytes;
    g.keepalive = t.keepalive;
    g.name = t.name;
    g.source = t.source;
    g.layout = layout;
    return WeightRef{std::move(g)};
  }

  /// A [rows, cols] matrix (ne [cols, rows]).
  WeightRef matrix(const std::string& name, std::int64_t rows, std::int64_t cols,
                   WeightLayout layout, std::string_view what) {
    const GgufTensor& t = need(name, what);
    expect_ne(t, {cols, rows}, what);
    return slot(t, 0, rows, cols, layout);
  }
  /// A vector [n] (norm gamma, bias).
  WeightRef vector(const std::string& name, std::int64_t n, std::string_view what) {
    const GgufTensor& t = need(name, what);
    expect_ne(t, {n}, what);
    return slot(t, 0, 1, n, WeightLayout::vector);
  }
  WeightRef optional_vector(const std::string& name, bool expected, std::int64_t n,
                            std::string_view what) {
    return expected ? vector(name, n, what) : WeightRef{};
  }
};

/// Undoes llama.cpp's LlamaModel.permute on the rows of a q / k weight or bias: within each of
/// `heads` heads of d rows, stored row 2i + j holds HF row j * d / 2 + i (j in {0, 1}). Returns
/// the slot with its rows in HF order (an owned copy; whole rows move, blocks are untouched).
WeightRef unpermute_rows(const WeightRef& w, std::int64_t heads, std::int64_t rows,
                         const std::string& where) {
  check(heads > 0 && rows % heads == 0 && (rows / heads) % 2 == 0, ErrorKind::invalid_input, where,
        rows, " rows do not split into ", heads, " heads of an even size");
  std::span<const std::byte> src;
  if (const auto* p = std::get_if<PlainWeight>(&w.storage))
    src = p->tensor.bytes;
  else
    src = w.ggml().bytes;
  const std::size_t row_bytes = src.size() / static_cast<std::size_t>(rows);
  auto buf = std::make_shared<std::vector<std::byte>>(src.size());
  const std::int64_t d = rows / heads, half = d / 2;
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t i = 0; i < half; ++i)
      for (std::int64_t j = 0; j < 2; ++j) {
        const std::int64_t hf = h * d + j * half + i, stored = h * d + 2 * i + j;
        std::memcpy(buf->data() + static_cast<std::size_t>(hf) * row_bytes,
                    src.data() + static_cast<std::size_t>(stored) * row_bytes, row_bytes);
      }
  WeightRef out = w;
  const std::span<const std::byte> bytes(*buf);
  const std::shared_ptr<const void> keep(buf);
  if (auto* p = std::get_if<PlainWeight>(&out.storage)) {
    p->tensor.bytes = bytes;
    p->tensor.keepalive = keep;
  } else {
    auto& g = std::get<GgmlWeight>(out.storage);
    g.bytes = bytes;
    g.keepalive = keep;
  }
  return out;
}

std::string blk(std::int64_t i, std::string_view name) {
  return "blk." + std::to_string(i) + "." + std::string(name);
}

} // namespace

HfConfig gguf_config(const GgufFile& f) {
  const auto arch = f.get_string("general.architecture");
  check(arch.has_value(), ErrorKind::invalid_input, f.source(),
        "missing metadata key 'general.architecture'");
  HfConfig c;
  const GgufKeys k{f, *arch};
  const std::int64_t experts = f.get_int(k.key("expert_count")).value_or(0);
  if (*arch == "llama")
    c.family = experts > 0 ? ModelFamily::mixtral : ModelFamily::llama;
  else if (*arch == "qwen2")
    c.family = ModelFamily::qwen2;
  else if (*arch == "qwen3")
    c.family = ModelFamily::qwen3;
  else if (*arch == "qwen3moe")
    c.family = ModelFamily::qwen3_moe;
  else
    throw_error(ErrorKind::unsupported, f.source(), "general.architecture '", *arch,
                "' is not supported (llama, qwen2, qwen3, qwen3moe)");
  c.model_type = *arch;
  c.hidden_size = k.dim("embedding_length");
  c.num_hidden_layers = k.dim("block_count");
  c.num_attention_heads = k.dim("attention.head_count");
  c.num_key_value_heads = k.dim_or("attention.head_count_kv", c.num_attention_heads);
  c.head_dim_explicit = f.get_int(k.key("attention.key_length")).has_value();
  c.head_dim = k.dim_or("attention.key_length", c.hidden_size / c.num_attention_heads);
  check(k.dim_or("attention.value_length", c.head_dim) == c.head_dim, ErrorKind::unsupported,
        f.source(), "'", k.key("attention.value_length"), "' differs from the key length ",
        c.head_dim);
  check(c.num_attention_heads % c.num_key_value_heads == 0 && c.head_dim % 2 == 0,
        ErrorKind::invalid_input, f.source(), c.num_attention_heads, " heads, ",
        c.num_key_value_heads, " kv heads of ", c.head_dim,
        " dims: heads must be a multiple of kv heads and the head size even");
  check(k.dim_or("rope.dimension_count", c.head_dim) == c.head_dim, ErrorKind::unsupported,
        f.source(), "'", k.key("rope.dimension_count"),
        "' = ", f.get_int(k.key("rope.dimension_count")).value_or(0), " rotates part of a head of ",
        c.head_dim, " (partial rotary embeddings are not supported)");
  c.max_position_embeddings = k.dim("context_length");
  const auto eps = f.get_float(k.key("attention.layer_norm_rms_epsilon"));
  check(eps.has_value() && *eps >= 0 && *eps < 1, ErrorKind::invalid_input, f.source(),
        "missing or bad '", k.key("attention.layer_norm_rms_epsilon"), "'");
  c.rms_norm_eps = *eps;
  c.rope.theta = f.get_float(k.key("rope.freq_base")).value_or(10000.0);
  check(c.rope.theta > 0, ErrorKind::invalid_input, f.source(), "'", k.key("rope.freq_base"),
        "' must be > 0");
  const std::string scaling = f.get_string(k.key("rope.scaling.type")).value_or("none");
  if (scaling == "linear") {
    c.rope.type = RopeType::linear;
    c.rope.factor = f.get_float(k.key("rope.scaling.factor")).value_or(1.0);
    check(c.rope.factor > 0, ErrorKind::invalid_input, f.source(), "'",
          k.key("rope.scaling.factor"), "' must be > 0");
  } else if (scaling == "yarn") {
    // llama.cpp's YaRN: the frequencies as transformers computes them from factor, the original
    // context and the two betas, and cos/sin multiplied by (0.1 ln(factor) + 1) * attn_factor.
    c.rope.type = RopeType::yarn;
    const auto factor = f.get_float(k.key("rope.scaling.factor"));
    check(factor.has_value() && *factor > 0, ErrorKind::invalid_input, f.source(), "'",
          k.key("rope.scaling.factor"), "' must be given and > 0 for yarn scaling");
    c.rope.factor = *factor;
    c.rope.original_max_position_embeddings =
        k.dim_or("rope.scaling.original_context_length", c.max_position_embeddings);
    c.rope.beta_fast = f.get_float(k.key("rope.scaling.yarn_beta_fast")).value_or(32.0);
    c.rope.beta_slow = f.get_float(k.key("rope.scaling.yarn_beta_slow")).value_or(1.0);
    check(c.rope.beta_fast > 0 && c.rope.beta_slow > 0, ErrorKind::invalid_input, f.source(),
          "'", k.key("rope.scaling.yarn_beta_fast"), "' and '", k.key("rope.scaling.yarn_beta_slow"),
          "' must be > 0");
    const double attn = f.get_float(k.key("rope.scaling.attn_factor")).value_or(1.0);
    check(attn > 0, ErrorKind::invalid_input, f.source(), "'", k.key("rope.scaling.attn_factor"),
          "' must be > 0");
    c.rope.attention_factor = (c.rope.factor > 1 ? 0.1 * std::log(c.rope.factor) + 1.0 : 1.0) * attn;
    const double log_mul = f.get_float(k.key("rope.scaling.yarn_log_multiplier")).value_or(0.0);
    check(log_mul == 0, ErrorKind::unsupported, f.source(), "'",
          k.key("rope.scaling.yarn_log_multiplier"), "' = ", log_mul,
          " (DeepSeek-style YaRN attention scaling) is not supported");
    const double ext = f.get_float(k.key("rope.scaling.yarn_ext_factor")).value_or(-1.0);
    check(ext < 0 || ext == 1, ErrorKind::unsupported, f.source(), "'",
          k.key("rope.scaling.yarn_ext_factor"), "' = ", ext,
          " is not supported (only YaRN's own blend, 1)");
  } else {
    check(scaling == "none", ErrorKind::unsupported, f.source(), "'", k.key("rope.scaling.type"),
          "' = '", scaling,
          "' is not supported (none, linear, yarn; llama3 scaling comes as the "
          "rope_freqs tensor)");
  }
  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  check(embd != nullptr && embd->ne.size() == 2, ErrorKind::invalid_input, f.source(),
        "missing tensor 'token_embd.weight' [hidden, vocab]");
  c.vocab_size = embd->ne[1];
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor(blk(0, "attn_q.bias")) != nullptr;
  c.o_bias = f.find_tensor(blk(0, "attn_output.bias")) != nullptr;
  c.qk_norm = f.find_tensor(blk(0, "attn_q_norm.weight")) != nullptr;
  check(c.family != ModelFamily::qwen2 || c.qkv_bias, ErrorKind::invalid_input, f.source(),
        "a qwen2 model needs q / k / v biases (blk.0.attn_q.bias is missing)");
  if (const auto b = f.get_int("tokenizer.ggml.bos_token_id"))
    c.bos_token_id = *b;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"})
    if (const auto e = f.get_int(key);
        e && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), *e) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(*e);
  if (c.family == ModelFamily::mixtral || c.family == ModelFamily::qwen3_moe) {
    MoeConfig& m = c.moe;
    m.layout = c.family == ModelFamily::mixtral ? MoeLayout::mixtral : MoeLayout::qwen3_moe;
    m.experts = k.dim("expert_count");
    m.top_k = k.dim("expert_used_count");
    check(m.top_k <= m.experts, ErrorKind::invalid_input, f.source(), "'",
          k.key("expert_used_count"), "' = ", m.top_k, " exceeds the ", m.experts, " experts");
    // llama.cpp renormalizes the top-k weights of both unless {arch}.expert_weights_norm says
    // otherwise (a Qwen3-MoE checkpoint with norm_topk_prob false).
    m.renormalize = f.get_bool(k.key("expert_weights_norm")).value_or(true);
    m.sparse_step = 1;
    // A layer without a router keeps a dense MLP (Qwen3-MoE mlp_only_layers): the converter
    // writes its ffn_gate / ffn_up / ffn_down as a dense model's.
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
      if (f.find_tensor(blk(i, "ffn_gate_inp.weight")) == nullptr &&
          f.find_tensor(blk(i, "ffn_gate.weight")) != nullptr)
        m.dense_layers.push_back(i);
    if (c.family == ModelFamily::qwen3_moe) {
      m.expert_intermediate = k.dim("expert_feed_forward_length");
      c.intermediate_size = k.dim_or("feed_forward_length", m.expert_intermediate);
    } else {
      c.intermediate_size = k.dim("feed_forward_length");
      m.expert_intermediate = c.intermediate_size;
    }
  } else {
    c.intermediate_size = k.dim("feed_forward_length");
  }
  return c;
}

ModelDesc load_gguf_model(const std::filesystem::path& path, const LoadOptions& opts) {
  const GgufFile f = GgufFile::open(path, opts.access);
  const HfConfig cfg = gguf_config(f);
  ModelDesc d = describe_config(cfg);
  d.dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  d.source_file = path;
  // The vocabulary and chat template inside the file (else tokenizer files beside it, if any).
  if (TextFiles text = text_files_from_gguf(f.metadata(), path.string()); !text.empty())
    d.text = std::move(text);

  GgufWeights b{f, opts, {}};
  const ModelDims& m = d.dims;
  const std::int64_t q_dim = m.q_dim(), kv_dim = m.kv_dim();
  if (const GgufTensor* rf = b.maybe("rope_freqs.weight")) {
    GgufWeights::expect_ne(*rf, {m.head_dim / 2}, "rope_freqs [head_dim / 2]");
    check(rf->type == GgmlType::f32, ErrorKind::invalid_input, rf->where(), "must be F32, is ",
          conversion::ggml_name(rf->type));
    d.rope_freq_factors.resize(static_cast<std::size_t>(m.head_dim / 2));
    std::memcpy(d.rope_freq_factors.data(), rf->bytes.data(), rf->bytes.size());
  }

  d.embedding = b.matrix("token_embd.weight", m.vocab, m.hidden, WeightLayout::table,
                         "embedding [hidden, vocab]");
  d.final_norm = b.vector("output_norm.weight", m.hidden, "final norm [hidden]");
  d.lm_head = cfg.tie_word_embeddings ? d.embedding
                                      : b.matrix("output.weight", m.vocab, m.hidden,
                                                 WeightLayout::out_in, "lm_head [hidden, vocab]");
  if (cfg.tie_word_embeddings && d.lm_head.is_ggml())
    std::get<GgmlWeight>(d.lm_head.storage).layout = WeightLayout::out_in;
  else if (cfg.tie_word_embeddings)
    std::get<PlainWeight>(d.lm_head.storage).layout = WeightLayout::out_in;

  const bool permuted = cfg.model_type == "llama"; // LlamaModel.permute in the converter
  d.layers.resize(static_cast<std::size_t>(m.layers));
  for (std::int64_t i = 0; i < m.layers; ++i) {
    LayerWeights& L = d.layers[static_cast<std::size_t>(i)];
    const auto lin = [&](std::string_view n, std::int64_t rows, std::int64_t cols,
                         std::string_view what) {
      return b.matrix(blk(i, n), rows, cols, WeightLayout::out_in, what);
    };
    L.attn_norm = b.vector(blk(i, "attn_norm.weight"), m.hidden, "attention norm [hidden]");
    L.mlp_norm = b.vector(blk(i, "ffn_norm.weight"), m.hidden, "mlp norm [hidden]");
    L.q = lin("attn_q.weight", q_dim, m.hidden, "attn_q [hidden, heads*head_dim]");
    L.k = lin("attn_k.weight", kv_dim, m.hidden, "attn_k [hidden, kv_heads*head_dim]");
    L.v = lin("attn_v.weight", kv_dim, m.hidden, "attn_v [hidden, kv_heads*head_dim]");
    L.o = lin("attn_output.weight", m.hidden, q_dim, "attn_output [heads*head_dim, hidden]");
    L.q_bias = b.optional_vector(blk(i, "attn_q.bias"), cfg.qkv_bias, q_dim, "attn_q bias");
    L.k_bias = b.optional_vector(blk(i, "attn_k.bias"), cfg.qkv_bias, kv_dim, "attn_k bias");
    L.v_bias = b.optional_vector(blk(i, "attn_v.bias"), cfg.qkv_bias, kv_dim, "attn_v bias");
    L.o_bias =
        b.optional_vector(blk(i, "attn_output.bias"), cfg.o_bias, m.hidden, "attn_output bias");
    L.q_norm = b.optional_vector(blk(i, "attn_q_norm.weight"), cfg.qk_norm, m.head_dim,
                                 "attn_q_norm [head_dim]");
    L.k_norm = b.optional_vector(blk(i, "attn_k_norm.weight"), cfg.qk_norm, m.head_dim,
                                 "attn_k_norm [head_dim]");
    if (permuted) {
      L.q = unpermute_rows(L.q, m.heads, q_dim, blk(i, "attn_q.weight"));
      L.k = unpermute_rows(L.k, m.kv_heads, kv_dim, blk(i, "attn_k.weight"));
      if (L.q_bias.present()) {
        L.q_bias = unpermute_rows(L.q_bias, m.heads, q_dim, blk(i, "attn_q.bias"));
        L.k_bias = unpermute_rows(L.k_bias, m.kv_heads, kv_dim, blk(i, "attn_k.bias"));
      }
    }
    if (cfg.moe.sparse_layer(i)) {
      const MoeConfig& e = cfg.moe;
      const std::int64_t I = e.expert_intermediate, E = e.experts;
      L.moe.router = lin("ffn_gate_inp.weight", E, m.hidden, "ffn_gate_inp [hidden, experts]");
      check(!L.moe.router.is_quantized(), ErrorKind::unsupported,
            f.find_tensor(blk(i, "ffn_gate_inp.weight"))->where(),
            "a quantized router is not supported (F32, F16, BF16)");
      const auto stacked = [&](std::string_view n, std::int64_t rows, std::int64_t cols) {
        const GgufTensor& t = b.need(blk(i, n), "stacked experts");
        GgufWeights::expect_ne(t, {cols, rows, E}, "stacked experts [in, out, experts]");
        return &t;
      };
      const GgufTensor* g = stacked("ffn_gate_exps.weight", I, m.hidden);
      const GgufTensor* u = stacked("ffn_up_exps.weight", I, m.hidden);
      const GgufTensor* dn = stacked("ffn_down_exps.weight", m.hidden, I);
      for (std::int64_t x = 0; x < E; ++x) {
        ExpertWeights w;
        w.gate = GgufWeights::slot(*g, x * I, I, m.hidden, WeightLayout::out_in);
        w.up = GgufWeights::slot(*u, x * I, I, m.hidden, WeightLayout::out_in);
        w.down = GgufWeights::slot(*dn, x * m.hidden, m.hidden, I, WeightLayout::out_in);
        L.moe.experts.push_back(std::move(w));
      }
    } else {
      L.gate = lin("ffn_gate.weight", m.intermediate, m.hidden, "ffn_gate [hidden, intermediate]");
      L.up = lin("ffn_up.weight", m.intermediate, m.hidden, "ffn_up [hidden, intermediate]");
      L.down = lin("ffn_down.weight", m.hidden, m.intermediate, "ffn_down [intermediate, hidden]");
    }
  }

  for (const GgufTensor& t : f.tensors()) {
    if (b.used.count(t.name))
      continue;
    if (opts.allow_unused_tensors) {
      d.unused_tensors.push_back(t.name);
      continue;
    }
    throw_error(ErrorKind::invalid_input, t.where(), "unexpected tensor: not used by a ",
                cfg.model_type, " model with this metadata (e.g. a layer index >= block_count)");
  }
  return d;
}

} // namespace tpullm::frontend
