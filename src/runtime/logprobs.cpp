// Log-softmax of one logits row at a token and its top alternatives (logprobs.hpp).
#include "tpullm/runtime/logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

TokenLogprobs token_logprobs(std::span<const float> logits, std::int32_t token, int top_n) {
  const auto vocab = static_cast<std::int64_t>(logits.size());
  check(vocab > 0, ErrorKind::invalid_input, "logprobs", "the logits row is empty");
  check(token >= 0 && token < vocab, ErrorKind::invalid_input, "logprobs", "token ", token,
        " is outside the vocabulary [0, ", vocab, ")");
  check(top_n >= 0 && top_n <= kMaxTopLogprobs, ErrorKind::invalid_input, "logprobs",
        "top_logprobs ", top_n, " is outside [0, ", kMaxTopLogprobs, "]");
  const double ninf = -std::numeric_limits<double>::infinity();
  double mx = ninf;
  for (float x : logits) {
    check(!std::isnan(x) && x != std::numeric_limits<float>::infinity(), ErrorKind::invalid_input,
          "logprobs", "the logits row holds a NaN or +inf");
    mx = std::max(mx, static_cast<double>(x));
  }
  check(mx > ninf, ErrorKind::invalid_input, "logprobs", "every logit of the row is -inf");
  double sum = 0;
  for (float x : logits)
    sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  const auto lp = [&](std::int64_t i) { return static_cast<double>(logits[i]) - lse; };

  TokenLogprobs out;
  out.chosen = {token, lp(token)};
  const auto n = static_cast<std::size_t>(std::min<std::int64_t>(top_n, vocab));
  if (n == 0)
    return out;
  // A sorted list of the n best so far (larger logit first, lower id on ties): O(vocab * n) at
  // worst, n <= 20, and a logit below the n-th is rejected in one comparison.
  const auto better = [&](std::int32_t a, std::int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<std::int32_t> best;
  best.reserve(n + 1);
  for (std::int32_t i = 0; i < vocab; ++i) {
    if (best.size() == n && !better(i, best.back()))
      continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
    if (best.size() > n)
      best.pop_back();
  }
  out.top.reserve(n);
  for (std::int32_t i : best)
    out.top.push_back({i, lp(i)});
  return out;
}

} // namespace tpullm::runtime
