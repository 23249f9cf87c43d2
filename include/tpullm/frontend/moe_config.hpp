#pragma once
/// The mixture-of-experts part of a HuggingFace config.json: which layers route their MLP
/// through experts, how many experts, how many per token, and whether the chosen weights are
/// renormalised. Two layouts are read:
/// The expert count is read under either spelling, num_experts or num_local_experts (as
/// transformers' attribute maps do: a Qwen3-MoE config written by transformers 5 says
/// num_local_experts); a config giving both with different values is refused.
///   qwen3_moe: num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob,
///              decoder_sparse_step, mlp_only_layers (those layers keep a dense MLP of
///              intermediate_size); tensors mlp.gate (router) and
///              mlp.experts.{e}.{gate,up,down}_proj.
///   mixtral:   num_local_experts, num_experts_per_tok, every layer sparse, experts of
///              intermediate_size, top-k weights always renormalised; tensors
///              block_sparse_moe.gate and block_sparse_moe.experts.{e}.w1 / w3 / w2.
/// Routing (both): p = softmax(x · router^T) over all experts in f32 or wider, the top_k largest
/// (lower index first on ties), divided by their sum when `renormalize`, then
/// y = sum_j p_j * down_e(silu(gate_e(x)) * up_e(x)).
/// Other MoE shapes (shared experts, grouped top-k, sigmoid routers with a bias) are refused by
/// model_type (refuse_other_moe).

#include "tpullm/support/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpullm::frontend {

/// How a family names its router and expert tensors.
enum class MoeLayout { none, qwen3_moe, mixtral };

/// The validated MoE fields of a config. `experts == 0` for a dense model.
struct MoeConfig {
  MoeLayout layout = MoeLayout::none;
  /// E: routed experts per sparse layer (>= 1 when layout != none).
  std::int64_t experts = 0;
  /// k: experts per token, 1 <= k <= E.
  std::int64_t top_k = 0;
  /// Width of one expert's MLP.
  std::int64_t expert_intermediate = 0;
  /// Divide the chosen k probabilities by their sum (qwen3_moe: norm_topk_prob; mixtral: true).
  bool renormalize = false;
  /// qwen3_moe: layer i is sparse when (i + 1) % sparse_step == 0 and i is not dense_layers.
  std::int64_t sparse_step = 1;
  /// Layers that keep a dense MLP (qwen3_moe mlp_only_layers), ascending.
  std::vector<std::int64_t> dense_layers;

  /// True for a model with routed experts.
  bool enabled() const noexcept { return layout != MoeLayout::none; }
  /// True when decoder layer `layer` has a routed MLP.
  bool sparse_layer(std::int64_t layer) const;
};

namespace detail {

/// Known model_types of MoE shapes tpullm does not run, with the reason shown when refused.
const char* other_moe_reason(std::string_view model_type);

std::int64_t moe_int(const nlohmann::json& j, const std::string& where, const char* key,
                     std::int64_t def, bool required);

bool moe_bool(const nlohmann::json& j, const std::string& where, const char* key, bool def);

/// The expert count of `j` under either spelling (num_experts, num_local_experts); `own` is the
/// layout's usual spelling, named when both are missing (an error when `required`, else `def`).
/// Throws Error(invalid_input) when both are given with different values.
std::int64_t moe_expert_count(const nlohmann::json& j, const std::string& where, const char* own,
                              std::int64_t def, bool required);

} // namespace detail

/// Throws Error(unsupported) naming `model_type` when it is a known MoE shape tpullm refuses.
void refuse_other_moe(std::string_view model_type, const std::string& where);

/// Reads the MoE fields of config `j` for `layout` (qwen3_moe or mixtral); `layers` is
/// num_hidden_layers and `intermediate` intermediate_size. Errors name the field: top-k larger
/// than the expert count, a non-positive width, a dense layer index out of range, a shared
/// expert (Error(unsupported)).
MoeConfig parse_moe_config(const nlohmann::json& j, const std::string& where, MoeLayout layout,
                           std::int64_t layers, std::int64_t intermediate);

} // namespace tpullm::frontend
