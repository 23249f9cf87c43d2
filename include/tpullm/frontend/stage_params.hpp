#pragma once
/// Compile-time parameters of the stage modules (the paper's section 4): sequence capacity,
/// prompt segment length, decode chunk list, and whether prefill_kv modules are generated.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tpullm/support/error.hpp"

namespace tpullm::frontend {

/// Static shapes every stage module is compiled for.
struct StageParams {
  std::int64_t seq_length = 512;      ///< KV-cache capacity and RoPE table rows (positions)
  std::int64_t max_input_length = 64; ///< tokens per prefill / prefill_kv call (L)
  std::int64_t decode_chunk = 0;      ///< smallest decode variant; 0 = one variant (seq_length)
  bool with_history = true;           ///< also build block_kv_i (prefill with history)
  /// Explicit decode variants below seq_length (e.g. {512, 256, 128}); when not empty it
  /// replaces the halving rule of decode_chunk.
  std::vector<std::int64_t> decode_chunks;
  /// Shorter prefill / prefill_kv variants below max_input_length (e.g. {16, 64, 128, 256}): each a
  /// block_i_P / block_kv_i_P function sharing the layer's weights; a prompt segment runs
  /// through the smallest variant that holds it, so a short prompt costs what its length does,
  /// not a whole padded max_input_length. Empty: max_input_length only.
  std::vector<std::int64_t> prefill_chunks;
  /// Also the default variants kAutoPrefillChunks that are below max_input_length (what the
  /// tools compile unless told otherwise).
  bool prefill_auto = false;
  /// Speculative decoding's verify segment lengths (k + 1 rows for k drafts, each in
  /// [2, kMaxVerifyLength] and <= max_input_length): more prefill / prefill_kv variants, as
  /// prefill_chunks are (a verify call runs through the smallest prefill_kv variant that holds
  /// it; docs/bundle.md "The verify stage").
  std::vector<std::int64_t> verify_lengths;
  /// The longest verify segment (the runtime verifies at most 15 drafts at once).
  static constexpr std::int64_t kMaxVerifyLength = 16;
  /// Batched decode variants (e.g. {1, 2, 4, 8}): for each B > 1 a block_cache_i_S_bB per
  /// layer and decode length (hidden_states [B, 1, H], each row its own position and KV slot)
  /// and an lm_head_bB. Batch 1 is the plain decode stage, always built.
  std::vector<std::int64_t> decode_batches;
  /// The batched decode sizes above 1, ascending and distinct.
  std::vector<std::int64_t> decode_batch_sizes() const;
  /// The largest batched decode size accepted (rows of one decode call).
  static constexpr std::int64_t kMaxDecodeBatch = 256;
  /// The default shorter prefill variants (those below max_input_length are built).
  static constexpr std::int64_t kAutoPrefillChunks[] = {16, 64, 128, 256};

  /// Static history slots of block_kv_i: the cache capacity left beside one segment.
  std::int64_t prefill_kv_history() const { return seq_length - max_input_length; }
  /// Static history slots of the prefill_kv variant of `tokens` rows.
  std::int64_t prefill_kv_history(std::int64_t tokens) const { return seq_length - tokens; }

  /// Prefill segment lengths, largest first: max_input_length, then the distinct
  /// prefill_chunks and verify_lengths below it.
  std::vector<std::int64_t> prefill_lengths() const;
  /// The prefill variant a segment of `n` tokens (1 <= n <= max_input_length) runs through:
  /// the smallest compiled length >= n.
  std::int64_t prefill_length_for(std::int64_t n) const;

  /// Decode KV lengths, largest first: seq_length, seq_length/2, ... down to decode_chunk
  /// (e.g. 2048 with chunk 256 -> 2048, 1024, 512, 256). The runtime picks the smallest that
  /// holds the current length.
  /// With an explicit decode_chunks list: seq_length, then the list's distinct values below it,
  /// largest first.
  std::vector<std::int64_t> decode_lengths() const;

  /// Throws Error(invalid_input) naming the bad parameter; `max_position` is the model's limit.
  void validate(std::int64_t max_position) const;
};

/// Function names of the stage modules.
struct StageNames {
  static std::string block(std::int64_t layer) { return "block_" + std::to_string(layer); }
  static std::string block_kv(std::int64_t layer) { return "block_kv_" + std::to_string(layer); }
  /// The prefill variant of `tokens` rows (block_i itself when tokens = max_input_length).
  static std::string block(std::int64_t layer, std::int64_t tokens, const StageParams& p) {
    return tokens == p.max_input_length ? block(layer)
                                        : block(layer) + "_" + std::to_string(tokens);
  }
  /// The prefill_kv variant of `tokens` rows (block_kv_i itself when tokens = max_input_length).
  static std::string block_kv(std::int64_t layer, std::int64_t tokens, const StageParams& p) {
    return tokens == p.max_input_length ? block_kv(layer)
                                        : block_kv(layer) + "_" + std::to_string(tokens);
  }
  static std::string block_cache(std::int64_t layer, std::int64_t kv_length) {
    return "block_cache_" + std::to_string(layer) + "_" + std::to_string(kv_length);
  }
  /// The batched decode variant of `batch` rows (block_cache_i_S itself when batch = 1).
  static std::string block_cache(std::int64_t layer, std::int64_t kv_length, std::int64_t batch) {
    return batch == 1 ? block_cache(layer, kv_length)
                      : block_cache(layer, kv_length) + "_b" + std::to_string(batch);
  }
  /// The lm_head of `batch` rows (lm_head itself when batch = 1).
  static std::string lm_head(std::int64_t batch) {
    return batch == 1 ? std::string("lm_head") : "lm_head_b" + std::to_string(batch);
  }
  /// Tensor parallel (frontend/tensor_parallel.hpp): rank `rank`'s attention half of the block
  /// function `block_name` (any of the names above): "tp<rank>_<block_name>".
  static std::string tp_attention(std::int64_t rank, const std::string& block_name) {
    return "tp" + std::to_string(rank) + "_" + block_name;
  }
  /// Tensor parallel: rank `rank`'s slice of the vocabulary of the lm_head of `batch` rows
  /// (frontend::tp_vocab_rows): "tp<rank>_lm_head" or "tp<rank>_lm_head_b<batch>".
  static std::string tp_head(std::int64_t rank, std::int64_t batch) {
    return "tp" + std::to_string(rank) + "_" + lm_head(batch);
  }
  /// Tensor parallel: rank `rank`'s MLP half of layer `layer` for `rows` rows:
  /// "tp<rank>_mlp_<layer>_<rows>".
  static std::string tp_mlp(std::int64_t rank, std::int64_t layer, std::int64_t rows) {
    return "tp" + std::to_string(rank) + "_mlp_" + std::to_string(layer) + "_" +
           std::to_string(rows);
  }
};

/// Key / value heads each rank of a tensor-parallel split over `ranks` keeps: kv_heads / ranks
/// when it divides, else 1 (each rank keeps the one head its query heads read: ranks a
/// multiple of kv_heads); 0 when neither holds (no such split).
inline std::int64_t tp_kv_heads(std::int64_t kv_heads, std::int64_t ranks) {
  if (ranks <= 1)
    return kv_heads;
  if (kv_heads % ranks == 0)
    return kv_heads / ranks;
  return ranks % kv_heads == 0 ? 1 : 0;
}

} // namespace tpullm::frontend
