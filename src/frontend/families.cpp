// Out-of-line definitions of tpullm/frontend/families.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/families.hpp"

namespace tpullm::frontend {

namespace {
/// "model.layers.N.", where every family's checkpoint keeps layer N's tensors; the switch names
/// each family so that a new one, whose layers might live elsewhere, fails -Wswitch here.
std::string hf_layer_prefix(ModelFamily f, std::int64_t layer) {
  switch (f) {
  case ModelFamily::llama:
  case ModelFamily::qwen2:
  case ModelFamily::qwen3:
  case ModelFamily::mistral:
  case ModelFamily::qwen3_moe:
  case ModelFamily::mixtral:
    break;
  }
  return "model.layers." + std::to_string(layer) + ".";
}
} // namespace

std::string hf_linear_prefix(ModelFamily f, std::int64_t layer, LinearSlot s) {
  const std::string base = hf_layer_prefix(f, layer);
  switch (s) {
  case LinearSlot::q:
    return base + "self_attn.q_proj";
  case LinearSlot::k:
    return base + "self_attn.k_proj";
  case LinearSlot::v:
    return base + "self_attn.v_proj";
  case LinearSlot::o:
    return base + "self_attn.o_proj";
  case LinearSlot::gate:
    return base + "mlp.gate_proj";
  case LinearSlot::up:
    return base + "mlp.up_proj";
  case LinearSlot::down:
    return base + "mlp.down_proj";
  }
  return base;
}

std::string hf_norm_name(ModelFamily f, std::int64_t layer, NormSlot s) {
  const std::string base = hf_layer_prefix(f, layer);
  switch (s) {
  case NormSlot::attn:
    return base + "input_layernorm.weight";
  case NormSlot::mlp:
    return base + "post_attention_layernorm.weight";
  case NormSlot::q:
    return base + "self_attn.q_norm.weight";
  case NormSlot::k:
    return base + "self_attn.k_norm.weight";
  }
  return base;
}

std::string hf_expert_prefix(ModelFamily f, std::int64_t layer, std::int64_t e, ExpertSlot s) {
  const std::string base = hf_layer_prefix(f, layer);
  if (f == ModelFamily::mixtral) {
    const char* w = s == ExpertSlot::gate ? "w1" : s == ExpertSlot::up ? "w3" : "w2";
    return base + "block_sparse_moe.experts." + std::to_string(e) + "." + w;
  }
  const char* w = s == ExpertSlot::gate ? "gate_proj"
                  : s == ExpertSlot::up ? "up_proj"
                                        : "down_proj";
  return base + "mlp.experts." + std::to_string(e) + "." + w;
}

} // namespace tpullm::frontend
