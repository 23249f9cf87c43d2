#pragma once
/// Batched decode over one Executor whose KV cache holds several conversations (slots): one
/// step feeds every row's next token through `embedding_cache` (per row: a gather), the
/// block_cache_i_S_bB functions (hidden_states [B, 1, H]: every linear layer one GEMM of
/// M = B, so each weight is read once for the whole batch; attention, RoPE and the cache write
/// per row, at the row's own position in the row's own slot) and lm_head_bB. B is the smallest
/// compiled batch that holds the rows (padding rows repeat the last real row, which computes
/// and writes the same values again); S the smallest decode length that holds the longest
/// history. One row runs the conversation's own single-slot decode stage (no batching cost).
///
/// In a pipeline (set_remote_layers: runtime/layer_pipeline.hpp) the layers past rank 0's go to
/// the other ranks as one decode_batch call of the B rows with their slots and positions; a
/// step may then be begun and finished apart (begin(), finish()), so that rank 0 begins the
/// next micro-batch while the other ranks run this one's layers.

#include <algorithm>
#include <cstdint>
#include <deque>
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

  /// Runs layers [remote->local_layers(), layers) through `remote` from now on (null: every
  /// layer here again). `remote` must outlive its use; no step may be begun and not finished.
  void set_remote_layers(RemoteLayers* remote);
  /// Begins one decode step of `rows` (1 to the largest batch; every row's session has room, a
  /// valid token and its own slot): the embedding and the layers run here, the rest handed to
  /// the remote layers. Without remote layers the whole step runs here (one row: at finish(),
  /// through its session's own decode stage). The rows'
  /// sessions must not be fed before the step is finished. Same refusals as decode(), thrown
  /// here (nothing is begun then).
  void begin(std::span<const DecodeRow> rows);
  /// Finishes the oldest begun step: its logits [rows, vocab]; each of its sessions' length()
  /// grows by one. Throws what the remote layers or the lm_head throw (the step is then dropped
  /// and its sessions' caches are not known).
  std::vector<float> finish();
  /// Steps begun and not finished.
  std::int64_t begun() const { return static_cast<std::int64_t>(begun_.size()); }

private:
  /// A begun step: its rows, batch and decode length, and its logits when it ran here whole.
  struct Begun {
    std::vector<DecodeRow> rows;
    std::int64_t B = 0, S = 0;
    std::vector<float> logits;
  };
  /// The checks, ids, positions and slots of a step of `rows` in batch `B`; its decode length.
  std::int64_t prepare(std::span<const DecodeRow> rows, std::int64_t B);
  /// Embedding and layers [0, end) of a prepared step; returns the hidden buffer holding it.
  int run_layers(std::int64_t B, std::int64_t S, std::int64_t end);
  /// lm_head_bB on hidden buffer `cur`: the logits of its first `n` rows [n, vocab].
  std::vector<float> head(std::int64_t B, std::int64_t S, int cur, std::int64_t n);

  /// Program ids of batch B, decode length S: block_cache_i_S_bB per layer, then lm_head_bB.
  const std::vector<std::int64_t>& functions(std::int64_t B, std::int64_t S);

  Executor& exec_;
  SessionDims dims_;
  frontend::StageParams params_;
  std::vector<std::int64_t> batches_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::int64_t>> fns_;
  std::int64_t embed_id_ = -1;
  RemoteLayers* remote_ = nullptr;
  std::deque<Begun> begun_; ///< oldest first
  std::vector<std::int32_t> ids_, pos_, slots_;
  std::vector<float> hidden_[2], head_;
};

} // namespace tpullm::runtime
