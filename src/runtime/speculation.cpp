// Prompt-lookup drafts and the adaptive draft length (speculation.hpp).
#include "tpullm/runtime/speculation.hpp"

#include <algorithm>

#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

void SpeculationOptions::validate() const {
  check(draft_max >= 0 && draft_max <= kMaxDraft, ErrorKind::invalid_input, "speculation",
        "draft length must be in [0, ", kMaxDraft, "], got ", draft_max);
  check(ngram_min >= 1 && ngram_min <= ngram_max && ngram_max <= kMaxNgram,
        ErrorKind::invalid_input, "speculation", "n-gram lengths must satisfy 1 <= min (",
        ngram_min, ") <= max (", ngram_max, ") <= ", kMaxNgram);
}

std::vector<std::int32_t> prompt_lookup_draft(std::span<const std::int32_t> context,
                                              const SpeculationOptions& o, int k) {
  const auto n_ctx = static_cast<std::int64_t>(context.size());
  if (k <= 0)
    return {};
  for (std::int64_t n = std::min<std::int64_t>(o.ngram_max, n_ctx - 1); n >= o.ngram_min; --n) {
    const auto suffix = context.subspan(static_cast<std::size_t>(n_ctx - n));
    // The latest earlier occurrence followed by k tokens (in a loop the latest one is right
    // behind the suffix and has only a token or two after it), else the latest one.
    std::int64_t latest = -1;
    for (std::int64_t s = n_ctx - n - 1; s >= 0; --s) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + s))
        continue;
      if (latest < 0)
        latest = s;
      if (s + n + k <= n_ctx) {
        latest = s;
        break;
      }
    }
    if (latest >= 0) {
      const std::int64_t from = latest + n;
      const std::int64_t take = std::min<std::int64_t>(k, n_ctx - from);
      return {context.begin() + from, context.begin() + from + take};
    }
  }
  return {};
}

int DraftLength::next() {
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  return k_;
}

void DraftLength::record(int drafted, int accepted) {
  if (drafted <= 0)
    return;
  if (accepted >= drafted) {
    k_ = std::min(max_, k_ + 1);
    misses_ = 0;
    next_pause_ = 4;
    return;
  }
  k_ = std::max(1, std::min(max_, accepted + 1));
  if (accepted > 0) {
    misses_ = 0;
    next_pause_ = 4;
    return;
  }
  if (++misses_ >= kPatience) {
    pause_ = next_pause_;
    next_pause_ = std::min(kMaxPause, next_pause_ * 2);
    misses_ = 0;
  }
}

} // namespace tpullm::runtime
