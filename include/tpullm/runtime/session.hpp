#pragma once
/// The three-stage generation loop of the paper (section 4.5) over any Stages:
/// prompts go through `embedding` + block_i (first segment) or block_kv_i (later segments,
/// with the cached history) + lm_head; single tokens go through `embedding_cache` + the
/// smallest block_cache_i_S whose S holds the history + lm_head.
///
/// The KV cache is one [seq_length, kv_heads, head_dim] f32 buffer per layer (slot = position).
/// A back end that owns it (the compiled executor) updates it in place and the loop passes it
/// nothing; otherwise (the interpreter) the loop keeps it: history inputs are spans over the
/// cache's first S slots and new keys / values are written straight into their slots. Hidden
/// states live in two session buffers used in turn, so nothing is copied between stages.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/runtime/generation.hpp"
#include "tpullm/runtime/layer_pipeline.hpp"
#include "tpullm/runtime/stages.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

/// Model dimensions the loop needs.
struct SessionDims {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t vocab = 0;
};

/// What Session::generate produced.
struct GenerateResult {
  std::vector<std::int32_t> tokens;    ///< generated ids; the last one is not in the KV cache
  StopReason reason = StopReason::eos; ///< why it stopped
  std::int64_t prompt_tokens = 0;      ///< tokens prefilled
  double prefill_seconds = 0;          ///< prompt through the stages + first token (= TTFT)
  double decode_seconds = 0;           ///< every later token
  /// Of prefill_seconds, what a draft model took to catch up on the prompt
  /// (SpeculationOptions::prepare; 0 without one).
  double draft_prefill_seconds = 0;
  SpeculationStats speculation; ///< verify calls and drafts (speculation.hpp)
};

/// One conversation's state: KV cache length (and the cache itself when the back end does not
/// own it), over one model's Stages.
class Session {
public:
  Session(Stages& stages, SessionDims dims, frontend::StageParams params);

  /// Tokens held in the KV cache (= position of the next token).
  std::int64_t length() const { return length_; }
  const frontend::StageParams& params() const { return params_; }
  const SessionDims& dims() const { return dims_; }
  /// Forgets the conversation (the cache contents become don't-care).
  void reset() {
    length_ = 0;
    written_ = 0;
  }
  /// Keeps the first `n` cached tokens and forgets the rest (their slots are overwritten by
  /// the next tokens fed). Throws Error(invalid_input) unless 0 <= n <= length() and the
  /// caches still hold what a token at position n sees (keepable(n) == n: a sliding-window
  /// layer's ring may have overwritten it).
  void truncate(std::int64_t n) {
    check(n >= 0 && n <= length_, ErrorKind::invalid_input, "session", "cannot keep ", n, " of ",
          length_, " cached tokens");
    check(stages_.kv_keeps(written_, n), ErrorKind::invalid_input, "session", "cannot keep ", n,
          " of ", length_, " cached tokens: positions up to ", written_ - 1,
          " were written since, and a sliding-window layer's ring cache no longer holds the "
          "keys before position ",
          n, " (feed the conversation again from position 0)");
    length_ = n;
  }
  /// The tokens truncate() may keep of the first `n` (n <= length()): `n`, or 0 when a
  /// sliding-window layer's ring cache has overwritten keys a token at position n sees (the
  /// conversation must then be fed again from position 0).
  std::int64_t keepable(std::int64_t n) const { return stages_.kv_keeps(written_, n) ? n : 0; }

  /// Throws Error(invalid_input) when the KV cache is full (no token can be fed at length()):
  /// the one place decode, batched decode and extend_one() refuse a full cache.
  void check_room() const {
    check(length_ < params_.seq_length, ErrorKind::invalid_input, "decode",
          "the KV cache is full (", params_.seq_length, " tokens = the compiled sequence length)");
  }
  /// Records that a batched decode step (runtime/batched_decode.hpp) wrote one more token into
  /// this conversation's caches at position length(). Throws as check_room() when the cache is
  /// full.
  void extend_one() {
    check_room();
    length_ += 1;
    written_ = std::max(written_, length_);
  }

  /// Feeds `tokens` at positions length().. in segments of max_input_length (1 prefill or
  /// prefill_kv per segment) and returns the logits [rows, vocab] of every prompt position
  /// when `all_rows`, else of the last one only. A tail too close to the end of the cache for a
  /// padded segment goes through the decode stage token by token. Throws Error(invalid_input)
  /// when the prompt does not fit the compiled sequence length or names an id outside the
  /// vocabulary.
  std::vector<float> prefill(const std::vector<std::int32_t>& tokens, bool all_rows,
                             const std::function<void(std::int64_t, std::int64_t)>& progress = {});

