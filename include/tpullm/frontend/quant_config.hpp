#pragma once
/// config.json "quantization_config" of a weight-quantized checkpoint, validated, and the
/// per-linear decision it implies (which layout, bits, group, zeros; or left in float).
///
/// Accepted (docs/import.md lists them with the refused ones):
///   gptq              bits 4|8, group_size, desc_act, sym, checkpoint_format gptq (v1: stored
///                     zero = zero - 1) | gptq_v2 (exact); lm_head; GPTQModel "dynamic" rules
///                     ("-:re" leaves matching modules float, "+:re" / "re" overrides bits,
///                     group_size, sym, desc_act; Python re.match, first rule wins).
///   awq               bits 4, version gemm, zero_point; modules_to_not_convert (substrings:
///                     matching modules stay float).
///   auto-round        (also "intel/auto-round") bits 4|8, group_size, sym, data_type int,
///                     packing_format auto_round:auto_gptq (GPTQ layout, v1 zeros; the default)
///                     | auto_round | auto_round:gptqmodel (GPTQ layout, exact zeros) |
///                     auto_round:auto_awq (AWQ GEMM); block_name_to_quantize (or the older
///                     to_quant_block_names): only modules under those prefixes are quantized;
///                     extra_config {module name or regex: {bits, group_size, sym, data_type}},
///                     bits >= 16 leaving the module float; an exact name wins over a regex.
///   compressed-tensors format pack-quantized: config_groups of int weights (num_bits 4|8,
///                     strategy group|channel, group_size, symmetric) targeting "Linear", a
///                     module name or "re:" regexes (a name wins over a regex over "Linear");
///                     "ignore" (names or "re:" regexes) stay float, as do modules no group
///                     targets.
/// Everything else (2/3-bit, marlin / exllama / ipex / GEMV layouts, float or activation
/// quantization, FP8) is refused with Error(unsupported) naming the key and its value;
/// malformed values are Error(invalid_input).

#include "tpullm/support/error.hpp"
#include "tpullm/support/regex.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpullm::frontend {

/// Weight quantization method of the checkpoint.
enum class QuantMethod { none, gptq, awq, auto_round, compressed_tensors };

/// The HF spelling of a QuantMethod ("none", "gptq", "awq", "auto-round", "compressed-tensors").
inline constexpr std::string_view quant_method_name(QuantMethod m) noexcept {
  switch (m) {
  case QuantMethod::none:
    return "none";
  case QuantMethod::gptq:
    return "gptq";
  case QuantMethod::awq:
    return "awq";
  case QuantMethod::auto_round:
    return "auto-round";
  case QuantMethod::compressed_tensors:
    return "compressed-tensors";
  }
  return "?";
}

/// How the tensors of one quantized linear are stored (frontend/model_desc.hpp has the shapes).
///   gptq:      qweight [K/pack, N] packed along K, qzeros [G, N/pack], scales [G, N], g_idx;
///   awq:       qweight [K, N/pack] packed along N in the order 0,2,4,6,1,3,5,7, qzeros, scales;
///   ct_packed: compressed-tensors weight_packed [N, K/pack] packed along K, weight_scale
///              [N, G], weight_zero_point [N/pack, G] packed along N (asymmetric only),
///              weight_shape [2], weight_g_idx [K] (optional); values stored offset by 2^(b-1).
enum class QuantLayout { gptq, awq, ct_packed };

/// The quantization of one linear, resolved from the config and its per-module rules.
struct LinearQuant {
  QuantLayout layout = QuantLayout::gptq;
  /// 4 or 8.
  int bits = 4;
  /// Rows of K sharing a scale; -1 = one group over K (also compressed-tensors "channel").
  std::int64_t group_size = -1;
  /// Symmetric (informational for GPTQ/AWQ, whose stored zeros are authoritative; decides
  /// whether compressed-tensors stores weight_zero_point).
  bool sym = true;
  /// AWQ: qzeros stored.
  bool zero_point = true;
  /// Added to stored zeros: 1 for GPTQ v1 (and auto_round:auto_gptq), else 0.
  int zero_offset = 0;
  /// Act-order: a g_idx tensor is required.
  bool desc_act = false;
};

/// One per-module rule: a match and what it does to the matching modules.
struct QuantRule {
  /// exact: the name equals `pattern`; full: the regex matches the whole name; prefix: the
  /// regex matches at the start (Python re.match); any: every linear ("Linear" targets).
  enum class Match { exact, full, prefix, any };
  Match match = Match::exact;
  /// The key as written in the config (e.g. "-:model\\.layers\\.0\\..*" without the "-:").
  std::string pattern;
  /// Matching modules stay float.
  bool skip = false;
  /// Overrides for matching modules (unset: the config-wide value).
  std::optional<int> bits;
  std::optional<std::int64_t> group_size;
  std::optional<bool> sym;
  std::optional<bool> desc_act;
  /// Compiled `pattern` for full / prefix.
  std::shared_ptr<const UserRegex> re;
};

