#pragma once
/// Tensor parallelism, the compiler's half: a model's layers split over N MPI ranks (Megatron
/// style). Rank r holds heads/N query heads, their key / value heads (kv_heads/N of them, or the
/// one head they read when N is a multiple of kv_heads: frontend::tp_kv_heads) and I/N of the
/// MLP's intermediate columns; each block becomes two halves whose partial sums the runtime
/// adds across ranks:
///   h   = x + allreduce_sum_r( tp<r>_<block name>(x, positions[, history]).partial )
///   out = h + allreduce_sum_r( tp<r>_mlp_<layer>_<rows>(h) )
/// Sliced weights are named with the rank's suffix (".tp<r>": "layers.3.q.tp1",
/// "layers.3.o_bias.tp0"); weights every rank uses whole keep their ordinary names
/// ("layers.3.attn_norm", "rope.cos", "embedding"), which is how the runtime tells what a rank
/// loads.

#include <charconv>
#include <cstdint>
#include <string_view>
#include <string>
#include <vector>

#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/ir/module.hpp"

namespace tpullm::frontend {

/// The most ranks a tensor-parallel split accepts.
inline constexpr std::int64_t kMaxTensorParallel = 64;

/// Empty when `heads` query heads, `kv_heads` key / value heads and `intermediate` MLP columns
/// split over `ranks` ranks (heads and intermediate evenly, kv heads evenly or one per rank when
/// `ranks` is a multiple of them, at most as many ranks as the `vocab` tokens), else a one-line
/// reason naming the numbers: the one rule of compile (tensor_parallel_refusal) and of the
/// bundle reader (Model.tensor_parallel).
std::string tp_split_refusal(std::int64_t heads, std::int64_t kv_heads, std::int64_t intermediate,
                             std::int64_t vocab, std::int64_t ranks);

/// Empty when `d` can be split over `ranks` ranks, else a one-line reason naming the numbers:
/// ranks outside [2, kMaxTensorParallel], heads or intermediate not divisible by ranks, key /
/// value heads neither divisible by ranks nor dividing it, a mixture-of-experts layer, a layer
/// linear (or bias) or head in GPTQ / AWQ / compressed-tensors packing, or GGUF blocks of o or
/// down that a rank's share of their columns would cut.
std::string tensor_parallel_refusal(const ModelDesc& d, std::int64_t ranks);

/// Rank `rank`'s shard of `d` split over `ranks` (tensor_parallel_refusal(d, ranks) empty):
/// dims.heads = heads / N, dims.kv_heads = tp_kv_heads(kv_heads, N), dims.intermediate =
/// intermediate / N; per layer q (and q_bias) keep the rows of query heads
/// [r*heads/N, (r+1)*heads/N), k / v (and biases) those of its key / value heads (heads
/// [r*kvh/N, (r+1)*kvh/N), or the one head r / (N / kvh) its query heads read when replicated),
/// gate / up rows [r*I/N, (r+1)*I/N), o and down the matching columns (in-features; copied,
/// owned by the view's keepalive; row slices are zero-copy views). o_bias stays on rank 0 only.
/// Norms, embedding, lm_head and final_norm are shared unchanged; dtypes are kept.
ModelDesc tensor_shard(const ModelDesc& d, std::int64_t rank, std::int64_t ranks);

/// Where each rank's slice of the vocabulary starts for the lm_head's halves: N + 1 boundaries
/// from 0 to vocab (rank r computes logits [v[r], v[r + 1]) of every row), as even as whole
/// tokens allow.
std::vector<std::int64_t> tp_vocab_rows(std::int64_t vocab, std::int64_t ranks);

/// Rank `rank`'s lm_head slice of `batch` rows (StageNames::tp_head): hidden [B, 1, H] f32 ->
/// logits [B, 1, v[r + 1] - v[r]] f32, the final RMSNorm then rows [v[r], v[r + 1]) of the head
/// (of the tied embedding table when tied: weight "embedding.tp<r>", else "lm_head.tp<r>").
ir::Module build_tp_head(const ModelDesc& d, std::int64_t rank, std::int64_t ranks,
                         std::int64_t batch);

/// The weight-name suffix of rank `rank`'s sliced weights: ".tp<rank>".
inline std::string tp_weight_suffix(std::int64_t rank) {
  return ".tp" + std::to_string(rank);
}

/// The rank whose shard weight `name` is: r when `name` has ".tp<r>" as a whole dot-separated
/// part (the lowering appends its own parts after it: "layers.3.q.tp1.pf32"), else -1 (a weight
/// every rank reads whole).
inline std::int64_t tp_weight_rank(std::string_view name) {
  for (auto at = name.find(".tp"); at != std::string_view::npos; at = name.find(".tp", at + 1)) {
    const char* first = name.data() + at + 3;
    const char* last = name.data() + name.size();
    std::int64_t r = -1;
    const auto [end, ec] = std::from_chars(first, last, r);
    if (ec == std::errc{} && end != first && (end == last || *end == '.'))
      return r;
  }
  return -1;
}

/// Every stage module of a tensor-parallel bundle over `ranks` ranks, in a deterministic order:
/// embedding, embedding_cache; then for each rank r and layer i the attention half of every
/// block variant build_top_modules builds (StageNames::tp_attention(r, its name): arguments
/// input_states [B, L, H] f32, position_ids [B, L] i32, history_k / history_v
/// [B, S, tp_kv_heads, D] f32 when S > 0; results partial [B, L, H] f32, k, v
/// [B, L, tp_kv_heads, D] f32) and the MLP half for each distinct row count in the prefill
/// lengths, 1 and the batched decode sizes, ascending (StageNames::tp_mlp(r, i, rows):
/// input_states [1, rows, H] f32 -> partial [1, rows, H] f32); then lm_head, lm_head_greedy,
/// lm_head_bB and final_norm as build_top_modules; then for each rank its lm_head slices of 1
/// and of each batched decode size (build_tp_head). Throws Error(invalid_input) with
/// tensor_parallel_refusal's reason when `d` cannot be split.
std::vector<ir::Module> build_tensor_parallel_modules(const ModelDesc& d, const StageParams& params,
                                                      std::int64_t ranks);

} // namespace tpullm::frontend
