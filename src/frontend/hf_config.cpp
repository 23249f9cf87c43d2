// Out-of-line definitions of tpullm/frontend/hf_config.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/hf_config.hpp"

#include <cmath>
#include <optional>

namespace tpullm::frontend::detail {

auto ConfigReader::get(const nlohmann::json& obj, std::string_view key) const
    -> const nlohmann::json* {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null())
    return nullptr;
  return &*it;
}

auto ConfigReader::to_int(const nlohmann::json& v, std::string_view key) const -> std::int64_t {
  check(v.is_number_integer() || v.is_number_unsigned(), ErrorKind::invalid_input, where, "\"", key,
        "\" must be an integer, got ", v.dump());
  check(!v.is_number_unsigned() || v.get<std::uint64_t>() <= (1ull << 62), ErrorKind::invalid_input,
        where, "\"", key, "\" = ", v.dump(), " is too large");
  return v.get<std::int64_t>();
}

auto ConfigReader::to_double(const nlohmann::json& v, std::string_view key) const -> double {
  check(v.is_number(), ErrorKind::invalid_input, where, "\"", key, "\" must be a number, got ",
        v.dump());
  const double d = v.get<double>();
  check(std::isfinite(d), ErrorKind::invalid_input, where, "\"", key, "\" is not finite");
  return d;
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return s;
}

namespace {

/// YaRN's attention factor for `scale` under `mscale` (transformers' get_mscale).
double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

/// The "yarn" entries of `src` (rope_scaling or rope_parameters) into c.rope, as transformers 5
/// reads them: factor (or max_position_embeddings / original_max_position_embeddings when
/// absent), original_max_position_embeddings (default max_position_embeddings),
/// attention_factor (else mscale / mscale_all_dim, else 0.1 ln(factor) + 1), beta_fast and
/// beta_slow (0 or null: 32 and 1, as Python's `or`), truncate (default true).
void parse_yarn(const ConfigReader& r, const nlohmann::json& src, HfConfig& c) {
  c.rope.type = RopeType::yarn;
  const auto number = [&](const char* k) -> std::optional<double> {
    const auto* v = r.get(src, k);
    if (v == nullptr || v->is_null())
      return std::nullopt;
    return r.to_double(*v, k);
  };
  c.rope.original_max_position_embeddings = c.max_position_embeddings;
  if (const auto* o = r.get(src, "original_max_position_embeddings"); o && !o->is_null())
    c.rope.original_max_position_embeddings = r.positive(
        r.to_int(*o, "original_max_position_embeddings"), "original_max_position_embeddings");
  if (const auto f = number("factor"))
    c.rope.factor = *f;
  else
    c.rope.factor = static_cast<double>(c.max_position_embeddings) /
                    static_cast<double>(c.rope.original_max_position_embeddings);
  check(c.rope.factor > 0 && std::isfinite(c.rope.factor), ErrorKind::invalid_input, r.where,
        "yarn RoPE \"factor\" must be > 0, got ", c.rope.factor);
  const std::optional<double> mscale = number("mscale"), mscale_all = number("mscale_all_dim");
  if (const auto a = number("attention_factor"))
    c.rope.attention_factor = *a;
  else if (mscale.value_or(0) != 0 && mscale_all.value_or(0) != 0)
    c.rope.attention_factor =
        yarn_mscale(c.rope.factor, *mscale) / yarn_mscale(c.rope.factor, *mscale_all);
  else
    c.rope.attention_factor = yarn_mscale(c.rope.factor, 1.0);
  check(c.rope.attention_factor > 0 && std::isfinite(c.rope.attention_factor),
        ErrorKind::invalid_input, r.where, "yarn RoPE attention factor must be > 0, got ",
        c.rope.attention_factor);
  const double fast = number("beta_fast").value_or(0), slow = number("beta_slow").value_or(0);
  c.rope.beta_fast = fast != 0 ? fast : 32.0;
  c.rope.beta_slow = slow != 0 ? slow : 1.0;
  check(c.rope.beta_fast > 0 && c.rope.beta_slow > 0 && std::isfinite(c.rope.beta_fast) &&
            std::isfinite(c.rope.beta_slow),
        ErrorKind::invalid_input, r.where, "yarn RoPE beta_fast and beta_slow must be > 0");
  c.rope.truncate = r.bool_or(src, "truncate", true);
}

} // namespace