/// config.json "quantization_config", validated.
///   gptq: bits 4|8, group_size > 0 or -1 (one group over all of K), desc_act, sym,
///         checkpoint_format "gptq" (zeros stored minus 1: zero_offset 1) or "gptq_v2" (0).
///   awq:  bits 4, group_size > 0 or -1, zero_point, version "gemm" (zero_offset 0).
///   auto-round / compressed-tensors: as the header comment says; `layout` and `zero_offset`
///   hold the packing's layout and zero convention.
struct QuantConfig {
  QuantMethod method = QuantMethod::none;
  /// Bits per weight (4 or 8); 0 when not quantized.
  int bits = 0;
  /// Rows of K sharing one scale/zero; -1 = a single group spanning K.
  std::int64_t group_size = 0;
  /// GPTQ act-order: g_idx is a permutation-derived group map (requires g_idx tensors).
  bool desc_act = false;
  /// Symmetric quantization (zeros are the midpoint).
  bool sym = true;
  /// AWQ: zero points stored (qzeros present).
  bool zero_point = true;
  /// Added to the unpacked stored zero to get the real zero: 1 for GPTQ v1, else 0.
  int zero_offset = 0;
  /// GPTQ "checkpoint_format" ("gptq" or "gptq_v2"); AWQ "version" ("gemm"); AutoRound
  /// "packing_format"; compressed-tensors "format" ("pack-quantized").
  std::string format;
  /// Tensor layout of the quantized linears.
  QuantLayout layout = QuantLayout::gptq;
  /// The lm_head is quantized too (gptq / auto-round "lm_head": true, or a rule naming it).
  bool lm_head = false;
  /// A linear no rule names is quantized (false for compressed-tensors: only targets are).
  bool default_quantized = true;
  /// Per-module rules, first match wins (dynamic, extra_config, ignore, config_groups).
  std::vector<QuantRule> rules;
  /// AWQ modules_to_not_convert: a module whose name contains one of these stays float.
  std::vector<std::string> not_convert;
  /// AutoRound block_name_to_quantize: when non-empty, only modules under one of these
  /// prefixes are quantized.
  std::vector<std::string> blocks;
};

/// The quantization of the linear named `module` (e.g. "model.layers.0.self_attn.q_proj", or
/// "lm_head"), or nullopt when it stays float. The lm_head is quantized only when the config
/// says so (QuantConfig::lm_head or a rule that names it).
std::optional<LinearQuant> linear_quant(const QuantConfig& qc, std::string_view module);

namespace detail {

/// Typed reads of quantization_config fields; errors name `where` and the key.
struct QuantReader {
  std::string where;

  static const nlohmann::json* get(const nlohmann::json& o, std::string_view key);
  std::int64_t integer(const nlohmann::json& v, std::string_view key) const;
  bool boolean(const nlohmann::json& v, std::string_view key) const {
    check(v.is_boolean(), ErrorKind::invalid_input, where, "quantization_config \"", key,
          "\" must be true or false, got ", v.dump());
    return v.get<bool>();
  }
  std::string string(const nlohmann::json& v, std::string_view key) const {
    check(v.is_string(), ErrorKind::invalid_input, where, "quantization_config \"", key,
          "\" must be a string, got ", v.dump());
    return v.get<std::string>();
  }
  bool bool_or(const nlohmann::json& o, std::string_view key, bool def) const {
    const auto* v = get(o, key);
    return v ? boolean(*v, key) : def;
  }
  /// bits 4 | 8 (2, 3 and the rest refused by name; `float_bits` >= 16 returned as is).
  int bits(const nlohmann::json& v, std::string_view key, std::string_view who,
           bool float_ok = false) const;
  std::int64_t group(const nlohmann::json& v, std::string_view key) const;
  /// A compiled bounded regex (UserRegex) of at most 256 characters (longer, nested deeper than
  /// 32, or malformed: invalid_input naming the key).
  std::shared_ptr<const UserRegex> regex(const std::string& pattern, std::string_view key) const;
};

std::string lower_ascii(std::string s);

/// A list of strings, or one comma-separated string (AutoRound block names).
std::vector<std::string> string_list(const QuantReader& r, const nlohmann::json& v,
                                     std::string_view key, bool split_commas);

/// GPTQModel "dynamic": {"-:re": {}, "+:re": {overrides}, "re": {overrides}}.
void parse_dynamic(const QuantReader& r, const nlohmann::json& d, QuantConfig& qc);

/// AutoRound "extra_config": {name or regex: {bits, group_size, sym, data_type}}; exact names
/// are tried before regexes.
void parse_extra_config(const QuantReader& r, const nlohmann::json& e, QuantConfig& qc);

/// A compressed-tensors target or ignore entry: "re:..." (re.match) or a module name; "Linear"
/// (the class) matches every linear.
QuantRule ct_rule(const QuantReader& r, const std::string& t, std::string_view key);

void parse_compressed_tensors(const QuantReader& r, const nlohmann::json& q, QuantConfig& qc);

} // namespace detail

/// Parses the "quantization_config" object `q` of a config.json; `where` names the file.
QuantConfig parse_quant_config(const nlohmann::json& q, const std::string& where);

} // namespace tpullm::frontend
