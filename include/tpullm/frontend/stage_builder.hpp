#pragma once
/// Builds the Top modules of a model, one per layer and stage (the paper's Listings 1-3):
///   embedding        (input_ids [1, L] i32) -> hidden [1, L, H] f32, L = max_input_length
///   embedding_cache  the same with L = 1
///   block_i          (input_states [1, L, H], position_ids [1, L]) -> (hidden, k, v)
///   block_kv_i       + (history_k, history_v [1, seq_length - L, kv_heads, d]) -> (hidden, k, v)
///   block_i_P, block_kv_i_P  the same with L = P for each shorter prefill variant P
///   block_cache_i_S  L = 1, history [1, S, kv_heads, d] for each decode length S
///   block_cache_i_S_bB  batched decode: input_states [B, 1, H], position_ids [B, 1], history
///                    [B, S, kv_heads, d] (row b: its own conversation's cache) for each batch B
///   lm_head          (hidden [1, 1, H]) -> logits [1, 1, V] f32
///   lm_head_bB       (hidden [B, 1, H]) -> logits [B, 1, V] f32
///   lm_head_greedy   (hidden [1, 1, H]) -> token [1, 1, 1] i32 (ArgMax inside)
///   final_norm       (hidden [1, 1, H]) -> normed [1, 1, H] f32 (the model's final RMSNorm,
///                    lm_head's first op: what embeddings return, runtime/embeddings.hpp)
/// k and v are the new tokens' post-RoPE keys and values [1, L, kv_heads, d]. Every block
/// module comes from one parameterized template (build_block), never three copies; so do the
/// attention and MLP halves of a tensor-parallel layer (BlockPart, frontend/tensor_parallel.hpp).

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/frontend/top_weights.hpp"
#include "tpullm/ir/builder.hpp"

namespace tpullm::frontend {

/// Which part of a decoder layer a block function computes.
///   whole:     (input_states [B, L, H], position_ids [B, L], history_k / history_v
///              [B, S, kv_heads, D] when S > 0) -> (hidden = x + attn + mlp [B, L, H], k, v)
///   attention: the same arguments -> (partial [B, L, H] f32 = o(attention) (+ o_bias where the
///              desc has one), k, v): no residual add, no MLP (tensor parallel: the runtime adds
///              x and the ranks' partials)
///   mlp:       (input_states [1, L, H] f32) -> (partial [1, L, H] f32 =
///              down(silu(gate(mlp_norm(h))) * up(mlp_norm(h)))): no residual add
enum class BlockPart { whole, attention, mlp };

/// Which variant of the block template to build.
struct BlockShape {
  std::int64_t layer = 0;   ///< decoder layer index
  std::int64_t tokens = 1;  ///< L: new tokens per call (rows of an mlp part)
  std::int64_t history = 0; ///< static history slots (0: prefill without history; 0 for mlp)
  std::int64_t batch = 1;   ///< B: independent rows (conversations); > 1 only for decode
  BlockPart part = BlockPart::whole; ///< the whole layer or one tensor-parallel half
  /// Appended to the names of the weights a tensor-parallel rank holds sliced (q, k, v, o, their
  /// biases, gate, up, down: "layers.3.q" + ".tp1"); norms and RoPE tables keep their names.
  std::string weight_suffix = {};
};

/// Every block variant of layer `layer` that build_top_modules builds, in its order: for each
/// prefill length the prefill block (and the prefill_kv block when with_history), then each
/// decode length, then each batched decode size's decode lengths; each with its function name.
std::vector<std::pair<BlockShape, std::string>> block_variants(std::int64_t layer,
                                                               const StageParams& params);

namespace detail {

/// Emits y = x W (+ bias) for a linear slot: plain weights are [out, in] (transpose_b),
/// quantized ones logical [in, out]. The weight is `@name<suffix>`, the bias
/// `@name_bias<suffix>`.
ir::Value* linear(ir::Builder& b, ir::Value* x, const std::string& name, const WeightRef& w,
                  const WeightRef& bias, const std::string& suffix = "");

inline ir::Value* rms_norm(ir::Builder& b, ir::Value* x, const std::string& name,
                           const WeightRef& gamma, double eps) {
  return b.create(ir::top::RMSNormOp{static_cast<float>(eps)},
                  {x, b.weight(slot_weight(name, gamma))});
}

/// The gated MLP: fused top.MLP when the three weights share one orientation, else the same
/// computation spelled with MatMul, SiLU and Mul; weights `@<prefix>gate<suffix>` etc.
ir::Value* mlp(ir::Builder& b, ir::Value* x, const std::string& prefix, const LayerWeights& w,
               const std::string& suffix = "");

/// The routed MLP of a sparse layer as one fused top.MoE: operands x, @layers.i.router, then
/// @layers.i.expert.e.{gate,up,down} for every expert (plain weights, HF [out, in]).
ir::Value* moe(ir::Builder& b, ir::Value* x, const std::string& prefix, const ModelDesc& d,
               const LayerWeights& w);

} // namespace detail

/// The block template: prefill (history = 0), prefill_kv (history > 0, L > 1) and decode
/// (L = 1) all come from here, whole or as one half (s.part); `rope` are the model's tables
/// (rope_weights), `name` is the function's name. Function info: the layer, and the stage
/// prefill / prefill_kv / decode by history and L (an mlp part: decode when L = 1, else
/// prefill).
ir::Module build_block(const ModelDesc& d, const BlockShape& s, const RopeWeights& rope,
                       const std::string& name);

/// `embedding` (L = tokens): input_ids [1, L] i32 -> hidden [1, L, H] f32.
ir::Module build_embedding(const ModelDesc& d, std::int64_t tokens, const std::string& name);

/// `lm_head`: hidden [B, 1, H] -> logits [B, 1, V] f32 (final RMSNorm, then the head or the
/// tied embedding: the weight "lm_head" or "embedding", `weight_suffix` appended, as a
/// tensor-parallel rank's slice names it); with `greedy`, returns only the argmax token
/// [B, 1, 1] i32.
ir::Module build_lm_head(const ModelDesc& d, bool greedy, const std::string& name,
                         std::int64_t batch = 1, const std::string& weight_suffix = "");

/// `final_norm`: hidden [1, 1, H] -> normed [1, 1, H] f32, the final RMSNorm alone (the same op
/// and weight as lm_head's first op).
ir::Module build_final_norm(const ModelDesc& d, const std::string& name);

/// Appends `embedding` (L = max_input_length) and `embedding_cache` (L = 1) to `out`.
void append_embedding_modules(std::vector<ir::Module>& out, const ModelDesc& d,
                              const StageParams& params);

/// Appends lm_head, lm_head_greedy, lm_head_bB for each batched decode size B, and final_norm
/// to `out`.
void append_head_modules(std::vector<ir::Module>& out, const ModelDesc& d,
                         const StageParams& params);

/// Every stage module of the model for `params`, in a deterministic order: embedding,
/// embedding_cache, then per layer block_i and block_kv_i (with_history) for each prefill
/// length (max_input_length first: block_i; then block_i_P for the shorter variants),
/// block_cache_i_S for each decode length (then block_cache_i_S_bB for each batched decode size
/// B), then lm_head, lm_head_greedy, lm_head_bB for each B, and final_norm.
std::vector<ir::Module> build_top_modules(const ModelDesc& d, const StageParams& params);

} // namespace tpullm::frontend
