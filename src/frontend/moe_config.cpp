// Out-of-line definitions of tpullm/frontend/moe_config.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/moe_config.hpp"

namespace tpullm::frontend {

auto MoeConfig::sparse_layer(std::int64_t layer) const -> bool {
  if (!enabled())
    return false;
  if (std::find(dense_layers.begin(), dense_layers.end(), layer) != dense_layers.end())
    return false;
  return (layer + 1) % sparse_step == 0;
}

} // namespace tpullm::frontend

namespace tpullm::frontend::detail {

const char* other_moe_reason(std::string_view model_type) {
  if (model_type == "qwen2_moe")
    return "a shared expert with a sigmoid gate beside the routed experts";
  if (model_type == "deepseek_v2" || model_type == "deepseek_v3")
    return "grouped top-k routing, a sigmoid router with a correction bias and shared experts";
  if (model_type == "dbrx" || model_type == "olmoe" || model_type == "granitemoe" ||
      model_type == "phimoe" || model_type == "jetmoe" || model_type == "jamba" ||
      model_type == "minimax" || model_type == "llama4" || model_type == "gpt_oss" ||
      model_type == "qwen3_next" || model_type == "glm4_moe" || model_type == "ernie4_5_moe" ||
      model_type == "hunyuan_v1_moe" || model_type == "granitemoeshared")
    return "a mixture-of-experts layout other than qwen3_moe / mixtral";
  return nullptr;
}

std::int64_t moe_int(const nlohmann::json& j, const std::string& where, const char* key,
                     std::int64_t def, bool required) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    check(!required, ErrorKind::invalid_input, where, "missing \"", key, "\"");
    return def;
  }
  check(it->is_number_integer() || it->is_number_unsigned(), ErrorKind::invalid_input, where, "\"",
        key, "\" must be an integer, got ", it->dump());
  check(!it->is_number_unsigned() || it->get<std::uint64_t>() <= (1ull << 31),
        ErrorKind::invalid_input, where, "\"", key, "\" = ", it->dump(), " is out of range");
  return it->get<std::int64_t>();
}

std::int64_t moe_expert_count(const nlohmann::json& j, const std::string& where, const char* own,
                              std::int64_t def, bool required) {
  // transformers maps num_experts and num_local_experts onto one attribute (Qwen3-MoE configs
  // written by transformers 5 spell it as Mixtral's do): either spelling, or both when equal.
  const auto given = [&](const char* key) {
    const auto it = j.find(key);
    return it != j.end() && !it->is_null();
  };
  const bool a = given("num_experts"), b = given("num_local_experts");
  if (a && b) {
    const std::int64_t x = moe_int(j, where, "num_experts", 0, true);
    const std::int64_t y = moe_int(j, where, "num_local_experts", 0, true);
    check(x == y, ErrorKind::invalid_input, where, "\"num_experts\" = ", x,
          " and \"num_local_experts\" = ", y,
          " name the same expert count (two spellings of one field) but differ");
    return x;
  }
  if (!a && !b) {
    check(!required, ErrorKind::invalid_input, where, "missing \"", own,
          "\" (or its other spelling \"",
          std::string_view(own) == "num_experts" ? "num_local_experts" : "num_experts", "\")");
    return def;
  }
  return moe_int(j, where, a ? "num_experts" : "num_local_experts", def, required);
}

bool moe_bool(const nlohmann::json& j, const std::string& where, const char* key, bool def) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return def;
  check(it->is_boolean(), ErrorKind::invalid_input, where, "\"", key,
        "\" must be true or false, got ", it->dump());
  return it->get<bool>();
}

} // namespace tpullm::frontend::detail

namespace tpullm::frontend {

void refuse_other_moe(std::string_view model_type, const std::string& where) {
  if (const char* why = detail::other_moe_reason(model_type))
    throw_error(ErrorKind::unsupported, where, "model_type '", model_type,
                "' is not supported: ", why,
                " (supported mixtures of experts: qwen3_moe, mixtral)");
}

MoeConfig parse_moe_config(const nlohmann::json& j, const std::string& where, MoeLayout layout,
                           std::int64_t layers, std::int64_t intermediate) {
  MoeConfig m;
  m.layout = layout;
  const auto positive = [&](std::int64_t v, const char* key) {
    check(v > 0 && v <= (std::int64_t{1} << 31), ErrorKind::invalid_input, where, "\"", key,
          "\" = ", v, " is out of range (1 .. 2^31)");
    return v;
  };
  switch (layout) {
  case MoeLayout::none:
    return MoeConfig{};
  case MoeLayout::qwen3_moe: {
    m.experts = positive(detail::moe_expert_count(j, where, "num_experts", 0, true), "num_experts");
    m.top_k =
        positive(detail::moe_int(j, where, "num_experts_per_tok", 0, true), "num_experts_per_tok");
    m.expert_intermediate = positive(detail::moe_int(j, where, "moe_intermediate_size", 0, true),
                                     "moe_intermediate_size");
    m.renormalize = detail::moe_bool(j, where, "norm_topk_prob", false);
    m.sparse_step =
        positive(detail::moe_int(j, where, "decoder_sparse_step", 1, false), "decoder_sparse_step");
    check(detail::moe_int(j, where, "shared_expert_intermediate_size", 0, false) == 0,
          ErrorKind::unsupported, where,
          "\"shared_expert_intermediate_size\" > 0: a shared expert is not supported");
    if (const auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
      check(it->is_array(), ErrorKind::invalid_input, where,
            "\"mlp_only_layers\" must be an array of layer indices, got ", it->dump());
      for (const auto& v : *it) {
        check(v.is_number_integer() || v.is_number_unsigned(), ErrorKind::invalid_input, where,
              "\"mlp_only_layers\" entries must be integers, got ", v.dump());
        const auto i = v.get<std::int64_t>();
        check(i >= 0 && i < layers, ErrorKind::invalid_input, where, "\"mlp_only_layers\" entry ",
              i, " is outside [0, ", layers, ")");
        m.dense_layers.push_back(i);
      }
      std::sort(m.dense_layers.begin(), m.dense_layers.end());
      m.dense_layers.erase(std::unique(m.dense_layers.begin(), m.dense_layers.end()),
                           m.dense_layers.end());
    }
    break;
  }
  case MoeLayout::mixtral:
    m.experts = positive(detail::moe_expert_count(j, where, "num_local_experts", 8, false),
                         "num_local_experts");
    m.top_k =
        positive(detail::moe_int(j, where, "num_experts_per_tok", 2, false), "num_experts_per_tok");
    m.expert_intermediate = intermediate;
    m.renormalize = true;
    break;
  }
  check(m.top_k <= m.experts, ErrorKind::invalid_input, where, "num_experts_per_tok ", m.top_k,
        " is larger than the expert count ", m.experts);
  check(detail::moe_int(j, where, "n_group", 1, false) <= 1 &&
            detail::moe_int(j, where, "topk_group", 1, false) <= 1,
        ErrorKind::unsupported, where,
        "grouped top-k routing (n_group / topk_group) is not supported");
  return m;
}

} // namespace tpullm::frontend
