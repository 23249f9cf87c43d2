// Prompt-lookup drafts and the adaptive draft length (speculation.hpp).
#include "tpullm/runtime/speculation.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <cmath>

#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

static_assert(frontend::StageParams::kMaxVerifyLength == kernels::kDecodeArithmeticRows,
              "a verify segment compiled by --verify-lengths must compute as decode steps");

void SpeculationOptions::validate() const {
  check(draft_max >= 0 && draft_max <= kMaxDraft, ErrorKind::invalid_input, "speculation",
        "draft length must be in [0, ", kMaxDraft, "], got ", draft_max);
  check(ngram_min >= 1 && ngram_min <= ngram_max && ngram_max <= kMaxNgram,
        ErrorKind::invalid_input, "speculation", "n-gram lengths must satisfy 1 <= min (",
        ngram_min, ") <= max (", ngram_max, ") <= ", kMaxNgram);
  check(draft_cost >= 0 && draft_cost <= 100, ErrorKind::invalid_input, "speculation",
        "draft cost must be in [0, 100] decode steps, got ", draft_cost);
}

int verify_draft_max(const frontend::StageParams& p, int draft_max, const char* where) {
  if (draft_max <= 0)
    return 0;
  check(p.with_history, ErrorKind::unsupported, where,
        "the verify call needs the prefill_kv stage, and this bundle was compiled with "
        "--no-history; recompile without --no-history");
  const auto lengths = p.prefill_lengths(); // largest first
  std::int64_t rows = 0; // the longest prefill length whose rows compute as decode steps
  for (std::int64_t len : lengths)
    if (len <= kernels::kDecodeArithmeticRows)
      rows = std::max(rows, len);
  check(rows >= 2, ErrorKind::unsupported, where,
        "a verify call runs through a prefill length of 2 to ", kernels::kDecodeArithmeticRows,
        " tokens, and this bundle has none (its shortest is ", lengths.back(),
        "); recompile with --verify-lengths 4,8 (or --prefill-lengths auto)");
  return static_cast<int>(std::min<std::int64_t>(draft_max, rows - 1));
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

DraftLength::DraftLength(int draft_max, double draft_cost, double row_cost)
    : max_(draft_max), draft_cost_(draft_cost), row_cost_(row_cost), timed_(draft_cost > 0),
      first_pause_(std::max(4, static_cast<int>(std::ceil(row_cost / 0.02)))),
      next_pause_(first_pause_) {}

std::pair<int, double> DraftLength::best() const {
  const double p = acceptance();
  int k_best = 1;
  double r_best = -1, tokens = 1, pk = 1;
  for (int k = 1; k <= max_; ++k) {
    pk *= p;
    tokens += pk; // 1 + p + ... + p^k
    const double r = tokens / (1 + k * (row_cost_ + draft_cost_));
    if (r > r_best) {
      r_best = r;
      k_best = k;
    }
  }
  return {k_best, r_best};
}

int DraftLength::next() {
  if (max_ <= 0 || off_)
    return 0;
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  if (timed_ && step_seconds_ <= 0 && steps_asked_ < 2) {
    ++steps_asked_; // two plain steps before the first draft: the second one is timed
    return 0;
  }
  if (probe_)
    return 1;
  const auto [k, r] = best();
  if (r >= 1)
    return k;
  if (timed_) { // a draft model stays off (see the class comment)
    off_ = true;
    return 0;
  }
  // Not worth drafting: this step and the next ones decode plainly, then a probe.
  pause_ = next_pause_ - 1;
  next_pause_ = std::min(kMaxPause, 2 * next_pause_);
  probe_ = true;
  return 0;
}

void DraftLength::observe(double draft_seconds, double verify_seconds, int drafted) {
  if (!timed_ || drafted <= 0 || !(verify_seconds > 0) || !(draft_seconds >= 0))
    return;
  double step = verify_seconds / (1 + drafted * row_cost_);
  if (step_seconds_ > 0) { // priced against a timed plain step: the verify call's rows too
    step = step_seconds_;
    const double rows = std::clamp((verify_seconds / step - 1) / drafted, 0.0, 10.0);
    row_cost_ = 0.7 * row_cost_ + 0.3 * rows;
  }
  const double measured = std::min(100.0, draft_seconds / (drafted * step));
  draft_cost_ = 0.7 * draft_cost_ + 0.3 * measured;
}

void DraftLength::observe_step(double seconds) {
  if (!timed_ || !(seconds > 0) || ++steps_seen_ == 1) // the first step after a prefill is cold
    return;
  step_seconds_ = step_seconds_ > 0 ? 0.7 * step_seconds_ + 0.3 * seconds : seconds;
}

void DraftLength::record(int drafted, int accepted) {
  if (drafted <= 0)
    return;
  kept_ = kDecay * kept_ + accepted;
  missed_ = kDecay * missed_ + (accepted < drafted ? 1 : 0);
  probe_ = false;
  if (accepted > 0 && best().second >= 1)
    next_pause_ = first_pause_; // drafting pays again: the next backing off starts short
}

double prepare_draft(const SpeculationOptions& spec, std::span<const std::int32_t> context) {
  if (spec.draft_max == 0 || !spec.prepare)
    return 0;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    spec.prepare(context);
  } catch (const std::exception&) {
    // a draft decides the speed, never the answer: its first call catches up instead
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::int32_t> next_draft(const SpeculationOptions& spec, DraftLength& length,
                                     std::span<const std::int32_t> context, std::int64_t room,
                                     std::int64_t budget, double& seconds) {
  seconds = 0;
  const std::int64_t k =
      std::max<std::int64_t>(0, std::min<std::int64_t>({length.next(), room - 1, budget - 1}));
  if (k <= 0)
    return {};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::int32_t> draft;
  try {
    draft = spec.draft ? spec.draft(context, static_cast<int>(k))
                       : prompt_lookup_draft(context, spec, static_cast<int>(k));
  } catch (const std::exception&) {
    draft.clear();
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (static_cast<std::int64_t>(draft.size()) > k)
    draft.resize(static_cast<std::size_t>(k));
  return draft;
}

} // namespace tpullm::runtime
