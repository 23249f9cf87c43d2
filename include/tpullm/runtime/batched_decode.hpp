#pragma once
/// Batched decode over one Executor whose KV cache holds several conversations (slots): one
/// step feeds every row's next token through `embedding_cache` (per row: a gather), the
/// block_cache_i_S_bB functions (hidden_states [B, 1, H]: every linear layer one GEMM of
/// M = B, so each weight is read once for the whole batch; attention, RoPE and the cache write
/// per row, at the row's own position in the row's own slot) and lm_head_bB. B is the smallest
/// compiled batch that holds the rows (padding rows repeat the last real row, which computes
/// and writes the same values again); S the smallest decode length that holds the longest
/// history. One row runs the conversation's own single-slot decode stage (no batching cost).

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/runtime/executor.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

/// One row of a batched decode step: a conversation and the token fed at its next position.
struct DecodeRow {
  Session* session = nullptr; ///< its stage executor runs on KV slot `slot` of the executor
  std::int32_t slot = 0;      ///< its KV slot
  std::int32_t token = 0;     ///< the id fed at position session->length()
};

/// See the file comment.
class BatchedDecoder {
public:
  /// Finds the compiled batch sizes of `exec` (block_cache_0_S_bB and lm_head_bB present for
  /// B in [2, StageParams::kMaxDecodeBatch]); batch 1 is always there.
  BatchedDecoder(Executor& exec, SessionDims dims, frontend::StageParams params);

  /// The compiled batch sizes, ascending (1 first).
  const std::vector<std::int64_t>& batches() const { return batches_; }
  /// True when the bundle has a batched decode (a batch above 1).
  bool batched() const { return batches_.size() > 1; }
  /// The smallest compiled batch >= n, else the largest one.
  std::int64_t batch_for(std::int64_t n) const;

  /// Feeds every row's token one step (rows in chunks of the largest batch) and returns the
  /// logits [rows, vocab], row order kept. Each session's length() grows by one. Throws
  /// Error(invalid_input) for a full cache, an id outside the vocabulary, a slot out of range
  /// or two rows on one slot.
  std::vector<float> decode(std::span<const DecodeRow> rows);

private:
  /// One decode call of the smallest batch holding `rows` (at most the largest batch).
  void step(std::span<const DecodeRow> rows, std::vector<float>& logits);

  /// Program ids of batch B, decode length S: block_cache_i_S_bB per layer, then lm_head_bB.
  const std::vector<std::int64_t>& functions(std::int64_t B, std::int64_t S);

  Executor& exec_;
  SessionDims dims_;
  frontend::StageParams params_;
  std::vector<std::int64_t> batches_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::int64_t>> fns_;
  std::int64_t embed_id_ = -1;
  std::vector<std::int32_t> ids_, pos_, slots_;
  std::vector<float> hidden_[2], head_;
};

} // namespace tpullm::runtime
