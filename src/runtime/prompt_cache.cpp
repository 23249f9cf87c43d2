// PromptCache: the longest cached prefix is kept, the rest of a prompt fed (prompt_cache.hpp).
#include "tpullm/runtime/prompt_cache.hpp"

#include <algorithm>

namespace tpullm::runtime {

std::int64_t PromptCache::reusable(const std::vector<std::int32_t>& prompt) const {
  if (!session_.params().with_history)
    return 0; // without prefill_kv modules every prompt is prefilled from position 0
  const auto [mis, unused] =
      std::mismatch(held_.begin(), held_.end(), prompt.begin(), prompt.end());
  (void)unused;
  auto n = static_cast<std::int64_t>(mis - held_.begin());
  if (n == static_cast<std::int64_t>(prompt.size()))
    n -= 1; // the last prompt token is fed again: its logits choose the first answer token
  // A sliding-window layer's ring may no longer hold what the next token sees: then nothing.
  return session_.keepable(std::max<std::int64_t>(n, 0));
}

std::int64_t PromptCache::keep_prefix(const std::vector<std::int32_t>& prompt) {
  const std::int64_t n = reusable(prompt);
  // Roll the cache back to the kept prefix: the slots after it are overwritten by the new tokens.
  session_.truncate(n);
  held_.resize(static_cast<std::size_t>(n));
  return n;
}

void PromptCache::record(std::span<const std::int32_t> ids) {
  const std::size_t n = held_.size() + ids.size();
  check(static_cast<std::int64_t>(n) == session_.length(), ErrorKind::internal, "prompt cache",
        "would hold ", n, " ids for ", session_.length(), " cached tokens");
  held_.insert(held_.end(), ids.begin(), ids.end());
}

CachedGenerateResult PromptCache::generate(const std::vector<std::int32_t>& prompt,
                                           const GenerateOptions& options,
                                           const std::function<void(std::int32_t)>& on_token) {
  Generation gen(options, nullptr, prompt);
  if (!on_token)
    return generate(prompt, gen);
  return generate(prompt, gen, [&](const GenerationStep& s) { on_token(s.token); });
}

CachedGenerateResult
PromptCache::generate(const std::vector<std::int32_t>& prompt, Generation& gen,
                      const std::function<void(const GenerationStep&)>& on_step) {
  check(!prompt.empty(), ErrorKind::invalid_input, "prompt", "is empty");
  check(fits(prompt), ErrorKind::invalid_input, "prompt", "the conversation (", prompt.size(),
        " tokens) leaves no room for an answer in the compiled sequence length ",
        session_.params().seq_length);
  CachedGenerateResult out;
  out.prompt_size = static_cast<std::int64_t>(prompt.size());
  out.reused = keep_prefix(prompt);
  const std::vector<std::int32_t> rest(prompt.begin() + out.reused, prompt.end());
  try {
    out.result = session_.generate(rest, gen, on_step);
  } catch (...) {
    // What the cache holds after a failed step is not known: forget it (the next prompt is fed
    // whole) rather than reuse a half-written history.
    reset();
    throw;
  }
  held_.insert(held_.end(), rest.begin(), rest.end());
  const auto& t = out.result.tokens;
  // The last answer token is not fed.
  record(std::span<const std::int32_t>(t).first(t.empty() ? 0 : t.size() - 1));
  return out;
}

} // namespace tpullm::runtime
