#pragma once
/// Random checkpoints at real model shapes: presets of real architectures (Qwen2.5-0.5B,
/// Llama-3.2-1B, and a tiny one for tests) written as HuggingFace checkpoints (config.json in
/// the family's own format + model.safetensors) with random weights at a real model's scale.
/// For speed and memory measurements and tests at real sizes; the weights carry no meaning.
///
/// Values are a pure function of (seed, tensor name, element index): every run with the same
/// seed writes byte-identical files, and a tensor's values do not depend on the other tensors
/// (a --layers 1 variant holds the same layer 0 as the full model). With RandomQuant, the
/// decoder linears are written in GPTQ or AWQ layout instead (random integers, not a
/// quantization of the float values). Linear weights, the
/// embedding and biases are approximately normal(0, std) (the sum of four uniform 16-bit
/// integers, rescaled: Irwin-Hall, bounded at 3.46 std; integer arithmetic, so no platform's
/// libm changes a bit); RMSNorm gammas are 1 + the same noise.

#include "tpullm/frontend/families.hpp"
#include "tpullm/frontend/hf_config.hpp"
#include "tpullm/frontend/quant_pack.hpp"
#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/frontend/safetensors_writer.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/float16.hpp"
#include "tpullm/support/output_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpullm::frontend {

/// The architecture of a model to generate: what its config.json says.
struct ModelPreset {
  std::string name;                         ///< "qwen2.5-0.5b", "llama3.2-1b", "tiny"
  ModelFamily family = ModelFamily::llama;  ///< llama or qwen2 (config.json format)
  std::int64_t hidden = 0;                  ///< hidden_size
  std::int64_t intermediate = 0;            ///< intermediate_size
  std::int64_t layers = 0;                  ///< num_hidden_layers
  std::int64_t heads = 0;                   ///< num_attention_heads
  std::int64_t kv_heads = 0;                ///< num_key_value_heads
  std::int64_t head_dim = 0;                ///< per-head dimension
  bool head_dim_in_config = false;          ///< write "head_dim" (Llama 3.2 does)
  std::int64_t vocab = 0;                   ///< vocab_size
  std::int64_t max_position = 0;            ///< max_position_embeddings
  bool tie_word_embeddings = false;         ///< lm_head is the embedding (no lm_head.weight)
  double rms_norm_eps = 1e-6;               ///< rms_norm_eps
  RopeConfig rope;                          ///< rope_theta and rope_scaling
  std::optional<std::int64_t> bos_token_id; ///< written only when inside the vocabulary
  std::optional<std::int64_t> eos_token_id; ///< written only when inside the vocabulary
  /// qwen3_moe only: routed experts per layer (num_experts), experts per token
  /// (num_experts_per_tok) and one expert's width (moe_intermediate_size); every layer sparse,
  /// norm_topk_prob true (as Qwen3-30B-A3B).
  std::int64_t experts = 0, top_k = 0, moe_intermediate = 0;

  /// Throws Error(invalid_input) naming the preset when a dimension is not positive, the
  /// heads do not group, head_dim is odd, or hidden != heads * head_dim without an explicit
  /// head_dim.
  void validate() const {
    const std::string where = "preset " + name;
    const std::initializer_list<std::pair<std::int64_t, const char*>> dims = {
        {hidden, "hidden"}, {intermediate, "intermediate"}, {layers, "layers"},
        {heads, "heads"},   {kv_heads, "kv_heads"},         {head_dim, "head_dim"},
        {vocab, "vocab"},   {max_position, "max_position"}};
    for (const auto& [v, what] : dims)
      check(v > 0 && v <= (std::int64_t{1} << 31), ErrorKind::invalid_input, where, what, " = ", v,
            " must be in [1, 2^31]");
    check(heads % kv_heads == 0, ErrorKind::invalid_input, where, "heads ", heads,
          " is not a multiple of kv_heads ", kv_heads);
    check(head_dim % 2 == 0, ErrorKind::invalid_input, where, "head_dim ", head_dim,
          " must be even");
    check(head_dim_in_config || hidden == heads * head_dim, ErrorKind::invalid_input, where,
          "hidden ", hidden, " != heads * head_dim without an explicit head_dim");
    check(family == ModelFamily::llama || family == ModelFamily::qwen2 ||
              family == ModelFamily::qwen3_moe,
          ErrorKind::unsupported, where, "family ", family_name(family),
          " has no config writer (llama, qwen2, qwen3_moe)");
    check(family != ModelFamily::qwen3_moe ||
              (experts > 0 && top_k > 0 && top_k <= experts && moe_intermediate > 0),
          ErrorKind::invalid_input, where, "a qwen3_moe preset needs 1 <= top_k (", top_k,
          ") <= experts (", experts, ") and moe_intermediate > 0");
  }
  /// Number of weights (elements of every tensor in the checkpoint).
  std::int64_t parameters() const;
};

