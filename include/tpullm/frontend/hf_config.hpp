#pragma once
/// Parsing a HuggingFace `config.json` of a llama-shaped decoder (llama, qwen2, qwen3, mistral,
/// and the mixtures of experts qwen3_moe and mixtral: frontend/moe_config.hpp) into a typed
/// HfConfig. Everything not representable (other model types, RoPE scalings,
/// activations, quantization methods, sliding windows, ...) is refused with Error(unsupported)
/// naming the field and its value; malformed values are Error(invalid_input).

#include "tpullm/frontend/moe_config.hpp"
#include "tpullm/frontend/quant_config.hpp"
#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/support/error.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpullm::frontend {

/// Supported model families (config.json "model_type").
enum class ModelFamily { llama, qwen2, qwen3, mistral, qwen3_moe, mixtral };

/// The config.json spelling of a family ("llama", "qwen2", ...).
inline constexpr std::string_view family_name(ModelFamily f) noexcept {
  switch (f) {
  case ModelFamily::llama:
    return "llama";
  case ModelFamily::qwen2:
    return "qwen2";
  case ModelFamily::qwen3:
    return "qwen3";
  case ModelFamily::mistral:
    return "mistral";
  case ModelFamily::qwen3_moe:
    return "qwen3_moe";
  case ModelFamily::mixtral:
    return "mixtral";
  }
  return "?";
}

/// RoPE frequency schedule: plain, linear position interpolation, or llama3 band scaling.
enum class RopeType { default_, linear, llama3 };

/// The HF spelling of a RopeType ("default", "linear", "llama3").
inline constexpr std::string_view rope_type_name(RopeType t) noexcept {
  switch (t) {
  case RopeType::default_:
    return "default";
  case RopeType::linear:
    return "linear";
  case RopeType::llama3:
    return "llama3";
  }
  return "?";
}

/// RoPE parameters. inv_freq[i] = theta^(-2i/head_dim) for i in [0, head_dim/2), then
///   linear: inv_freq /= factor;
///   llama3: per-band rescale with factor, low/high_freq_factor, original_max_position_embeddings
///           (transformers' _compute_llama3_parameters).
/// Rotation applies to the full head_dim as two contiguous halves (HF rotate_half).
struct RopeConfig {
  RopeType type = RopeType::default_;
  /// Base theta (rope_theta), > 0.
  double theta = 10000.0;
  /// linear / llama3: scaling factor (> 0); 1 for default.
  double factor = 1.0;
  /// llama3 only.
  double low_freq_factor = 1.0;
  /// llama3 only.
  double high_freq_factor = 4.0;
  /// llama3 only: context length of the unscaled model (> 0).
  std::int64_t original_max_position_embeddings = 0;
};

/// A parsed, validated config.json. All dims > 0; heads % kv_heads == 0; head_dim even.
struct HfConfig {
  ModelFamily family = ModelFamily::llama;
  /// The "model_type" string as written.
  std::string model_type;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  /// Defaults to num_attention_heads.
  std::int64_t num_key_value_heads = 0;
  /// Explicit "head_dim" or hidden_size / num_attention_heads.
  std::int64_t head_dim = 0;
  /// True when config.json gave head_dim (it may differ from hidden / heads).
  bool head_dim_explicit = false;
  double rms_norm_eps = 1e-6;
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  /// q/k/v projections have a bias (qwen2: always; llama/qwen3: "attention_bias").
  bool qkv_bias = false;
  /// o_proj has a bias (llama with attention_bias).
  bool o_bias = false;
  /// Per-head RMSNorm on q and k before RoPE (qwen3: always).
  bool qk_norm = false;
  /// "hidden_act" (always "silu" after validation).
  std::string hidden_act = "silu";
  std::optional<std::int64_t> bos_token_id;
  /// "eos_token_id" as a list (an int becomes a 1-element list; null an empty list).
  std::vector<std::int64_t> eos_token_ids;
  /// "torch_dtype" / "dtype" when it names a float type; nullopt when absent.
  std::optional<DType> torch_dtype;
  RopeConfig rope;
  QuantConfig quant;
  /// Routed experts (qwen3_moe, mixtral); layout none for dense families.
  MoeConfig moe;
};

namespace detail {

struct ConfigReader {
  const nlohmann::json& j;
  std::string where;

  const nlohmann::json* get(const nlohmann::json& obj, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null())
      return nullptr;
    return &*it;
  }
  bool has(std::string_view key) const { return get(j, key) != nullptr; }