std::vector<std::int64_t> parse_sliding_windows(const ConfigReader& r, const HfConfig& c) {
  // As transformers: Mistral and Mixtral window every layer by "sliding_window" (null: none;
  // absent: 4096 for Mistral and the Qwen families); the Qwen families only under
  // "use_sliding_window", on the layers >= "max_window_layers" (default 28); a "layer_types" list
  // ("full_attention" / "sliding_attention") decides per layer where given, and a sliding layer
  // without a window attends to everything.
  const nlohmann::json& j = r.j;
  const std::int64_t n = c.num_hidden_layers;
  const bool qwen = c.family == ModelFamily::qwen2 || c.family == ModelFamily::qwen3 ||
                    c.family == ModelFamily::qwen3_moe;
  const bool mistral = c.family == ModelFamily::mistral || c.family == ModelFamily::mixtral;
  const bool qwen_sliding = qwen && r.bool_or(j, "use_sliding_window", false);
  std::int64_t window = 0;
  if ((c.family == ModelFamily::mistral || qwen_sliding) && !j.contains("sliding_window"))
    window = 4096; // MistralConfig's and the Qwen configs' default (Mixtral's is none)
  if ((mistral || qwen_sliding) && r.has("sliding_window")) {
    window = r.to_int(j["sliding_window"], "sliding_window");
    check(window > 0, ErrorKind::invalid_input, r.where, "\"sliding_window\" must be > 0, got ",
          window);
  }
  std::vector<bool> sliding(static_cast<std::size_t>(n), mistral);
  if (qwen) {
    const std::int64_t first =
        r.has("max_window_layers") ? r.to_int(j["max_window_layers"], "max_window_layers") : 28;
    check(first >= 0, ErrorKind::invalid_input, r.where, "\"max_window_layers\" must be >= 0, got ",
          first);
    for (std::int64_t i = first; i < n; ++i)
      sliding[static_cast<std::size_t>(i)] = true;
  }
  if (const auto* lt = r.get(j, "layer_types")) {
    check(lt->is_array() && static_cast<std::int64_t>(lt->size()) == n, ErrorKind::invalid_input,
          r.where, "\"layer_types\" must be an array of ", n, " entries (one per layer)");
    for (std::int64_t i = 0; i < n; ++i) {
      const std::string t = r.to_string((*lt)[static_cast<std::size_t>(i)], "layer_types");
      const bool full = t == "full_attention";
      check(full || t == "sliding_attention", ErrorKind::unsupported, r.where, "layer type \"", t,
            "\" is not supported (full_attention, sliding_attention)");
      sliding[static_cast<std::size_t>(i)] = !full;
    }
  }
  std::vector<std::int64_t> out;
  if (window > 0 && std::find(sliding.begin(), sliding.end(), true) != sliding.end())
    for (std::int64_t i = 0; i < n; ++i)
      out.push_back(sliding[static_cast<std::size_t>(i)] ? window : 0);
  return out;
}

void parse_rope(const ConfigReader& r, HfConfig& c) {
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
  // dynamic: up to max_position_embeddings (which bounds every compiled seq_length)
  // transformers' dynamic NTK RoPE computes the default frequencies; only the factor is read.
  if (type == "linear" || type == "dynamic") {
    check(factor != nullptr, ErrorKind::invalid_input, r.where, type,
          " RoPE scaling needs \"factor\"");
    c.rope.type = type == "linear" ? RopeType::linear : RopeType::dynamic;
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
  if (type == "yarn") {
    parse_yarn(r, *src, c);
    return;
  }
  throw_error(ErrorKind::unsupported, r.where, "RoPE type '", type,
              "' is not supported (supported: default, linear, llama3, yarn, dynamic)");
}

} // namespace tpullm::frontend::detail

namespace tpullm::frontend {

HfConfig parse_hf_config(std::string_view json_text, std::string where) {
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

    c.sliding_windows = detail::parse_sliding_windows(r, c);

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

HfConfig load_hf_config(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::path file =
      std::filesystem::is_directory(path, ec) ? path / "config.json" : path;
  return parse_hf_config(read_text_file(file), file.string());
}

} // namespace tpullm::frontend
