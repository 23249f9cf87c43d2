#pragma once
/// Prompt reuse over one Session: the token ids its KV cache holds are remembered, so a new
/// prompt that repeats them (a chat client resending the whole conversation, the next turn of
/// `tpullm chat`) feeds only what follows the longest common prefix, through prefill_kv. What
/// `tpullm chat` and a serving slot hold.

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "tpullm/runtime/session.hpp"

namespace tpullm::runtime {

/// What PromptCache::generate did besides generating.
struct CachedGenerateResult {
  GenerateResult result;        ///< tokens, stop reason, timings (prompt_tokens = tokens fed)
  std::int64_t reused = 0;      ///< prompt tokens found in the KV cache (not fed again)
  std::int64_t prompt_size = 0; ///< the whole prompt
};

/// See the file comment. Holds a Session by reference; one generation at a time.
class PromptCache {
public:
  explicit PromptCache(Session& session) : session_(session) {}

  /// Token ids the KV cache holds, in position order (size = session length).
  const std::vector<std::int32_t>& held() const { return held_; }
  /// Forgets everything (the next prompt is fed whole).
  void reset() {
    held_.clear();
    session_.reset();
  }
  /// Number of leading ids of `prompt` already in the cache that generate() would keep: the
  /// common prefix, less one when it is the whole prompt (the last prompt token is always fed,
  /// to get the logits of the first answer token); 0 on a bundle without prefill_kv modules
  /// (compiled with --no-history), which prefills every prompt from position 0.
  std::int64_t reusable(const std::vector<std::int32_t>& prompt) const;
  /// Rolls the cache back to the ids reusable(`prompt`) keeps and returns their number: the
  /// first step of a generation fed from outside (a serving slot feeds the rest segment by
  /// segment and record()s what it fed); generate() does it itself.
  std::int64_t keep_prefix(const std::vector<std::int32_t>& prompt);
  /// Records that `ids` were fed to the session after what held() holds (prefill, decode or a
  /// batched decode step). Throws Error(internal), recording nothing, when the session's length
  /// would then differ from held().size() (the cache was fed behind the PromptCache's back).
  void record(std::span<const std::int32_t> ids);
  /// The session the cache is of.
  Session& session() { return session_; }
  /// True when `prompt` (with what reusable() keeps) leaves room for at least one answer token
  /// in the compiled sequence length.
  bool fits(const std::vector<std::int32_t>& prompt) const {
    return static_cast<std::int64_t>(prompt.size()) < session_.params().seq_length;
  }

  /// Generates an answer to the whole `prompt` (every token of the conversation so far): keeps
  /// the cached common prefix, rolls the cache back to it, feeds the rest (prefill_kv when
  /// something is kept), then samples like Session::generate. Afterwards the cache holds the
  /// prompt and every answer token but the last. Throws Error(invalid_input) when the prompt
  /// does not fit the compiled sequence length (nothing is changed then).
  /// The repetition penalty sees the whole prompt (as a Generation over it).
  CachedGenerateResult generate(const std::vector<std::int32_t>& prompt,
                                const GenerateOptions& options,
                                const std::function<void(std::int32_t)>& on_token = {});
  /// As above with the answer's rules and text in `gen` (built over the whole `prompt`);
  /// `on_step` sees each step as Session::generate's does.
  CachedGenerateResult generate(const std::vector<std::int32_t>& prompt, Generation& gen,
                                const std::function<void(const GenerationStep&)>& on_step = {});

private:
  Session& session_;
  std::vector<std::int32_t> held_;
};

} // namespace tpullm::runtime
