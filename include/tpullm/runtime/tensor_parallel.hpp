#pragma once
/// Tensor parallelism over processes (docs/distributed.md). A bundle compiled with
/// `compile --tensor-parallel N` (frontend/tensor_parallel.hpp, bundle::ModelInfo::
/// tensor_parallel) holds for each rank r and layer i two halves of the block:
///   tp<r>_<block name>   the attention half: rank r's query heads and their KV heads, and the
///                        matching input columns of the output projection: (input_states,
///                        position_ids[, history]) -> (partial [rows, hidden] f32, k, v)
///   tp<r>_mlp_<i>_<rows> the MLP half: rank r's intermediate columns of gate and up and the
///                        matching input columns of down: hidden [rows, hidden] -> partial
///   tp<r>_lm_head(_bB)   the lm_head's slice of the vocabulary: hidden [B, 1, hidden] ->
///                        logits [B, 1, its tokens] (frontend::tp_vocab_rows)
/// Every rank runs every layer of every call, with two all-reduces (sums) over the link per
/// layer, [rows, hidden] f32 each:
///   h = x + sum_r attention_r(x);   y = h + sum_r mlp_r(h)
/// and its slice of each lm_head call, whose logits rank 0 gathers. Rank 0 also runs the
/// embedding and the whole text side (the Session, whose layers and lm_head all go to
/// TensorParallelLayers), and sends each call (the hidden state, positions and KV slots, the
/// pipeline's message: runtime/layer_pipeline.hpp) to ranks 1..N-1 first. Every rank keeps the
/// KV cache of its own heads, in its executor, one region per slot.
///
/// The sums change the order of additions against one process (the projections' dot products
/// are split over ranks), so results agree within rounding, not bit for bit.
///
/// A rank whose half throws sets its slot among N floats after the all-reduce's values, so every
/// rank stops that call at the same layer knowing which ranks failed; each failed rank r > 0
/// then sends rank 0 its error, which rank 0 throws (the lowest rank's), and every rank waits
/// for the next call.

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/runtime/layer_pipeline.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/runtime/stages.hpp"

namespace tpullm::runtime {

/// What one rank of a tensor-parallel run did.
struct TensorParallelStats {
  std::int64_t calls = 0;         ///< segments, tokens and batched steps run
  std::int64_t all_reduces = 0;   ///< two per layer per call
  std::int64_t head_calls = 0;    ///< lm_head calls (their logits gathered on rank 0)
  std::int64_t reduced_bytes = 0; ///< bytes of the values this rank put into all-reduces
  std::int64_t bytes_sent = 0;    ///< rank 0: bytes of the calls it sent to the other ranks
  double seconds = 0;             ///< in calls: the halves and the all-reduces
  double reduce_seconds = 0;      ///< in all-reduces: the transfer and the wait for the slowest
  double total_seconds = 0;       ///< ranks 1..N-1: from start to stop
};

class TensorParallelWorker;

/// Rank 0's side: local_layers() is 0, so a Session (or BatchedDecoder, SlotPool) hands it every
/// layer of every call; submit() sends the call to the other ranks and runs rank 0's halves with
/// them. Destroying it tells the other ranks to stop (serve_tensor_rank returns on every rank).
class TensorParallelLayers : public RemoteLayers {
public:
  /// `stages`: rank 0's (which must own the KV cache: CompiledStages over the tensor-parallel
  /// bundle); `dims`: the model's. Throws Error(invalid_input) unless this is rank 0 of a link
  /// of 2 ranks or more and the stages own their cache.
  TensorParallelLayers(PipelineLink& link, Stages& stages, SessionDims dims,
                       frontend::StageParams params);
  ~TensorParallelLayers() override;
  TensorParallelLayers(const TensorParallelLayers&) = delete;
  TensorParallelLayers& operator=(const TensorParallelLayers&) = delete;

  std::int64_t local_layers() const override { return 0; }
  /// Runs the call on every rank before it returns (nothing overlaps: every rank is busy with
  /// it). Throws Error(internal) for a call of more than pipeline_max_rows rows, the error of a
  /// rank whose half failed (naming the rank), Error(io) when the link failed.
  void submit(const BlockCall& call, std::span<const float> hidden,
              std::span<const std::int32_t> positions,
              std::span<const std::int32_t> slots = {}) override;
  void collect(std::span<float> hidden) override;
  std::int64_t in_flight() const override { return static_cast<std::int64_t>(done_.size()); }
  bool runs_head() const override { return true; }
  /// Every rank's slice of the logits of `hidden` [rows, hidden], gathered into `logits`
  /// [rows, vocab] (through the smallest lm_head slice of at least `rows` rows, in chunks of the
  /// largest). Throws like submit().
  void head(std::span<const float> hidden, std::span<float> logits) override;
  /// Tells the other ranks to stop (once; the destructor does it otherwise). Throws Error(io).
  void stop();
  const TensorParallelStats& stats() const;

private:
  PipelineLink& link_;
  std::unique_ptr<TensorParallelWorker> worker_;
  std::int64_t hidden_, max_rows_;
  std::vector<std::byte> buffer_;
  std::vector<float> rows_;                ///< a head call's padded rows
  std::vector<float> mine_;                ///< rank 0's logits of a head call
  std::vector<std::byte> reply_;           ///< another rank's reply to a head call
  std::vector<std::int64_t> head_batches_; ///< the lm_head slices' batches, ascending
  std::deque<std::vector<float>> done_;    ///< results of calls not yet collected, oldest first
  std::vector<std::vector<float>> spare_;  ///< collected results' buffers, for the next calls
  bool stopped_ = false;
};

/// Rank r > 0's side: receives each call from rank 0 and runs this rank's halves of every layer
/// with the other ranks (or its lm_head slice, whose logits it sends rank 0), until rank 0
/// stops. Throws Error(io) when the link fails, Error(invalid_input) for stages that do not own
/// their cache.
TensorParallelStats serve_tensor_rank(PipelineLink& link, Stages& stages, SessionDims dims,
                                      const frontend::StageParams& params);

} // namespace tpullm::runtime
