#pragma once
/// A pool of generation slots over one executor: what `tpullm serve` computes with, and what a
/// library user serving several conversations at once builds on. Each slot is one conversation
/// with its own KV region of the executor (memory/kv_geometry.hpp), its Session, its PromptCache
/// (the ids its cache holds: a prompt reuses their longest common prefix) and, while it answers,
/// its Generation (sampler, stop ids, stop strings, budget, streamed text).
///
/// No thread and no queue: the caller assigns requests to idle slots (pick(), start()) and calls
/// step() for one scheduler round. In a round every busy slot takes one step: a slot in its
/// prompt feeds one prefill segment (max_input_length tokens; its first token when that was the
/// last one), and the slots generating decode their next token, together in one batched decode
/// call (runtime/batched_decode.hpp) when the bundle has batched variants, else in turn. So a
/// prefill segment of one slot and the decode rows of the others share a round, and a long
/// prompt or answer delays another slot's next token by at most one step per busy slot.
///
/// Speculative decoding (GenerateOptions::speculation, speculation.hpp): a generating slot whose
/// request has draft_max > 0 and a draft this round verifies it alone (Session::verify: one call
/// of 1 + k rows) instead of joining the batched decode, and emits one event per token kept, so
/// a round may carry several events of that slot; slots without a draft this round decode
/// together as above. The answers are those of plain decoding, token for token. A slot drafts
/// only while it is the one slot generating (or the bundle has no batched decode): its verify
/// call reads every weight for one slot, where the batched round it would leave serves every
/// generating slot in one read (docs/serve.md measured 0.5-0.6x of the aggregate at 2-4
/// clients when slots drafted beside a batch); set_draft_beside_batch(true) lifts this.
///
/// Pipeline parallel (set_remote_layers, runtime/layer_pipeline.hpp): every slot's layers past
/// rank 0's run on the other ranks, on the same KV slot of their executors. A round then runs
/// its verify calls first, each a call through every rank in turn, and then decodes the
/// generating slots in micro-batches (contiguous groups of slots), with the prompt segments in
/// flight behind them: it begins every micro-batch and segment (rank 0's layers, then handed
/// on) before it finishes the first (the other ranks' layers, then rank 0's lm_head), so while
/// rank 1 runs micro-batch 1's layers rank 0 runs micro-batch 2's. (A prompt's tail too close
/// to the end of the cache for a padded segment is fed before anything is in flight.) The answers
/// are those of one process: each micro-batch is a batched decode of its rows.
///
/// Slot states (as llama.cpp's server has them):
///   idle -> start() -> prefill -> (last prompt segment fed, first token) -> generating
///   -> (the answer ended, failed, or cancel()) -> idle.

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/runtime/batched_decode.hpp"
#include "tpullm/runtime/generation.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

class Executor;
class PromptCache;
class CompiledStages;

/// A request refused for want of capacity right now (a slot that is not idle; a server's wait
/// queue that is full): retry later. Its kind is invalid_input (the request cannot be taken as it
/// stands); callers that answer it differently (`tpullm serve`: 503) tell it apart by its type.
class BusyError : public Error {
public:
  /// where: what is busy (e.g. "slot pool"); message: why.
  BusyError(std::string where, std::string message)
      : Error(ErrorKind::invalid_input, std::move(where), std::move(message)) {}
};

/// Where a slot stands.
enum class SlotState {
  idle,       ///< no request; its KV cache keeps the last conversation for reuse
  prefill,    ///< feeding its prompt, one segment per round
  generating, ///< decoding its answer, one token per round
};

/// "idle", "prefill" or "generating".
std::string_view to_string(SlotState s) noexcept;

/// What a slot is asked to generate.
struct SlotRequest {
  std::vector<std::int32_t> prompt; ///< the whole prompt (every token of the conversation)
  GenerateOptions options;          ///< sampling and stop rules (eos ids included)
};

/// What one slot did in a round.
struct SlotEvent {
  int slot = 0;                   ///< which slot
  std::int32_t token = -1;        ///< the token chosen this round (-1: none, a prefill segment)
  std::string text;               ///< answer text decided this round
  bool first_token = false;       ///< this round chose the answer's first token
  std::optional<StopReason> stop; ///< the answer ended (the slot is idle again)
  std::exception_ptr error;       ///< the step failed (the slot is idle, its cache forgotten)
  std::int64_t prompt_tokens = 0; ///< the whole prompt
  std::int64_t cached_tokens = 0; ///< prompt tokens found in the slot's KV cache at start()
  std::int64_t generated = 0;     ///< tokens generated so far (the stop token included)
  std::optional<TokenLogprobs> logprobs; ///< the token's (GenerateOptions::logprobs >= 0)
};