/// The presets: Qwen2.5-0.5B (qwen2: hidden 896, 24 layers, 14/2 heads, head_dim 64,
/// intermediate 4864, vocab 151936, tied, q/k/v bias, rope_theta 1e6, eps 1e-6, 32768
/// positions), Llama-3.2-1B (llama: hidden 2048, 16 layers, 32/8 heads, head_dim 64,
/// intermediate 8192, vocab 128256, tied, rope_theta 5e5 with llama3 scaling factor 32, low 1,
/// high 4, original 8192, eps 1e-5, 131072 positions) and tiny (llama: hidden 64, 2 layers,
/// 4/2 heads, head_dim 16, intermediate 128, vocab 512, untied head, 2048 positions) and
/// Qwen3-30B-A3B (qwen3_moe: hidden 2048, 48 layers, 32/4 heads of 128, q/k norm, 128 experts
/// of width 768, top 8 renormalised, vocab 151936, untied, rope_theta 1e6, eps 1e-6, 40960
/// positions).
inline const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = [] {
    std::vector<ModelPreset> v;
    ModelPreset q;
    q.name = "qwen2.5-0.5b";
    q.family = ModelFamily::qwen2;
    q.hidden = 896;
    q.intermediate = 4864;
    q.layers = 24;
    q.heads = 14;
    q.kv_heads = 2;
    q.head_dim = 64;
    q.vocab = 151936;
    q.max_position = 32768;
    q.tie_word_embeddings = true;
    q.rms_norm_eps = 1e-6;
    q.rope.theta = 1e6;
    q.bos_token_id = 151643;
    q.eos_token_id = 151643;
    v.push_back(q);

    ModelPreset l;
    l.name = "llama3.2-1b";
    l.family = ModelFamily::llama;
    l.hidden = 2048;
    l.intermediate = 8192;
    l.layers = 16;
    l.heads = 32;
    l.kv_heads = 8;
    l.head_dim = 64;
    l.head_dim_in_config = true;
    l.vocab = 128256;
    l.max_position = 131072;
    l.tie_word_embeddings = true;
    l.rms_norm_eps = 1e-5;
    l.rope.type = RopeType::llama3;
    l.rope.theta = 5e5;
    l.rope.factor = 32;
    l.rope.low_freq_factor = 1;
    l.rope.high_freq_factor = 4;
    l.rope.original_max_position_embeddings = 8192;
    l.bos_token_id = 128000;
    l.eos_token_id = 128001;
    v.push_back(l);

    ModelPreset t;
    t.name = "tiny";
    t.family = ModelFamily::llama;
    t.hidden = 64;
    t.intermediate = 128;
    t.layers = 2;
    t.heads = 4;
    t.kv_heads = 2;
    t.head_dim = 16;
    t.vocab = 512;
    t.max_position = 2048;
    t.tie_word_embeddings = false;
    t.rms_norm_eps = 1e-5;
    t.rope.theta = 10000;
    t.bos_token_id = 1;
    t.eos_token_id = 2;
    v.push_back(t);

    ModelPreset m;
    m.name = "qwen3-30b-a3b";
    m.family = ModelFamily::qwen3_moe;
    m.hidden = 2048;
    m.intermediate = 6144;
    m.layers = 48;
    m.heads = 32;
    m.kv_heads = 4;
    m.head_dim = 128;
    m.head_dim_in_config = true;
    m.vocab = 151936;
    m.max_position = 40960;
    m.tie_word_embeddings = false;
    m.rms_norm_eps = 1e-6;
    m.rope.theta = 1e6;
    m.bos_token_id = 151643;
    m.eos_token_id = 151645;
    m.experts = 128;
    m.top_k = 8;
    m.moe_intermediate = 768;
    v.push_back(m);
    return v;
  }();
  return presets;
}

