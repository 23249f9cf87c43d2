#pragma once
/// Pipeline parallelism over processes (docs/distributed.md): rank r of N runs a contiguous range
/// of the decoder layers (runtime/layer_split.hpp); rank 0 also runs the embedding, the lm_head
/// and the whole text side (tokenizer, sampling, the Session). A prompt segment or a token goes
/// 0 -> 1 -> ... -> N-1 -> 0 as one message per hop: a fixed header, the hidden state [rows,
/// hidden] f32, the positions [rows] i32 and the KV slots [rows] i32, and nothing else. Every
/// rank keeps the KV cache of its own layers (its executor's, one region per slot), written at
/// the positions and slots the message names, so the ranks hold no other state: truncation,
/// prompt reuse and speculative rollback stay rank 0's Sessions' business.
///
/// Rank 0 may have several calls in flight (submit() several, then collect() each): the ranks
/// take them in order, so while rank 1 runs one call's layers rank 0 runs the next call's (the
/// micro-batches of `serve`, runtime/slot_pool.hpp). Replies come back in the order sent.
///
/// The transport is a PipelineLink: MPI between processes (include/tpullm/mpi, built when CMake
/// finds MPI) or anything else that moves bytes in order between two ranks (the tests use
/// threads). The arithmetic is that of one process: the same stage functions on the same
/// inputs, so logits are bit for bit those of a single-process run at the same thread count.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/runtime/layer_split.hpp"
#include "tpullm/runtime/stages.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

struct SessionDims;

/// Moves messages between the ranks of one run, in order per pair of ranks.
class PipelineLink {
public:
  virtual ~PipelineLink() = default;
  virtual int rank() const = 0;  ///< this process's rank, in [0, ranks())
  virtual int ranks() const = 0; ///< ranks in the run
  /// Sends `bytes` to rank `to`; the buffer may be reused when it returns. Throws Error(io)
  /// when the transport fails.
  virtual void send(int to, std::span<const std::byte> bytes) = 0;
  /// Receives the next message from rank `from` into `buffer` and returns its size. Throws
  /// Error(io) when the transport fails or the message is larger than `buffer`.
  virtual std::size_t recv(int from, std::span<std::byte> buffer) = 0;
  /// Sums `values` element-wise over every rank, in place (a collective: every rank calls it
  /// with as many values, in the same order of calls; tensor parallel, runtime/
  /// tensor_parallel.hpp). The default sends every rank's values to rank 0, which adds them in
  /// rank order and sends the sum back, so every rank holds the same bits; MpiLink uses
  /// MPI_Allreduce. Throws Error(io) when the transport fails.
  virtual void all_reduce_sum(std::span<float> values);
};

/// What a hop carries besides the hidden state: which stage variant the layers run.
enum class BlockKind : std::uint32_t {
  prefill = 1,    ///< block_i (_P): a first segment, no history
  prefill_kv = 2, ///< block_kv_i (_P): a later segment over the cached history
  decode = 3,     ///< block_cache_i_S: one token over S history slots
  /// block_cache_i_S_bB: one token of each of B conversations (rows = B), each on its own KV
  /// slot at its own position, over S history slots (runtime/batched_decode.hpp)
  decode_batch = 4,
};

/// One call of every layer of a range: `rows` rows of hidden state at positions starting at
/// `pos0`, through the variant of length `variant` (P rows for prefill / prefill_kv, the history
/// length S for decode).
struct BlockCall {
  BlockKind kind = BlockKind::decode;
  std::int64_t rows = 0;
  std::int64_t variant = 0;
  std::int64_t pos0 = 0;
  std::int32_t slot = 0; ///< the KV slot of every row (decode_batch: each row's own, see submit)
};

/// Layers the Session does not run itself: it runs layers [0, local_layers()) and hands the
/// hidden state to run(), which leaves the last layer's output in its place; or to submit(),
/// whose result collect() takes later (calls in flight are collected in the order submitted).
class RemoteLayers {
public:
  virtual ~RemoteLayers() = default;
  /// Layers run locally, from layer 0.
  virtual std::int64_t local_layers() const = 0;
  /// Starts the other layers of `call` on `hidden` [rows, hidden] (copied: the span may be
  /// reused on return); `positions` [rows]; `slots` [rows] the KV slot of each row, or empty
  /// for call.slot on every row.
  virtual void submit(const BlockCall& call, std::span<const float> hidden,
                      std::span<const std::int32_t> positions,
                      std::span<const std::int32_t> slots = {}) = 0;
  /// The last layer's output [rows, hidden] of the oldest call in flight, into `hidden` (its
  /// size: that call's rows * hidden).
  virtual void collect(std::span<float> hidden) = 0;
  /// Calls submitted and not yet collected.
  virtual std::int64_t in_flight() const = 0;
  /// True when the lm_head runs here too (head()): tensor parallel splits the vocabulary over
  /// the ranks. The default: false, the Session runs its own lm_head.
  virtual bool runs_head() const { return false; }
  /// The logits [rows, vocab] of `hidden` [rows, hidden] (the final norm and the lm_head), with
  /// nothing in flight; only where runs_head(). The default throws Error(internal).
  virtual void head(std::span<const float> /*hidden*/, std::span<float> /*logits*/) {
    throw Error(ErrorKind::internal, "pipeline", "these remote layers do not run the lm_head");
  }
  /// submit() then collect(), in place on `hidden`; with nothing else in flight.
  void run(const BlockCall& call, std::span<float> hidden, std::span<const std::int32_t> positions,
           std::span<const std::int32_t> slots = {}) {
    check(in_flight() == 0, ErrorKind::internal, "pipeline", "a call run while ", in_flight(),
          " are in flight");
    submit(call, hidden, positions, slots);
    collect(hidden);
  }
};