/// What one round did.
struct SlotRound {
  std::vector<SlotEvent> events; ///< one per busy slot that fed a segment, chose a token or failed
  std::int64_t prefill_segments = 0; ///< prefill segments fed
  std::int64_t decode_batch = 0;     ///< rows of the round's batched decode calls (0: none)
  std::int64_t micro_batches = 0;    ///< micro-batch decode steps of a pipelined round (0: none)
  SpeculationStats speculation;      ///< the round's verify calls, drafted and kept tokens
};

/// See the file comment. Not thread-safe: one thread drives the pool.
class SlotPool {
public:
  /// One slot per KV slot of `exec` (Executor::kv_geometry().slots), each a Session over it.
  /// `tok` decodes answers into text (null: ids only; stop strings are then refused); `exec`
  /// and `tok` must outlive the pool.
  SlotPool(Executor& exec, SessionDims dims, frontend::StageParams params,
           const text::Tokenizer* tok);
  ~SlotPool();
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  /// Number of slots.
  int size() const { return static_cast<int>(slots_.size()); }
  /// The state of `slot`.
  SlotState state(int slot) const;
  /// True when some slot is not idle.
  bool busy() const;
  /// The idle slot for `prompt`: the one whose cache shares the longest reusable prefix with it
  /// (PromptCache::reusable), else the least recently used; nullopt when every slot is busy.
  std::optional<int> pick(const std::vector<std::int32_t>& prompt) const;
  /// Starts `request` on idle `slot`: keeps the reusable prefix of its cache and makes the
  /// answer's Generation. Throws BusyError for a slot that is not idle, Error(invalid_input)
  /// for an empty prompt or bad options (the slot stays idle).
  void start(int slot, const SlotRequest& request);
  /// Ends `slot`'s request now (the client went away); the slot is idle. Nothing for an idle one.
  void cancel(int slot);
  /// One scheduler round (see the file comment). A slot whose step throws ends with an event
  /// carrying the error (its cache forgotten); the others go on.
  SlotRound step();
  /// Largest compiled batched decode (1: none).
  std::int64_t max_decode_batch() const { return decoder_.batches().back(); }
  /// Lets a slot draft while other slots generate in a batched round (default false: drafts only
  /// for a slot generating alone; see the file comment).
  void set_draft_beside_batch(bool on) { draft_beside_batch_ = on; }
  /// Runs the layers past `remote->local_layers()` on a pipeline's other ranks from now on (see
  /// the file comment), the generating slots decoding in `micro_batches` micro-batches in
  /// flight together (at least as many as the largest batch needs; 1: one batch, the ranks in
  /// turn), each taking up to `steps_per_round` decode steps per round; null runs every layer
  /// here again. `remote` must outlive its use. Throws Error(invalid_input) for micro_batches
  /// or steps_per_round outside [1, 64] or a remote that keeps no layer here, Error(internal)
  /// while a slot is busy.
  void set_remote_layers(RemoteLayers* remote, int micro_batches = 2, int steps_per_round = 1);
  /// The micro-batches of a pipelined round (1 without a pipeline).
  int micro_batches() const { return remote_ ? micro_batches_ : 1; }

private:
  struct Slot;
  void step_one(Slot& s, SlotRound& round);
  /// The draft `s` verifies this round (empty: it decodes plainly).
  std::vector<std::int32_t> draft_for(Slot& s);
  void speculate(Slot& s, const std::vector<std::int32_t>& draft, SlotRound& round);
  void decode_together(const std::vector<Slot*>& slots, SlotRound& round);
  /// decode_together() through a pipeline: micro-batches begun together, then finished in turn,
  /// with the prompt segments of `segments` in flight behind them.
  void decode_pipelined(const std::vector<Slot*>& slots, const std::vector<Slot*>& segments,
                        SlotRound& round);
  /// Tokens of `s`'s next prompt segment (at most max_input_length).
  std::int64_t next_segment(const Slot& s) const;
  /// `s`'s next prompt segment (a view of its prompt).
  std::span<const std::int32_t> segment_of(const Slot& s) const;
  /// Records a prompt segment fed to `s`; true when it was the prompt's last (the slot is then
  /// generating and its logits choose the answer's first token).
  bool segment_fed(Slot& s, std::span<const std::int32_t> seg, SlotRound& round);
  /// Takes the logits of `slots`' step [slots, vocab] (decode_together, decode_pipelined).
  void consume_batch(const std::vector<Slot*>& slots, std::span<const float> logits,
                     SlotRound& round);
  /// Takes the token `s` chooses from `logits` with `length` tokens fed (-1: the session's).
  void consume(Slot& s, std::span<const float> logits, SlotRound& round, std::int64_t length = -1);
  void fail(Slot& s, SlotRound& round);
  SlotEvent event_of(const Slot& s) const;
  void release(Slot& s);

  Executor& exec_;
  frontend::StageParams params_;
  const text::Tokenizer* tok_;
  BatchedDecoder decoder_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::uint64_t clock_ = 0;
  bool draft_beside_batch_ = false;
  RemoteLayers* remote_ = nullptr;
  int micro_batches_ = 2;
  int steps_per_round_ = 1;
};

} // namespace tpullm::runtime