  std::int64_t to_int(const nlohmann::json& v, std::string_view key) const {
    check(v.is_number_integer() || v.is_number_unsigned(), ErrorKind::invalid_input, where, "\"",
          key, "\" must be an integer, got ", v.dump());
    check(!v.is_number_unsigned() || v.get<std::uint64_t>() <= (1ull << 62),
          ErrorKind::invalid_input, where, "\"", key, "\" = ", v.dump(), " is too large");
    return v.get<std::int64_t>();
  }
  double to_double(const nlohmann::json& v, std::string_view key) const {
    check(v.is_number(), ErrorKind::invalid_input, where, "\"", key, "\" must be a number, got ",
          v.dump());
    const double d = v.get<double>();
    check(std::isfinite(d), ErrorKind::invalid_input, where, "\"", key, "\" is not finite");
    return d;
  }
  bool to_bool(const nlohmann::json& v, std::string_view key) const {
    check(v.is_boolean(), ErrorKind::invalid_input, where, "\"", key,
          "\" must be true or false, got ", v.dump());
    return v.get<bool>();
  }
  std::string to_string(const nlohmann::json& v, std::string_view key) const {
    check(v.is_string(), ErrorKind::invalid_input, where, "\"", key, "\" must be a string, got ",
          v.dump());
    return v.get<std::string>();
  }

  /// Required positive dimension (<= 2^31).
  std::int64_t dim(std::string_view key) const {
    const auto* v = get(j, key);
    check(v != nullptr, ErrorKind::invalid_input, where, "missing \"", key, "\"");
    return positive(to_int(*v, key), key);
  }
  std::int64_t positive(std::int64_t x, std::string_view key) const {
    check(x > 0 && x <= (std::int64_t{1} << 31), ErrorKind::invalid_input, where, "\"", key,
          "\" = ", x, " is out of range (1 .. 2^31)");
    return x;
  }
  std::int64_t int_or(const nlohmann::json& obj, std::string_view key, std::int64_t def) const {
    const auto* v = get(obj, key);
    return v ? to_int(*v, key) : def;
  }
  double double_or(const nlohmann::json& obj, std::string_view key, double def) const {
    const auto* v = get(obj, key);
    return v ? to_double(*v, key) : def;
  }
  bool bool_or(const nlohmann::json& obj, std::string_view key, bool def) const {
    const auto* v = get(obj, key);
    return v ? to_bool(*v, key) : def;
  }
};

inline std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return s;
}