/// The preset called `name`; throws Error(invalid_input) listing the known names.
inline ModelPreset find_preset(std::string_view name) {
  std::string known;
  for (const auto& p : model_presets()) {
    if (p.name == name)
      return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw_error(ErrorKind::invalid_input, "--preset", "unknown preset '", name, "' (known: ", known,
              ")");
}

/// config.json of `p` in its family's HuggingFace format (keys sorted, as transformers writes
/// them), with torch_dtype naming `dtype` (F32, F16 or BF16).
inline nlohmann::json preset_config_json(const ModelPreset& p, DType dtype) {
  p.validate();
  nlohmann::json j = nlohmann::json::object();
  const auto torch = [&]() -> std::string {
    switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::f64:
    case DType::i64:
    case DType::i32:
    case DType::i16:
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      break;
    }
    throw_error(ErrorKind::invalid_input, "--dtype", "weights cannot be stored as ",
                dtype_name(dtype), " (F32, F16, BF16)");
  }();
  j["attention_dropout"] = 0.0;
  j["hidden_act"] = "silu";
  j["hidden_size"] = p.hidden;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = p.intermediate;
  j["max_position_embeddings"] = p.max_position;
  j["model_type"] = std::string(family_name(p.family));
  j["num_attention_heads"] = p.heads;
  j["num_hidden_layers"] = p.layers;
  j["num_key_value_heads"] = p.kv_heads;
  j["rms_norm_eps"] = p.rms_norm_eps;
  j["rope_theta"] = p.rope.theta;
  j["tie_word_embeddings"] = p.tie_word_embeddings;
  j["torch_dtype"] = torch;
  j["use_cache"] = true;
  j["vocab_size"] = p.vocab;
  if (p.bos_token_id && *p.bos_token_id < p.vocab)
    j["bos_token_id"] = *p.bos_token_id;
  if (p.eos_token_id && *p.eos_token_id < p.vocab)
    j["eos_token_id"] = *p.eos_token_id;
  if (p.head_dim_in_config)
    j["head_dim"] = p.head_dim;
  switch (p.rope.type) {
  case RopeType::default_:
    break;
  case RopeType::linear:
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", p.rope.factor}};
    break;
  case RopeType::llama3:
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", p.rope.factor},
        {"low_freq_factor", p.rope.low_freq_factor},
        {"high_freq_factor", p.rope.high_freq_factor},
        {"original_max_position_embeddings", p.rope.original_max_position_embeddings}};
    break;
  }
  switch (p.family) {
  case ModelFamily::llama:
    j["architectures"] = {"LlamaForCausalLM"};
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
    break;
  case ModelFamily::qwen2:
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["max_window_layers"] = p.layers;
    j["sliding_window"] = p.max_position;
    j["use_sliding_window"] = false;
    break;
  case ModelFamily::qwen3_moe:
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["attention_bias"] = false;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::json::array();
    j["moe_intermediate_size"] = p.moe_intermediate;
    j["norm_topk_prob"] = true;
    j["num_experts"] = p.experts;
    j["num_experts_per_tok"] = p.top_k;
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
    break;
  case ModelFamily::qwen3:
  case ModelFamily::mistral:
  case ModelFamily::mixtral:
    break; // refused by validate()
  }
  return j;
}

/// One tensor of a generated checkpoint: its HF name, shape and how it is initialized.
struct PresetTensor {
  /// How values are drawn: normal(0, std) noise, or 1 + noise (RMSNorm gammas).
  enum class Init { noise, one_plus_noise };
  std::string name;                ///< HF tensor name
  std::vector<std::int64_t> shape; ///< row-major, outermost first
  Init init = Init::noise;         ///< value distribution
  /// Number of elements.
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape)
      n *= d;
    return n;
  }
};

