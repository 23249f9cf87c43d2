#pragma once
/// The three-stage generation loop of the paper (section 4.5) over any StageExecutor:
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
#include <string>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/runtime/sampler.hpp"
#include "tpullm/runtime/stage_executor.hpp"
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

/// How Session::generate picks tokens and when it stops.
struct GenerateOptions {
  SamplingOptions sampling; ///< greedy by default
  StopCriteria stop;        ///< eos ids and a token budget (the sequence end always stops)
};

/// What Session::generate produced.
struct GenerateResult {
  std::vector<std::int32_t> tokens;    ///< generated ids; the last one is not in the KV cache
  StopReason reason = StopReason::eos; ///< why it stopped
  std::int64_t prompt_tokens = 0;      ///< tokens prefilled
  double prefill_seconds = 0;          ///< prompt through the stages + first token (= TTFT)
  double decode_seconds = 0;           ///< every later token
};

/// One conversation's state: KV cache length (and the cache itself when the executor does not
/// own it), over an executor.
class Session {
public:
  Session(StageExecutor& exec, SessionDims dims, frontend::StageParams params)
      : exec_(exec), dims_(dims), params_(std::move(params)) {
    const std::size_t L = static_cast<std::size_t>(params_.max_input_length);
    hidden_[0].resize(L * static_cast<std::size_t>(dims_.hidden));
    hidden_[1].resize(hidden_[0].size());
    ids_.resize(L);
    pos_.resize(L);
    if (!exec_.owns_kv_cache()) {
      const auto n = static_cast<std::size_t>(params_.seq_length * row());
      k_cache_.assign(static_cast<std::size_t>(dims_.layers), std::vector<float>(n, 0.0f));
      v_cache_ = k_cache_;
    }
    auto table = [&](std::vector<std::int64_t> lengths) {
      Handles h;
      h.lengths = std::move(lengths);
      h.fn.assign(h.lengths.size(),
                  std::vector<StageHandle>(static_cast<std::size_t>(dims_.layers)));
      return h;
    };
    decode_fns_ = table(params_.decode_lengths());
    prefill_fns_ = table(params_.prefill_lengths());
    prefill_kv_fns_ = table(params_.prefill_lengths());
  }

  /// Tokens held in the KV cache (= position of the next token).
  std::int64_t length() const { return length_; }
  const frontend::StageParams& params() const { return params_; }
  const SessionDims& dims() const { return dims_; }
  /// Forgets the conversation (the cache contents become don't-care).
  void reset() { length_ = 0; }
  /// Keeps the first `n` cached tokens and forgets the rest (their slots are overwritten by
  /// the next tokens fed). Throws Error(invalid_input) unless 0 <= n <= length().
  void truncate(std::int64_t n) {
    check(n >= 0 && n <= length_, ErrorKind::invalid_input, "session", "cannot keep ", n, " of ",
          length_, " cached tokens");
    length_ = n;
  }

  /// Records that a batched decode step (runtime/batched_decode.hpp) wrote one more token into
  /// this conversation's caches at position length(). Throws Error(invalid_input) when the
  /// cache is full.
  void extend_one() {
    check(length_ < params_.seq_length, ErrorKind::invalid_input, "decode",
          "the KV cache is full (", params_.seq_length, " tokens = the compiled sequence length)");
    length_ += 1;
  }