  /// Feeds `tokens` as prefill() does but runs no lm_head: `on_hidden(i, row)` sees the last
  /// block's hidden state [hidden] (before the final norm) of prompt token i, for every i when
  /// `all_rows`, else for the last one only, in order. The row is valid during the call. Same
  /// refusals as prefill().
  void prefill_hidden(const std::vector<std::int32_t>& tokens, bool all_rows,
                      const std::function<void(std::int64_t, std::span<const float>)>& on_hidden);

  /// Feeds one token at position length() and returns its logits [vocab].
  std::vector<float> decode(std::int32_t token);

  /// Whether a prompt segment of `n` tokens at length() can be begun and finished apart
  /// (begin_segment): with remote layers, n in [1, max_input_length], and a padded segment that
  /// fits the cache.
  bool segment_splits(std::int64_t n) const;
  /// Begins feeding `tokens` as one prompt segment at length() (segment_splits() must hold):
  /// the embedding and the local layers run now, the remote layers' part is submitted (calls
  /// may be in flight before and after it). The session must not be fed until
  /// finish_segment(). Same refusals as prefill(), thrown before anything is submitted.
  void begin_segment(std::span<const std::int32_t> tokens);
  /// Finishes the begun segment: the logits [vocab] of its last token, and length() grows by
  /// its tokens, as prefill(tokens, false) would give. Throws what the remote layers throw (the
  /// length then stays).
  std::vector<float> finish_segment();

  /// Feeds `tokens` at positions length().. as one segment (the prefill_kv variant that holds
  /// it) and returns the logits [tokens, vocab] of every row: speculative decoding's verify call.
  /// The rows go through the smallest batched lm_head (lm_head_bB, --decode-batches) that holds
  /// them when there is one, else through lm_head one by one. Same refusals as prefill().
  std::vector<float> verify(std::span<const std::int32_t> tokens);

  /// The back end the stages run on.
  Stages& stages() { return stages_; }

  /// Runs layers [remote->local_layers(), layers) through `remote` (a pipeline's other ranks,
  /// runtime/layer_pipeline.hpp) from now on, on their KV slot `slot` (this conversation's slot
  /// of their executors: a SlotPool's slot index); null runs every layer here again. `remote`
  /// must outlive its use (tensor parallel, runtime/tensor_parallel.hpp, keeps no layer here).
  /// Throws Error(invalid_input) unless it keeps 0 to layers - 1 layers here.
  void set_remote_layers(RemoteLayers* remote, std::int32_t slot = 0) {
    check(!remote || (remote->local_layers() >= 0 && remote->local_layers() < dims_.layers),
          ErrorKind::invalid_input, "pipeline", "rank 0 must run 0 to ", dims_.layers - 1,
          " of the ", dims_.layers, " layers, not ", remote ? remote->local_layers() : 0);
    remote_ = remote;
    remote_slot_ = slot;
  }

  /// Generates an answer to `prompt` (fed after what the cache already holds: a second turn
  /// goes through prefill_kv with the kept cache): prefill, then sample / decode until an eos
  /// id, the token budget or the end of the compiled sequence. `on_token` sees each token as it
  /// is chosen. The last generated token is not fed (no wasted decode step); a next turn that
  /// wants it in the history puts it first in its prompt. Throws Error(invalid_input) for bad
  /// options, a prompt that does not fit, or ids outside the vocabulary.
  GenerateResult generate(const std::vector<std::int32_t>& prompt, const GenerateOptions& options,
                          const std::function<void(std::int32_t)>& on_token = {});
  /// As above with the answer's rules and text in `gen` (runtime/generation.hpp: built over the
  /// whole conversation, with a tokenizer for text and stop strings): `on_step` sees each step
  /// (its token, the text it decided, the stop) as it is taken. Same refusals.
  GenerateResult generate(const std::vector<std::int32_t>& prompt, Generation& gen,
                          const std::function<void(const GenerationStep&)>& on_step = {});

  /// The decode variant used at position p: the smallest compiled S >= p.
  std::int64_t decode_length_for(std::int64_t p) const {
    return decode_length_for(decode_fns_.lengths, p);
  }
  /// The smallest of `lengths` >= p; throws Error(invalid_input) when none holds p.
  static std::int64_t decode_length_for(const std::vector<std::int64_t>& lengths, std::int64_t p);

private:
  std::int64_t row() const { return dims_.kv_heads * dims_.head_dim; }

  void check_ids(std::span<const std::int32_t> ids) const {
    for (auto id : ids)
      check(id >= 0 && id < dims_.vocab, ErrorKind::invalid_input, "prompt", "token id ", id,
            " is outside the vocabulary [0, ", dims_.vocab, ")");
  }