/// The tensors of `p`'s checkpoint in the order they are written: the embedding [vocab, hidden],
/// per layer its norms [hidden], q [heads*head_dim, hidden], k/v [kv_heads*head_dim, hidden]
/// (with [out] biases for qwen2), o [hidden, heads*head_dim], gate/up [intermediate, hidden],
/// down [hidden, intermediate]; the final norm [hidden]; lm_head [vocab, hidden] when untied.
inline std::vector<PresetTensor> preset_tensors(const ModelPreset& p) {
  p.validate();
  using I = PresetTensor::Init;
  const ModelFamily f = p.family;
  const std::int64_t H = p.hidden, Q = p.heads * p.head_dim, KV = p.kv_heads * p.head_dim;
  const bool qkv_bias = f == ModelFamily::qwen2;
  std::vector<PresetTensor> t;
  t.push_back({hf_embedding_name(f), {p.vocab, H}, I::noise});
  for (std::int64_t i = 0; i < p.layers; ++i) {
    const auto lin = [&](LinearSlot s, std::int64_t out, std::int64_t in, bool bias) {
      t.push_back({hf_linear_prefix(f, i, s) + ".weight", {out, in}, I::noise});
      if (bias)
        t.push_back({hf_linear_prefix(f, i, s) + ".bias", {out}, I::noise});
    };
    t.push_back({hf_norm_name(f, i, NormSlot::attn), {H}, I::one_plus_noise});
    lin(LinearSlot::q, Q, H, qkv_bias);
    lin(LinearSlot::k, KV, H, qkv_bias);
    lin(LinearSlot::v, KV, H, qkv_bias);
    lin(LinearSlot::o, H, Q, false);
    t.push_back({hf_norm_name(f, i, NormSlot::mlp), {H}, I::one_plus_noise});
    if (f == ModelFamily::qwen3_moe) {
      t.push_back({hf_norm_name(f, i, NormSlot::q), {p.head_dim}, I::one_plus_noise});
      t.push_back({hf_norm_name(f, i, NormSlot::k), {p.head_dim}, I::one_plus_noise});
      t.push_back({hf_router_name(f, i), {p.experts, H}, I::noise});
      const std::int64_t E = p.moe_intermediate;
      for (std::int64_t e = 0; e < p.experts; ++e) {
        t.push_back({hf_expert_prefix(f, i, e, ExpertSlot::gate) + ".weight", {E, H}, I::noise});
        t.push_back({hf_expert_prefix(f, i, e, ExpertSlot::up) + ".weight", {E, H}, I::noise});
        t.push_back({hf_expert_prefix(f, i, e, ExpertSlot::down) + ".weight", {H, E}, I::noise});
      }
      continue;
    }
    lin(LinearSlot::gate, p.intermediate, H, false);
    lin(LinearSlot::up, p.intermediate, H, false);
    lin(LinearSlot::down, H, p.intermediate, false);
  }
  t.push_back({hf_final_norm_name(f), {H}, I::one_plus_noise});
  if (!p.tie_word_embeddings)
    t.push_back({hf_lm_head_name(f), {p.vocab, H}, I::noise});
  return t;
}

inline std::int64_t ModelPreset::parameters() const {
  std::int64_t n = 0;
  for (const auto& t : preset_tensors(*this))
    n += t.numel();
  return n;
}

namespace detail {
/// splitmix64's finalizer: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// FNV-1a of a name.
constexpr std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s)
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}
} // namespace detail

/// The key of tensor `name` under `seed` (mixes both; element i uses random_normal(key, i)).
constexpr std::uint64_t tensor_key(std::uint64_t seed, std::string_view name) {
  return detail::mix64(detail::fnv1a(name) ^ detail::mix64(seed + 0x9E3779B97F4A7C15ull));
}

/// Element `i` of the stream `key`: approximately normal(0, 1) (Irwin-Hall of four uniform
/// 16-bit lanes of one 64-bit counter hash, centred and scaled to unit variance).
constexpr double random_normal(std::uint64_t key, std::uint64_t i) {
  const std::uint64_t u = detail::mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
  const std::uint64_t s = (u & 0xFFFF) + ((u >> 16) & 0xFFFF) + ((u >> 32) & 0xFFFF) + (u >> 48);
  constexpr double kMean = 4 * 65535.0 / 2, kStd = 37837.22723720648; // sqrt((65536^2 - 1) / 3)
  return (static_cast<double>(s) - kMean) / kStd;
}

