// Drafts from a second model kept in step through its own prompt cache (draft_model.hpp).
#include "tpullm/runtime/draft_model.hpp"

#include <algorithm>

namespace tpullm::runtime {

std::vector<std::int32_t> DraftModel::draft(std::span<const std::int32_t> context, int k) {
  Session& s = cache_.session();
  const auto n = static_cast<std::int64_t>(context.size());
  // The context fed, then k - 1 tokens decoded: n + k - 1 positions of the draft's cache.
  if (k <= 0 || n == 0 || n + k - 1 > s.params().seq_length)
    return {};
  const std::vector<std::int32_t> ctx(context.begin(), context.end());
  const auto kept = cache_.keep_prefix(ctx); // a rejected draft is rolled back here
  const std::vector<std::int32_t> rest(ctx.begin() + kept, ctx.end());
  std::vector<float> logits;
  if (rest.size() <= 2 || !s.params().with_history) { // a token or two: the decode stage
    for (auto t : rest)
      logits = s.decode(t);
  } else {
    logits = s.prefill(rest, false);
  }
  cache_.record(rest);
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