  /// Stage functions of one kind per (compiled length, layer), resolved on first use.
  struct Handles {
    std::vector<std::int64_t> lengths;        ///< the compiled lengths (variants)
    std::vector<std::vector<StageHandle>> fn; ///< [length index][layer]; id -1: not resolved yet
  };

  /// The handle of length `n`'s function for `layer` (`name()` builds its name, only the first
  /// time).
  template <class Name>
  StageHandle handle(Handles& h, std::int64_t n, std::int64_t layer, Name&& name) {
    for (std::size_t i = 0; i < h.lengths.size(); ++i)
      if (h.lengths[i] == n) {
        StageHandle& x = h.fn[i][static_cast<std::size_t>(layer)];
        if (x.id < 0)
          x = stages_.resolve(name());
        return x;
      }
    throw Error(ErrorKind::internal, "session", str_cat("no compiled variant of length ", n));
  }
  StageHandle once(StageHandle& h, const char* name) {
    if (h.id < 0)
      h = stages_.resolve(name);
    return h;
  }

  /// ids_[0, L) -> hidden buffer 0; returns the buffer index.
  int embed(StageHandle& fn, const char* name, std::int64_t L);

  /// Layers run here: all of them, or those before a pipeline's other ranks'.
  std::int64_t local_layers() const { return remote_ ? remote_->local_layers() : dims_.layers; }
  /// After the local layers of a call: the remote ones, in place on hidden buffer `cur`.
  void run_remote(BlockKind kind, std::int64_t rows, std::int64_t variant, std::int64_t pos0,
                  int cur);

  /// One block function: hidden buffer `cur` -> the other one, history of `S` slots (0: none),
  /// new keys / values at slots [pos0, pos0 + L).
  void block(StageHandle fn, std::int64_t layer, std::int64_t L, std::int64_t pos0, std::int64_t S,
             int cur);

  /// One prompt segment `seg` (checked) at length() through the embedding and the local layers,
  /// in the prefill (or, with history, prefill_kv) variant of P rows; returns the hidden buffer
  /// holding its output (rows past the segment are padding).
  int local_segment(std::span<const std::int32_t> seg, std::int64_t P);
  /// The refusals of prefill() for `tokens` at length().
  void check_feed(std::span<const std::int32_t> tokens) const;
  /// prefill() and prefill_hidden(): `row(cur, r, i)` takes row r of hidden buffer `cur`, the
  /// hidden state of prompt token i, for every token when `all_rows`, else the last one.
  void feed(std::span<const std::int32_t> tokens, bool all_rows,
            const std::function<void(std::int64_t, std::int64_t)>& progress,
            const std::function<void(int, std::int64_t, std::int64_t)>& row);
  /// Feeds one token at position length() through the decode stage; returns the hidden buffer
  /// holding its last hidden state (row 0).
  int decode_hidden(std::int32_t token);

  /// Runs lm_head on one hidden row [hidden] and appends the logits.
  void append_logits(std::vector<float>& logits, const float* row);
  /// The handle of lm_head_bB for verify()'s `n` rows: the smallest compiled batch B >= n; id
  /// -1 when the bundle has none (the rows then go through lm_head one by one).
  std::pair<std::int64_t, StageHandle> batched_head(std::int64_t n);

  Stages& stages_;
  RemoteLayers* remote_ = nullptr;
  std::int32_t remote_slot_ = 0; ///< the other ranks' KV slot of this conversation
  /// A segment begun and not finished (rows 0: none): its tokens, padded rows and position.
  struct Segment {
    std::int64_t rows = 0, P = 0, pos0 = 0;
  } segment_;
  SessionDims dims_;
  frontend::StageParams params_;
  std::vector<float> hidden_[2], rows_; // rows_: verify()'s hidden rows [B, hidden]
  std::vector<std::int32_t> ids_, pos_;
  std::vector<std::vector<float>> k_cache_, v_cache_;
  std::int64_t length_ = 0;
  /// One past the highest position written into the caches since reset() (padded rows
  /// included): how far a ring may have overwritten (kv_keeps).
  std::int64_t written_ = 0;
  Handles decode_fns_, prefill_fns_, prefill_kv_fns_;
  StageHandle embedding_fn_, embedding_cache_fn_, lm_head_fn_;
  /// lm_head_bB for every B in [2, StageParams::kMaxDecodeBatch] the stages have (ascending),
  /// found by name at construction and resolved on first use (id -1 until then).
  std::vector<std::pair<std::int64_t, StageHandle>> head_fns_;
};

} // namespace tpullm::runtime