/// Caps of what make-model generates (docs/cli.md): decoder layers, vocabulary, and the size of
/// model.safetensors. They are checked, with the free disk space, before anything is written.
inline constexpr std::int64_t kMaxPresetLayers = 1024, kMaxPresetVocab = std::int64_t{1} << 22;
/// Largest model.safetensors make-model writes (64 GiB).
inline constexpr std::uint64_t kMaxRandomModelBytes = std::uint64_t{64} << 30;

/// Bytes of the tensor data of `p` stored as `dtype` (the safetensors header, a few KiB, is
/// not counted). `p` must be valid (validate()); no overflow within the caps above.
inline std::uint64_t estimate_model_bytes(const ModelPreset& p, DType dtype) {
  return static_cast<std::uint64_t>(p.parameters()) * dtype_size(dtype);
}

/// A weight-quantized checkpoint to generate (`make-model --quantize`): every decoder linear
/// (q, k, v, o, gate, up, down) written in the method's real packed layout with random
/// integers, scales and zeros; the embedding, norms, biases and lm_head stay float.
///   gptq: symmetric (every zero 2^(bits-1), stored minus 1: checkpoint_format gptq), bits 4|8,
///         g_idx written; act_order: desc_act true and g_idx a random row permutation's groups.
///   awq:  GEMM layout, 4-bit, zero_point true (random zeros in [0, 15]).
struct RandomQuant {
  std::string method;            ///< "" (float checkpoint), "gptq" or "awq"
  int bits = 4;                  ///< 4 or 8 (awq: 4)
  std::int64_t group_size = 128; ///< rows of K per group; -1 = one group over K
  bool act_order = false;        ///< gptq only
  /// Throws Error(invalid_input) naming the option for an impossible combination.
  void validate() const {
    if (method.empty())
      return;
    check(method == "gptq" || method == "awq", ErrorKind::invalid_input, "--quantize", "'", method,
          "' is not gptq or awq");
    check(bits == 4 || bits == 8, ErrorKind::invalid_input, "--bits", "must be 4 or 8, got ", bits);
    check(method == "gptq" || bits == 4, ErrorKind::invalid_input, "--bits",
          "awq (GEMM layout) is 4-bit only, got ", bits);
    check(group_size == -1 || (group_size > 0 && group_size <= (1 << 24)), ErrorKind::invalid_input,
          "--group-size", "must be positive or -1, got ", group_size);
    check(!act_order || method == "gptq", ErrorKind::invalid_input, "--act-order",
          "is a GPTQ option (awq has no act-order)");
  }
};

/// How generated weights are drawn and stored.
struct RandomWeights {
  std::uint64_t seed = 0;    ///< same seed, same bytes
  DType dtype = DType::bf16; ///< F32, F16 or BF16
  double std = 0.02;         ///< noise standard deviation (real models initialize with 0.02)
  RandomQuant quant = {};    ///< quantized decoder linears (method "": float)
};

/// The quantization_config of `q` (gptq or awq), as the method's own tools write it.
inline nlohmann::json random_quant_config(const RandomQuant& q) {
  if (q.method == "gptq")
    return {{"quant_method", "gptq"},  {"bits", q.bits},       {"group_size", q.group_size},
            {"desc_act", q.act_order}, {"sym", true},          {"checkpoint_format", "gptq"},
            {"lm_head", false},        {"damp_percent", 0.01}, {"static_groups", false},
            {"true_sequential", true}};
  return {{"quant_method", "awq"},
          {"bits", q.bits},
          {"group_size", q.group_size},
          {"zero_point", true},
          {"version", "gemm"}};
}

