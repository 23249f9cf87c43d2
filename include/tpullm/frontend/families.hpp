#pragma once
/// HuggingFace tensor naming of the supported families. This is the only place in tpullm where
/// HF tensor names ("model.layers.{i}.self_attn.q_proj.weight", ...) are spelled out; everything
/// downstream works with ModelDesc slots.

#include "tpullm/frontend/hf_config.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace tpullm::frontend {

/// The linear projections of one decoder layer.
enum class LinearSlot { q, k, v, o, gate, up, down };

/// The RMSNorm gammas of one decoder layer (q/k: per-head norms of qwen3).
enum class NormSlot { attn, mlp, q, k };

/// Short name of a linear slot ("q", "gate", ...), used in messages.
inline constexpr std::string_view slot_name(LinearSlot s) noexcept {
  switch (s) {
  case LinearSlot::q:
    return "q";
  case LinearSlot::k:
    return "k";
  case LinearSlot::v:
    return "v";
  case LinearSlot::o:
    return "o";
  case LinearSlot::gate:
    return "gate";
  case LinearSlot::up:
    return "up";
  case LinearSlot::down:
    return "down";
  }
  return "?";
}

/// HF module path of a linear, without the ".weight"/".qweight" suffix, e.g.
/// "model.layers.3.self_attn.q_proj". All four families share the llama naming.
std::string hf_linear_prefix(ModelFamily f, std::int64_t layer, LinearSlot s);

/// HF tensor name of a layer's norm gamma, e.g. "model.layers.3.input_layernorm.weight".
std::string hf_norm_name(ModelFamily f, std::int64_t layer, NormSlot s);

/// The three linears of one routed expert (SwiGLU: down(silu(gate x) * up x)).
enum class ExpertSlot { gate, up, down };

/// HF name of layer `layer`'s router weight [experts, hidden]: "model.layers.3.mlp.gate.weight"
/// (qwen3_moe) or "model.layers.3.block_sparse_moe.gate.weight" (mixtral).
inline std::string hf_router_name(ModelFamily f, std::int64_t layer) {
  const std::string base = "model.layers." + std::to_string(layer) + ".";
  return base + (f == ModelFamily::mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
}

/// HF module path of expert `e`'s linear in layer `layer`, without ".weight":
/// "model.layers.3.mlp.experts.5.gate_proj" (qwen3_moe) or
/// "model.layers.3.block_sparse_moe.experts.5.w1" (mixtral: w1 gate, w3 up, w2 down).
std::string hf_expert_prefix(ModelFamily f, std::int64_t layer, std::int64_t e, ExpertSlot s);

/// HF name of the token embedding table [vocab, hidden].
inline std::string hf_embedding_name(ModelFamily) {
  return "model.embed_tokens.weight";
}
/// HF name of the final RMSNorm gamma [hidden].
inline std::string hf_final_norm_name(ModelFamily) {
  return "model.norm.weight";
}
/// HF name of the output projection [vocab, hidden] (absent on disk when tied).
inline std::string hf_lm_head_name(ModelFamily) {
  return "lm_head.weight";
}

/// True for checkpoint tensors that carry no model weights and may be ignored
/// (e.g. "model.layers.0.self_attn.rotary_emb.inv_freq" saved by old transformers).
inline bool hf_is_ignorable_tensor(ModelFamily, std::string_view name) {
  constexpr std::string_view inv_freq = ".rotary_emb.inv_freq";
  return name.size() >= inv_freq.size() && name.substr(name.size() - inv_freq.size()) == inv_freq;
}

} // namespace tpullm::frontend
