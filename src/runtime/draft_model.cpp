// Drafts from a second model kept in step through its own prompt cache (draft_model.hpp).
#include "tpullm/runtime/draft_model.hpp"

#include <algorithm>

namespace tpullm::runtime {

namespace {

/// Feeds the part of `context` that `cache` does not hold (a rejected draft is rolled back
/// first) and returns the logits after its last token; `context` is not empty and fits.
std::vector<float> catch_up(PromptCache& cache, std::span<const std::int32_t> context) {
  Session& s = cache.session();
  const std::vector<std::int32_t> ctx(context.begin(), context.end());
  const auto kept = cache.keep_prefix(ctx); // never the whole context: its last token is fed
  const std::vector<std::int32_t> rest(ctx.begin() + kept, ctx.end());
  std::vector<float> logits;
  // One segment reads the weights once for all its rows: worth it over a decode per token when
  // its padded rows cost less than the decodes it replaces (after a fully kept draft the rest
  // is two tokens: the last draft token and the one sampled after it).
  const auto n = static_cast<std::int64_t>(rest.size());
  const bool segment =
      s.params().with_history && n >= 2 &&
      1 + DraftLength::kRowCost * static_cast<double>(s.params().prefill_length_for(
                                      std::min(n, s.params().max_input_length))) <
          static_cast<double>(n);
  if (segment) {
    logits = s.prefill(rest, false);
  } else {
    for (auto t : rest)
      logits = s.decode(t);
  }
  cache.record(rest);
  return logits;
}

} // namespace

void DraftModel::prepare(std::span<const std::int32_t> context) {
  if (!context.empty() &&
      static_cast<std::int64_t>(context.size()) <= cache_.session().params().seq_length)
    catch_up(cache_, context);
}

std::vector<std::int32_t> DraftModel::draft(std::span<const std::int32_t> context, int k) {
  Session& s = cache_.session();
  const auto n = static_cast<std::int64_t>(context.size());
  // The context fed, then k - 1 tokens decoded: n + k - 1 positions of the draft's cache.
  if (k <= 0 || n == 0 || n + k - 1 > s.params().seq_length)
    return {};
  std::vector<float> logits = catch_up(cache_, context);
  std::vector<std::int32_t> out;
  for (;;) {
    const auto t =
        static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    if (static_cast<int>(out.size()) == k)
      return out;
    logits = s.decode(t);
    cache_.record(std::span<const std::int32_t>(&out.back(), 1));
  }
}

} // namespace tpullm::runtime