namespace detail {

/// True for a decoder linear's weight ("model.layers.N.<block>.<x>_proj.weight"), the tensors
/// --quantize packs.
inline bool is_decoder_linear(const std::string& name) {
  return name.rfind("model.layers.", 0) == 0 && name.size() > 12 &&
         name.compare(name.size() - 12, 12, "_proj.weight") == 0 &&
         name.find(".experts.") == std::string::npos;
}

/// A packed tensor of a quantized linear: name, dtype, shape and its bytes.
struct PackedTensor {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
};

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// The checkpoint tensors of HF linear `name` [N, K] under `q`, drawn from `key`.
inline std::vector<PackedTensor> random_quant_linear(const std::string& name, std::int64_t N,
                                                     std::int64_t K, const RandomQuant& q,
                                                     std::uint64_t key, double std) {
  const std::string prefix = name.substr(0, name.size() - 7); // drop ".weight"
  const std::int64_t gs = q.group_size == -1 ? K : q.group_size;
  check(K % gs == 0, ErrorKind::invalid_input, "--group-size",
        str_cat(gs, " does not divide in_features ", K, " of ", prefix));
  const std::int64_t G = K / gs;
  const int levels = 1 << q.bits, mid = levels / 2;
  std::uint64_t i = 0;
  const auto draw = [&]() { return mix64(key + (++i) * 0x9E3779B97F4A7C15ull); };
  std::vector<std::uint8_t> qv(static_cast<std::size_t>(K * N));
  for (auto& x : qv)
    x = static_cast<std::uint8_t>(draw() % static_cast<std::uint64_t>(levels));
  // uniform integers around the zero have std ~ levels / sqrt(12): scale them to `std`
  const double base = std / (levels / 3.4641016151377544);
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(G * N));
  for (auto& s : scales)
    s = f32_to_f16(
        static_cast<float>(base * (0.75 + 0.5 * static_cast<double>(draw() % 1024) / 1024.0)));
  std::vector<std::uint8_t> zeros(static_cast<std::size_t>(G * N), static_cast<std::uint8_t>(mid));
  std::vector<PackedTensor> out;
  if (q.method == "awq") {
    for (auto& z : zeros)
      z = static_cast<std::uint8_t>(draw() % 16);
    out.push_back({prefix + ".qweight", DType::i32, {K, N / 8}, bytes_of(pack_awq_rows(qv, K, N))});
    out.push_back(
        {prefix + ".qzeros", DType::i32, {G, N / 8}, bytes_of(pack_awq_rows(zeros, G, N))});
    out.push_back({prefix + ".scales", DType::f16, {G, N}, bytes_of(scales)});
    return out;
  }
  std::vector<std::int32_t> g_idx(static_cast<std::size_t>(K));
  std::vector<std::int64_t> order(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k)
    order[static_cast<std::size_t>(k)] = k;
  if (q.act_order) // rows taken in a random order; groups along that order (GPTQ desc_act)
    for (std::int64_t k = K - 1; k > 0; --k)
      std::swap(order[static_cast<std::size_t>(k)],
                order[static_cast<std::size_t>(draw() % static_cast<std::uint64_t>(k + 1))]);
  for (std::int64_t j = 0; j < K; ++j)
    g_idx[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])] =
        static_cast<std::int32_t>(j / gs);
  const int pack = 32 / q.bits;
  out.push_back({prefix + ".qweight",
                 DType::i32,
                 {K / pack, N},
                 bytes_of(pack_gptq_qweight(qv, K, N, q.bits))});
  out.push_back({prefix + ".qzeros",
                 DType::i32,
                 {G, N / pack},
                 bytes_of(pack_gptq_qzeros(zeros, G, N, q.bits, 1))});
  out.push_back({prefix + ".scales", DType::f16, {G, N}, bytes_of(scales)});
  out.push_back({prefix + ".g_idx", DType::i32, {K}, bytes_of(g_idx)});
  return out;
}

} // namespace detail

/// What write_random_model wrote.
struct MakeModelReport {
  std::int64_t parameters = 0;  ///< elements of every tensor
  std::uint64_t file_bytes = 0; ///< size of model.safetensors
};