  /// Feeds `tokens` at positions length().. in segments of max_input_length (1 prefill or
  /// prefill_kv per segment) and returns the logits [rows, vocab] of every prompt position
  /// when `all_rows`, else of the last one only. A tail too close to the end of the cache for a
  /// padded segment goes through the decode stage token by token. Throws Error(invalid_input)
  /// when the prompt does not fit the compiled sequence length or names an id outside the
  /// vocabulary.
  std::vector<float> prefill(const std::vector<std::int32_t>& tokens, bool all_rows,
                             const std::function<void(std::int64_t, std::int64_t)>& progress = {}) {
    const std::int64_t n = static_cast<std::int64_t>(tokens.size());
    check(n > 0, ErrorKind::invalid_input, "prompt", "is empty");
    const std::int64_t L = params_.max_input_length;
    check(length_ + n <= params_.seq_length, ErrorKind::invalid_input, "prompt", "prompt of ", n,
          " tokens after ", length_, " cached tokens exceeds the compiled sequence length ",
          params_.seq_length);
    check_ids(tokens);
    std::vector<float> logits;
    for (std::int64_t start = 0; start < n; start += L) {
      const std::int64_t valid = std::min(L, n - start);
      const std::int64_t pos0 = length_;
      check(pos0 == 0 || params_.with_history, ErrorKind::unsupported, "prompt",
            "continuing a conversation needs prefill_kv modules (compiled without history)");
      // The smallest compiled prefill variant that holds the segment: its first P rows of the
      // embedded buffer are the block's input.
      const std::int64_t P = params_.prefill_length_for(valid);
      if (pos0 + P > params_.seq_length) {
        // A padded segment would run past the cache: feed the tail token by token through the
        // decode stage instead (same results, no padding).
        for (std::int64_t r = start; r < n; ++r) {
          auto row = decode(tokens[static_cast<std::size_t>(r)]);
          if (all_rows || r == n - 1)
            logits.insert(logits.end(), row.begin(), row.end());
        }
        if (progress)
          progress(n, n);
        break;
      }
      for (std::int64_t r = 0; r < L; ++r) {
        ids_[r] = r < valid ? tokens[static_cast<std::size_t>(start + r)] : 0;
        pos_[r] = static_cast<std::int32_t>(pos0 + r); // padded rows keep later positions
      }
      int cur = embed(embedding_fn_, "embedding", L);
      const bool hist = pos0 > 0;
      for (std::int64_t layer = 0; layer < dims_.layers; ++layer) {
        const StageHandle fn =
            hist ? handle(prefill_kv_fns_, P, layer,
                          [&] { return frontend::StageNames::block_kv(layer, P, params_); })
                 : handle(prefill_fns_, P, layer,
                          [&] { return frontend::StageNames::block(layer, P, params_); });
        block(fn, layer, P, pos0, hist ? params_.prefill_kv_history(P) : 0, cur);
        cur ^= 1;
      }
      length_ += valid;
      for (std::int64_t r = 0; r < valid; ++r)
        if (all_rows || start + r == n - 1)
          append_logits(logits, cur, r);
      if (progress)
        progress(start + valid, n);
    }
    return logits;
  }

  /// Feeds one token at position length() and returns its logits [vocab].
  std::vector<float> decode(std::int32_t token) {
    const std::int64_t p = length_;
    check(p < params_.seq_length, ErrorKind::invalid_input, "decode", "the KV cache is full (",
          params_.seq_length, " tokens = the compiled sequence length)");
    check_ids({token});
    const std::int64_t S = decode_length_for(p);
    ids_[0] = token;
    pos_[0] = static_cast<std::int32_t>(p);
    int cur = embed(embedding_cache_fn_, "embedding_cache", 1);
    for (std::int64_t layer = 0; layer < dims_.layers; ++layer) {
      block(handle(decode_fns_, S, layer,
                   [&] { return frontend::StageNames::block_cache(layer, S); }),
            layer, 1, p, S, cur);
      cur ^= 1;
    }
    length_ += 1;
    std::vector<float> logits;
    append_logits(logits, cur, 0);
    return logits;
  }

  /// Generates an answer to `prompt` (fed after what the cache already holds: a second turn
  /// goes through prefill_kv with the kept cache): prefill, then sample / decode until an eos
  /// id, the token budget or the end of the compiled sequence. `on_token` sees each token as it
  /// is chosen. The last generated token is not fed (no wasted decode step); a next turn that
  /// wants it in the history puts it first in its prompt. Throws Error(invalid_input) for bad
  /// options, a prompt that does not fit, or ids outside the vocabulary.
  GenerateResult generate(const std::vector<std::int32_t>& prompt, const GenerateOptions& options,
                          const std::function<void(std::int32_t)>& on_token = {}) {
    options.stop.validate();
    Sampler sampler(options.sampling);
    using clock = std::chrono::steady_clock;
    GenerateResult res;
    res.prompt_tokens = static_cast<std::int64_t>(prompt.size());
    std::vector<std::int32_t> context = prompt;
    const auto t0 = clock::now();
    std::vector<float> logits = prefill(prompt, false);
    for (int generated = 1;; ++generated) {
      const std::int32_t tok = sampler.sample(logits, context);
      if (generated == 1)
        res.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
      res.tokens.push_back(tok);
      context.push_back(tok);
      if (on_token)
        on_token(tok);
      if (auto why = options.stop.check(tok, generated, length_, params_.seq_length)) {
        res.reason = *why;
        break;
      }
      logits = decode(tok);
    }
    res.decode_seconds =
        std::chrono::duration<double>(clock::now() - t0).count() - res.prefill_seconds;
    return res;
  }

