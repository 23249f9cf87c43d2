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
  return std::max<std::int64_t>(n, 0);
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
  out.reused = reusable(prompt);
  // Roll the cache back to the kept prefix: the slots after it are overwritten by the new tokens.
  session_.truncate(out.reused);
  held_.resize(static_cast<std::size_t>(out.reused));
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
  if (!t.empty())
    held_.insert(held_.end(), t.begin(), t.end() - 1); // the last answer token is not fed
  check(static_cast<std::int64_t>(held_.size()) == session_.length(), ErrorKind::internal,
        "prompt cache", "holds ", held_.size(), " ids for ", session_.length(), " cached tokens");
  return out;
}

} // namespace tpullm::runtime