/// Writes `dir`/config.json and `dir`/model.safetensors (streamed, about 4 MiB of buffers) for
/// `p` with weights drawn by `w`; `dir` must exist. `progress(done, total)` is called after
/// each tensor. Each file is written atomically (OutputFile). Throws tpullm::Error on a bad preset
/// or dtype and on I/O failure.
inline MakeModelReport
write_random_model(const ModelPreset& p, const RandomWeights& w, const std::filesystem::path& dir,
                   const std::function<void(std::size_t, std::size_t)>& progress = {}) {
  w.quant.validate();
  nlohmann::json config = preset_config_json(p, w.dtype);
  const bool quantized = !w.quant.method.empty();
  check(!quantized || p.family != ModelFamily::qwen3_moe, ErrorKind::invalid_input, "--quantize",
        "quantized mixture-of-experts checkpoints are not supported");
  if (quantized)
    config["quantization_config"] = random_quant_config(w.quant);
  {
    OutputFile out(dir / "config.json");
    out.write(config.dump(2) + "\n");
    out.commit();
  }
  const auto tensors = preset_tensors(p);
  SafetensorsWriter st(dir / "model.safetensors");
  st.set_metadata("format", "pt");
  const auto quant_parts = [&](const PresetTensor& t) {
    return detail::random_quant_linear(t.name, t.shape.at(0), t.shape.at(1), w.quant,
                                       tensor_key(w.seed, t.name), w.std);
  };
  for (const auto& t : tensors) {
    if (quantized && detail::is_decoder_linear(t.name)) {
      // declared from a small stand-in of the same shapes: the parts' shapes only
      const std::int64_t N = t.shape.at(0), K = t.shape.at(1), pack = 32 / w.quant.bits;
      const std::int64_t G = K / (w.quant.group_size == -1 ? K : w.quant.group_size);
      check(K % (w.quant.group_size == -1 ? K : w.quant.group_size) == 0 && K % pack == 0 &&
                N % pack == 0,
            ErrorKind::invalid_input, "--group-size",
            str_cat("in_features ", K, " / out_features ", N, " of ", t.name,
                    " do not fit the packing (group ", w.quant.group_size, ", ", pack,
                    " values a word)"));
      const std::string prefix = t.name.substr(0, t.name.size() - 7);
      if (w.quant.method == "awq") {
        st.declare(prefix + ".qweight", DType::i32, {K, N / 8});
        st.declare(prefix + ".qzeros", DType::i32, {G, N / 8});
        st.declare(prefix + ".scales", DType::f16, {G, N});
      } else {
        st.declare(prefix + ".qweight", DType::i32, {K / pack, N});
        st.declare(prefix + ".qzeros", DType::i32, {G, N / pack});
        st.declare(prefix + ".scales", DType::f16, {G, N});
        st.declare(prefix + ".g_idx", DType::i32, {K});
      }
      continue;
    }
    st.declare(t.name, w.dtype, t.shape);
  }
  MakeModelReport report;
  const std::size_t esize = dtype_size(w.dtype);
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;
  std::vector<std::byte> buf(static_cast<std::size_t>(kChunk) * esize);
  for (std::size_t ti = 0; ti < tensors.size(); ++ti) {
    const PresetTensor& t = tensors[ti];
    if (quantized && detail::is_decoder_linear(t.name)) {
      for (const auto& part : quant_parts(t))
        st.write(part.name, std::span<const std::byte>(part.bytes));
      report.parameters += t.numel();
      if (progress)
        progress(ti + 1, tensors.size());
      continue;
    }
    const std::uint64_t key = tensor_key(w.seed, t.name);
    const double base = t.init == PresetTensor::Init::one_plus_noise ? 1.0 : 0.0;
    const std::int64_t n = t.numel();
    for (std::int64_t at = 0; at < n; at += kChunk) {
      const std::int64_t len = std::min(kChunk, n - at);
      for (std::int64_t k = 0; k < len; ++k) {
        const auto v = static_cast<float>(
            base + w.std * random_normal(key, static_cast<std::uint64_t>(at + k)));
        std::byte* dst = buf.data() + k * static_cast<std::int64_t>(esize);
        if (w.dtype == DType::bf16) {
          const std::uint16_t h = f32_to_bf16(v);
          std::memcpy(dst, &h, 2);
        } else if (w.dtype == DType::f16) {
          const std::uint16_t h = f32_to_f16(v);
          std::memcpy(dst, &h, 2);
        } else {
          std::memcpy(dst, &v, 4);
        }
      }
      st.write(t.name,
               std::span<const std::byte>(buf.data(), static_cast<std::size_t>(len) * esize));
    }
    report.parameters += n;
    if (progress)
      progress(ti + 1, tensors.size());
  }
  st.finish();
  report.file_bytes = st.header().size() + st.data_size();
  return report;
}

} // namespace tpullm::frontend