  /// The decode variant used at position p: the smallest compiled S >= p.
  std::int64_t decode_length_for(std::int64_t p) const {
    return decode_length_for(decode_fns_.lengths, p);
  }
  /// The smallest of `lengths` >= p; throws Error(invalid_input) when none holds p.
  static std::int64_t decode_length_for(const std::vector<std::int64_t>& lengths, std::int64_t p) {
    std::int64_t best = -1;
    for (auto s : lengths)
      if (s >= p && (best < 0 || s < best))
        best = s;
    check(best >= 0, ErrorKind::invalid_input, "decode", "no decode variant holds ", p,
          " history tokens");
    return best;
  }

private:
  std::int64_t row() const { return dims_.kv_heads * dims_.head_dim; }

  void check_ids(const std::vector<std::int32_t>& ids) const {
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
          x = exec_.resolve(name());
        return x;
      }
    throw Error(ErrorKind::internal, "session", str_cat("no compiled variant of length ", n));
  }
  StageHandle once(StageHandle& h, const char* name) {
    if (h.id < 0)
      h = exec_.resolve(name);
    return h;
  }

  /// ids_[0, L) -> hidden buffer 0; returns the buffer index.
  int embed(StageHandle& fn, const char* name, std::int64_t L) {
    const ConstBytes in[] = {cbytes(ids_.data(), L)};
    const MutBytes out[] = {mbytes(hidden_[0].data(), L * dims_.hidden)};
    exec_.run(once(fn, name), in, out);
    return 0;
  }

  /// One block function: hidden buffer `cur` -> the other one, history of `S` slots (0: none),
  /// new keys / values at slots [pos0, pos0 + L).
  void block(StageHandle fn, std::int64_t layer, std::int64_t L, std::int64_t pos0, std::int64_t S,
             int cur) {
    const std::int64_t H = dims_.hidden;
    ConstBytes in[4] = {cbytes(hidden_[cur].data(), L * H), cbytes(pos_.data(), L), {}, {}};
    MutBytes out[3] = {mbytes(hidden_[cur ^ 1].data(), L * H), {}, {}};
    if (!exec_.owns_kv_cache()) {
      check(pos0 + L <= params_.seq_length, ErrorKind::internal, "session",
            "slots beyond the cache");
      auto& kc = k_cache_[static_cast<std::size_t>(layer)];
      auto& vc = v_cache_[static_cast<std::size_t>(layer)];
      if (S > 0) {
        in[2] = cbytes(kc.data(), S * row());
        in[3] = cbytes(vc.data(), S * row());
      }
      out[1] = mbytes(kc.data() + pos0 * row(), L * row());
      out[2] = mbytes(vc.data() + pos0 * row(), L * row());
    }
    // history arguments (empty when the executor owns the cache) only when the function has them
    exec_.run(fn, std::span<const ConstBytes>(in, S > 0 ? 4 : 2), out);
  }

  /// Runs lm_head on row r of hidden buffer `cur` and appends the logits.
  void append_logits(std::vector<float>& logits, int cur, std::int64_t r) {
    const std::size_t at = logits.size();
    logits.resize(at + static_cast<std::size_t>(dims_.vocab));
    const ConstBytes in[] = {cbytes(hidden_[cur].data() + r * dims_.hidden, dims_.hidden)};
    const MutBytes out[] = {mbytes(logits.data() + at, dims_.vocab)};
    exec_.run(once(lm_head_fn_, "lm_head"), in, out);
  }

  StageExecutor& exec_;
  SessionDims dims_;
  frontend::StageParams params_;
  std::vector<float> hidden_[2];
  std::vector<std::int32_t> ids_, pos_;
  std::vector<std::vector<float>> k_cache_, v_cache_;
  std::int64_t length_ = 0;
  Handles decode_fns_, prefill_fns_, prefill_kv_fns_;
  StageHandle embedding_fn_, embedding_cache_fn_, lm_head_fn_;
};

} // namespace tpullm::runtime
