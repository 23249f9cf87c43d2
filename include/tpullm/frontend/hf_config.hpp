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
enum class RopeType { default_, linear, llama3, yarn, dynamic };

/// The HF spelling of a RopeType ("default", "linear", "llama3", "yarn", "dynamic").
inline constexpr std::string_view rope_type_name(RopeType t) noexcept {
  switch (t) {
  case RopeType::default_:
    return "default";
  case RopeType::linear:
    return "linear";
  case RopeType::llama3:
    return "llama3";
  case RopeType::yarn:
    return "yarn";
  case RopeType::dynamic:
    return "dynamic";
  }
  return "?";
}

/// RoPE parameters. inv_freq[i] = theta^(-2i/head_dim) for i in [0, head_dim/2), then
///   linear: inv_freq /= factor;
///   llama3: per-band rescale with factor, low/high_freq_factor, original_max_position_embeddings
///           (transformers' _compute_llama3_parameters);
///   yarn:   inv_freq blends inv_freq / factor and inv_freq along a linear ramp over the frequency
///           indices between the correction dims of beta_fast and beta_slow rotations in
///           original_max_position_embeddings (floor / ceil unless truncate is false), and cos/sin
///           are multiplied by attention_factor (transformers' _compute_yarn_parameters);
///   dynamic: NTK scaling that changes the base once a sequence outgrows max_position_embeddings;
///           up to that length it is the default RoPE, which is all a compiled table holds (a
///           longer seq_length is refused at compile time, see StageParams).
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
  /// llama3 and yarn: context length of the unscaled model (> 0).
  std::int64_t original_max_position_embeddings = 0;
  /// yarn: the factor cos/sin are multiplied by (attention_factor, else from mscale /
  /// mscale_all_dim, else 0.1 ln(factor) + 1); 1 for every other type.
  double attention_factor = 1.0;
  /// yarn: rotations bounding the ramp (beta_fast at its low end, beta_slow at its high end).
  double beta_fast = 32.0;
  /// yarn, see beta_fast.
  double beta_slow = 1.0;
  /// yarn: the correction dims are rounded outward (floor / ceil) before clamping.
  bool truncate = true;
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
  /// Per layer, its sliding window in positions (0: full attention); empty when no layer has
  /// one. A query at position p sees keys p - window < j <= p (transformers' sliding_window).
  std::vector<std::int64_t> sliding_windows;
};

namespace detail {

struct ConfigReader {
  const nlohmann::json& j;
  std::string where;

  const nlohmann::json* get(const nlohmann::json& obj, std::string_view key) const;
  bool has(std::string_view key) const { return get(j, key) != nullptr; }

  std::int64_t to_int(const nlohmann::json& v, std::string_view key) const;
  double to_double(const nlohmann::json& v, std::string_view key) const;
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

std::string lower(std::string s);

void parse_rope(const ConfigReader& r, HfConfig& c);

/// HfConfig::sliding_windows of a config whose family and layer count are parsed.
std::vector<std::int64_t> parse_sliding_windows(const ConfigReader& r, const HfConfig& c);

inline void parse_quant(const ConfigReader& r, HfConfig& c) {
  const nlohmann::json* q = r.get(r.j, "quantization_config");
  c.quant = q ? parse_quant_config(*q, r.where) : QuantConfig{};
}

} // namespace detail

/// Parses config.json text. `where` names the file in errors.
HfConfig parse_hf_config(std::string_view json_text, std::string where = "config.json");

/// Reads and parses `config.json`; `path` is the file or the directory holding it.
HfConfig load_hf_config(const std::filesystem::path& path);

} // namespace tpullm::frontend