/// The most rows one call carries: a prompt segment (max_input_length) or a batched decode step
/// (the largest of decode_batch_sizes()), whichever is larger.
inline std::int64_t pipeline_max_rows(const frontend::StageParams& p) {
  const auto b = p.decode_batch_sizes();
  return std::max<std::int64_t>(p.max_input_length, b.empty() ? 1 : b.back());
}

/// Traffic and waiting of rank 0's side of a pipeline.
struct PipelineStats {
  std::int64_t round_trips = 0;    ///< calls collected (one per segment, token or batch)
  std::int64_t bytes_sent = 0;     ///< by this rank, headers included
  double seconds = 0;              ///< inside submit() and collect(): sending and waiting
  std::int64_t most_in_flight = 0; ///< the most calls in flight at once
};

/// Rank 0's side: sends each call down the ranks and waits for the last rank's hidden state.
/// Destroying it tells the other ranks to stop (serve_pipeline_rank returns on every rank).
class LayerPipeline : public RemoteLayers {
public:
  /// `ranges`: every rank's layers (ranges[0] this rank's); `hidden`: the model's hidden size;
  /// `max_rows`: the most rows a call carries (pipeline_max_rows). Throws Error(invalid_input)
  /// unless this is rank 0 of a link of ranges.size() ranks whose ranges cover the layers in
  /// order.
  LayerPipeline(PipelineLink& link, std::vector<LayerRange> ranges, std::int64_t hidden,
                std::int64_t max_rows);
  ~LayerPipeline() override;
  LayerPipeline(const LayerPipeline&) = delete;
  LayerPipeline& operator=(const LayerPipeline&) = delete;

  std::int64_t local_layers() const override { return ranges_.front().end; }
  /// Throws Error(internal) for a call of more than max_rows rows or slots of the wrong count,
  /// Error(io) when the link failed.
  void submit(const BlockCall& call, std::span<const float> hidden,
              std::span<const std::int32_t> positions,
              std::span<const std::int32_t> slots = {}) override;
  /// Throws Error naming the rank when a rank's layers failed (its own error's kind), Error(io)
  /// when the link failed, Error(internal) for a reply that does not match the call or with
  /// nothing in flight.
  void collect(std::span<float> hidden) override;
  std::int64_t in_flight() const override { return static_cast<std::int64_t>(pending_.size()); }
  /// Tells the other ranks to stop (once; the destructor does it otherwise). Throws Error(io).
  void stop();
  const PipelineStats& stats() const { return stats_; }
  const std::vector<LayerRange>& ranges() const { return ranges_; }

private:
  PipelineLink& link_;
  std::vector<LayerRange> ranges_;
  std::int64_t hidden_, max_rows_;
  std::vector<std::byte> buffer_;
  std::deque<BlockCall> pending_; ///< submitted, not yet collected, oldest first
  PipelineStats stats_;
  bool stopped_ = false;
};

/// What serve_pipeline_rank did.
struct PipelineRankStats {
  std::int64_t calls = 0;   ///< segments and tokens run
  double busy_seconds = 0;  ///< running this rank's layers
  double total_seconds = 0; ///< from start to stop
};

/// Rank r > 0's side: receives each call from rank r - 1, runs layers `range` on it through
/// `stages` (which must own the KV cache: CompiledStages, on the slots each call names:
/// Stages::run_on), and sends the result to rank r + 1,
/// or to rank 0 from the last rank; returns when rank 0 stops the pipeline. A call whose layers
/// throw is answered with that error (rank 0 throws it) and the loop goes on. Throws Error(io)
/// when the link fails, Error(invalid_input) for a stages object that does not own its cache.
PipelineRankStats serve_pipeline_rank(PipelineLink& link, Stages& stages, LayerRange range,
                                      std::int64_t hidden, const frontend::StageParams& params);

} // namespace tpullm::runtime
