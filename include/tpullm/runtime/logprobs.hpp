#pragma once
/// Log probabilities of a chosen token and of the most likely ones, from one logits row: what
/// `logprobs` / `top_logprobs` report in `tpullm serve` and what GenerationStep::logprobs holds.
///
/// The values are the log-softmax, computed in float64, of the raw logits row the model produced
/// (before the repetition penalty, temperature, top-k / top-p and any grammar mask): the model's
/// own distribution, the same whatever the sampling options (vLLM's default "raw logprobs"; OpenAI
/// does not say). A token whose logit is -inf has logprob -inf.

#include <cstdint>
#include <span>
#include <vector>

namespace tpullm::runtime {

/// Most alternatives a TokenLogprobs carries (OpenAI's limit of top_logprobs).
inline constexpr int kMaxTopLogprobs = 20;

/// One token and its log probability.
struct TokenLogprob {
  std::int32_t token = 0; ///< the token id
  double logprob = 0;     ///< log p(token) (<= 0; -inf for a -inf logit)
};

/// The chosen token's log probability and the `top` most likely tokens of the same row.
struct TokenLogprobs {
  TokenLogprob chosen;           ///< the token that was generated
  std::vector<TokenLogprob> top; ///< most likely first (ties: lower id first); size = top_n
};

/// Log-softmax of `logits` ([vocab] f32, every value finite or -inf, at least one finite) at
/// `token`, and the `top_n` (0..kMaxTopLogprobs, at most vocab) most likely tokens. Float64
/// throughout; O(vocab) with no sort of the row. Throws Error(invalid_input) for an empty row, a
/// NaN or +inf logit, a row of only -inf, a token outside [0, vocab) or top_n outside its range.
TokenLogprobs token_logprobs(std::span<const float> logits, std::int32_t token, int top_n);

} // namespace tpullm::runtime