inline void parse_rope(const ConfigReader& r, HfConfig& c) {
  // transformers 5: "rope_parameters" {rope_type, rope_theta, factor, ...};
  // transformers 4: "rope_theta" + "rope_scaling" {type|rope_type, factor, ...}.
  const nlohmann::json* params = r.get(r.j, "rope_parameters");
  const nlohmann::json* scaling = r.get(r.j, "rope_scaling");
  if (params) {
    check(params->is_object(), ErrorKind::invalid_input, r.where,
          "\"rope_parameters\" must be an object");
    check(params->contains("rope_type") || params->contains("rope_theta"), ErrorKind::unsupported,
          r.where,
          "\"rope_parameters\" without rope_type/rope_theta (per-layer-type RoPE) is not "
          "supported");
  }
  const auto type_of = [&](const nlohmann::json& o) -> std::string {
    if (!o.is_object())
      return "default";
    if (const auto* t = r.get(o, "rope_type"))
      return t->is_string() ? t->get<std::string>() : t->dump();
    if (const auto* t = r.get(o, "type"))
      return t->is_string() ? t->get<std::string>() : t->dump();
    return "default";
  };
  // Both given (a config rewritten by transformers 5 may keep the old field): they must agree;
  // rope_parameters wins.
  if (params && scaling)
    check(type_of(*params) == type_of(*scaling), ErrorKind::invalid_input, r.where,
          "\"rope_parameters\" (", type_of(*params), ") and \"rope_scaling\" (", type_of(*scaling),
          ") disagree");
  const nlohmann::json* src = params ? params : scaling;

  double theta = r.double_or(r.j, "rope_theta", 10000.0);
  if (params)
    theta = r.double_or(*params, "rope_theta", theta);
  check(theta > 0, ErrorKind::invalid_input, r.where, "\"rope_theta\" must be > 0, got ", theta);
  c.rope = RopeConfig{};
  c.rope.theta = theta;

  double partial = r.double_or(r.j, "partial_rotary_factor", 1.0);
  if (src)
    partial = r.double_or(*src, "partial_rotary_factor", partial);
  check(partial == 1.0, ErrorKind::unsupported, r.where, "partial_rotary_factor ", partial,
        " is not supported (only 1: RoPE over the whole head)");

  if (!src)
    return;
  check(src->is_object(), ErrorKind::invalid_input, r.where,
        "\"rope_scaling\" must be an object or null");
  std::string type = "default";
  if (const auto* t = r.get(*src, "rope_type"))
    type = r.to_string(*t, "rope_type");
  else if (const auto* t2 = r.get(*src, "type"))
    type = r.to_string(*t2, "type");
  if (type == "default") {
    c.rope.type = RopeType::default_;
    return;
  }
  const auto* factor = r.get(*src, "factor");
  if (type == "linear") {
    check(factor != nullptr, ErrorKind::invalid_input, r.where,
          "linear RoPE scaling needs \"factor\"");
    c.rope.type = RopeType::linear;
    c.rope.factor = r.to_double(*factor, "factor");
    check(c.rope.factor > 0, ErrorKind::invalid_input, r.where, "RoPE \"factor\" must be > 0");
    return;
  }
  if (type == "llama3") {
    c.rope.type = RopeType::llama3;
    for (const char* k :
         {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      check(r.get(*src, k) != nullptr, ErrorKind::invalid_input, r.where,
            "llama3 RoPE scaling needs \"", k, "\"");
    c.rope.factor = r.to_double(*r.get(*src, "factor"), "factor");
    c.rope.low_freq_factor = r.to_double(*r.get(*src, "low_freq_factor"), "low_freq_factor");
    c.rope.high_freq_factor = r.to_double(*r.get(*src, "high_freq_factor"), "high_freq_factor");
    c.rope.original_max_position_embeddings =
        r.positive(r.to_int(*r.get(*src, "original_max_position_embeddings"),
                            "original_max_position_embeddings"),
                   "original_max_position_embeddings");
    check(c.rope.factor > 0 && c.rope.low_freq_factor > 0 &&
              c.rope.high_freq_factor > c.rope.low_freq_factor,
          ErrorKind::invalid_input, r.where,
          "llama3 RoPE needs factor > 0 and high_freq_factor > low_freq_factor > 0");
    return;
  }
  throw_error(ErrorKind::unsupported, r.where, "RoPE type '", type,
              "' is not supported (supported: default, linear, llama3)");
}

inline void parse_quant(const ConfigReader& r, HfConfig& c) {
  const nlohmann::json* q = r.get(r.j, "quantization_config");
  c.quant = q ? parse_quant_config(*q, r.where) : QuantConfig{};
}

} // namespace detail

/// Parses config.json text. `where` names the file in errors.
inline HfConfig parse_hf_config(std::string_view json_text, std::string where = "config.json") {
  const nlohmann::json j = detail::parse_json_strict(json_text, where);
  check(j.is_object(), ErrorKind::invalid_input, where, "config is not a JSON object");
  const detail::ConfigReader r{j, where};
  HfConfig c;
  try {
    const auto* mt = r.get(j, "model_type");
    check(mt != nullptr, ErrorKind::invalid_input, where, "missing \"model_type\"");
    c.model_type = r.to_string(*mt, "model_type");
    if (c.model_type == "llama")
      c.family = ModelFamily::llama;
    else if (c.model_type == "qwen2")
      c.family = ModelFamily::qwen2;
    else if (c.model_type == "qwen3")
      c.family = ModelFamily::qwen3;
    else if (c.model_type == "mistral")
      c.family = ModelFamily::mistral;
    else if (c.model_type == "qwen3_moe")
      c.family = ModelFamily::qwen3_moe;
    else if (c.model_type == "mixtral")
      c.family = ModelFamily::mixtral;
    else {
      refuse_other_moe(c.model_type, where);
      throw_error(ErrorKind::unsupported, where, "model_type '", c.model_type,
                  "' is not supported (supported: llama, qwen2, qwen3, mistral, qwen3_moe, "
                  "mixtral)");
    }

    c.hidden_size = r.dim("hidden_size");
    c.intermediate_size = r.dim("intermediate_size");
    c.num_hidden_layers = r.dim("num_hidden_layers");
    c.num_attention_heads = r.dim("num_attention_heads");
    c.vocab_size = r.dim("vocab_size");
    c.num_key_value_heads =
        r.has("num_key_value_heads") ? r.dim("num_key_value_heads") : c.num_attention_heads;
    check(c.num_attention_heads % c.num_key_value_heads == 0, ErrorKind::invalid_input, where,
          "num_attention_heads ", c.num_attention_heads,
          " is not a multiple of num_key_value_heads ", c.num_key_value_heads);
    if (r.has("head_dim")) {
      c.head_dim = r.dim("head_dim");
      c.head_dim_explicit = true;
    } else {
      check(c.hidden_size % c.num_attention_heads == 0, ErrorKind::invalid_input, where,
            "hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ",
            c.num_attention_heads, " and no head_dim is given");
      c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    check(c.head_dim % 2 == 0, ErrorKind::invalid_input, where, "head_dim ", c.head_dim,
          " must be even for RoPE");
    c.max_position_embeddings =
        r.has("max_position_embeddings") ? r.dim("max_position_embeddings") : 0;
    check(c.max_position_embeddings > 0, ErrorKind::invalid_input, where,
          "missing \"max_position_embeddings\"");
    c.rms_norm_eps = r.double_or(j, "rms_norm_eps", 1e-6);
    check(c.rms_norm_eps > 0 && c.rms_norm_eps < 1, ErrorKind::invalid_input, where,
          "rms_norm_eps ", c.rms_norm_eps, " is out of range (0, 1)");
    c.tie_word_embeddings = r.bool_or(j, "tie_word_embeddings", false);

    c.hidden_act = r.has("hidden_act") ? r.to_string(j["hidden_act"], "hidden_act") : "silu";
    check(c.hidden_act == "silu", ErrorKind::unsupported, where, "hidden_act '", c.hidden_act,
          "' is not supported (only silu)");
    check(!r.bool_or(j, "mlp_bias", false), ErrorKind::unsupported, where,
          "mlp_bias=true is not supported");

    const bool attention_bias = r.bool_or(j, "attention_bias", false);
    switch (c.family) {
    case ModelFamily::llama:
      c.qkv_bias = attention_bias;
      c.o_bias = attention_bias;
      break;
    case ModelFamily::qwen2:
      c.qkv_bias = true; // Qwen2 hard-codes q/k/v bias; o_proj has none.
      break;
    case ModelFamily::qwen3:
      c.qkv_bias = attention_bias;
      c.o_bias = attention_bias;
      c.qk_norm = true;
      break;
    case ModelFamily::mistral:
      break;
    case ModelFamily::qwen3_moe: // Qwen3's attention (q/k norm) with routed MLPs
      c.qkv_bias = attention_bias;
      c.o_bias = attention_bias;
      c.qk_norm = true;
      break;
    case ModelFamily::mixtral: // Mistral's attention with routed MLPs
      break;
    }
    if (c.family == ModelFamily::qwen3_moe || c.family == ModelFamily::mixtral)
      c.moe = parse_moe_config(
          j, where, c.family == ModelFamily::mixtral ? MoeLayout::mixtral : MoeLayout::qwen3_moe,
          c.num_hidden_layers, c.intermediate_size);

    // Sliding-window attention is not supported; a window covering the whole context is
    // plain causal attention.
    const bool sw_enabled = c.family == ModelFamily::mistral || c.family == ModelFamily::mixtral ||
                            r.bool_or(j, "use_sliding_window", false);
    if (sw_enabled && r.has("sliding_window")) {
      const std::int64_t w = r.to_int(j["sliding_window"], "sliding_window");
      check(w >= c.max_position_embeddings, ErrorKind::unsupported, where, "sliding_window ", w,
            " < max_position_embeddings ", c.max_position_embeddings,
            ": sliding-window attention is not supported");
    }
    if (const auto* lt = r.get(j, "layer_types")) {
      check(lt->is_array(), ErrorKind::invalid_input, where, "\"layer_types\" must be an array");
      for (const auto& t : *lt)
        check(t.is_string() && t.get<std::string>() == "full_attention", ErrorKind::unsupported,
              where, "layer type ", t.dump(), " is not supported (only full_attention)");
    }

    if (const auto* b = r.get(j, "bos_token_id"))
      c.bos_token_id = r.to_int(*b, "bos_token_id");
    if (const auto* e = r.get(j, "eos_token_id")) {
      if (e->is_array()) {
        for (const auto& x : *e)
          c.eos_token_ids.push_back(r.to_int(x, "eos_token_id"));
      } else {
        c.eos_token_ids.push_back(r.to_int(*e, "eos_token_id"));
      }
    }

    const auto* dt = r.get(j, "dtype");
    if (!dt)
      dt = r.get(j, "torch_dtype");
    if (dt) {
      const std::string s = r.to_string(*dt, "torch_dtype");
      if (s == "float32")
        c.torch_dtype = DType::f32;
      else if (s == "float16")
        c.torch_dtype = DType::f16;
      else if (s == "bfloat16")
        c.torch_dtype = DType::bf16;
      else if (s == "float64")
        c.torch_dtype = DType::f64;
      else if (s != "auto")
        throw_error(ErrorKind::unsupported, where, "torch_dtype '", s,
                    "' is not supported (float32, float16, bfloat16, float64, auto)");
    }

    detail::parse_rope(r, c);
    detail::parse_quant(r, c);
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorKind::invalid_input, where, "malformed config: ", e.what());
  }
  return c;
}

/// Reads and parses `config.json`; `path` is the file or the directory holding it.
inline HfConfig load_hf_config(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::path file =
      std::filesystem::is_directory(path, ec) ? path / "config.json" : path;
  return parse_hf_config(read_text_file(file), file.string());
}

} // namespace tpullm::frontend
