#pragma once
/// Choosing the next token from one logits row [vocab] (when an answer ends: generation.hpp).
///
/// Sampler::sample applies HF transformers' processors in HF's order:
///   repetition penalty -> temperature -> top-k -> top-p -> draw
/// (temperature 0 is greedy: the first index of the largest penalized logit). Top-k keeps
/// exactly k tokens (ties at the k-th logit go to lower ids; HF would keep every tie), so
/// top_k = 1 is greedy. The draw uses the raw 64-bit output of a std::mt19937_64 seeded with
/// SamplingOptions::seed, a branch-free exp (no libm) and candidate orders that are total
/// (logit descending, id ascending) or id order, so a seed gives the same tokens with every
/// standard library. Cost per call at vocab V: a check pass, (with a penalty) a copy, one exp
/// pass (over the k survivors with top-k), a bounded heap for top-k (O(V) for small k) and a
/// mass bisection for top-p (O(V), sorting only stretches of 64); no allocation once the
/// scratch has grown to V.

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace tpullm::runtime {

/// How a token is chosen (HF generation_config names and semantics).
struct SamplingOptions {
  float temperature = 0.0f; ///< 0 = greedy; > 0 divides the logits (softmax(logits / T))
  int top_k = 0;            ///< 0 = off; else keep the k largest logits (ties: lower ids first)
  float top_p = 1.0f;       ///< in (0, 1]; keep the smallest most-likely set with mass >= top_p
  /// HF / CTRL repetition penalty over the distinct tokens of the context: a logit > 0 is
  /// divided by it, any other multiplied; 1 = off.
  float repetition_penalty = 1.0f;
  std::uint64_t seed = 0; ///< seed of the std::mt19937_64 behind the draws

  /// Throws Error(invalid_input, "sampling options") for a temperature < 0 or not finite,
  /// top_k < 0, top_p outside (0, 1], or a repetition penalty <= 0 or not finite.
  void validate() const;
  /// True when sample() is an argmax (temperature 0): the seed is then irrelevant.
  bool greedy() const { return temperature == 0.0f; }
};

/// Draws tokens with fixed options and its own random stream. Keeps scratch buffers between
/// calls, so one Sampler serves one generation at a time (not thread-safe).
class Sampler {
public:
  /// Validates `options` (see SamplingOptions::validate) and seeds the generator.
  explicit Sampler(SamplingOptions options);

  /// The next token id in [0, logits.size()). logits: [vocab] f32, one row (not modified);
  /// context: the token ids already in the conversation (prompt + generated), used only by the
  /// repetition penalty. Throws Error(invalid_input) for an empty row, a row longer than
  /// INT32_MAX, a NaN or +inf logit, a row with every logit -inf, or a context id outside
  /// [0, vocab). Each non-greedy call consumes exactly one generator output.
  std::int32_t sample(std::span<const float> logits, std::span<const std::int32_t> context = {});

  /// The options this sampler was built with.
  const SamplingOptions& options() const { return options_; }
  /// Restarts the random stream as if freshly constructed with `seed`.
  void reseed(std::uint64_t seed);

private:
  /// The logits after the repetition penalty (`logits` itself when there is none).
  std::span<const float> penalized(std::span<const float> logits,
                                   std::span<const std::int32_t> context);
  /// keys_ = the k best candidates of y, in order (a bounded heap: O(V) for small k).
  void top_k_keys(std::span<const float> y, std::size_t k);
  /// Size of the nucleus of keys_ (its first `sorted` are in order): the shortest prefix of
  /// the order whose weight reaches `target`, moved to the front; O(V), sorts only small parts.
  std::size_t nucleus(double target, std::size_t sorted);

  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<float> penalized_;       ///< [vocab] logits after the repetition penalty
  std::vector<float> weight_;          ///< [vocab] exp((y - max) / T), valid for candidates
  std::vector<std::uint64_t> keys_;    ///< candidates as (logit, id) keys; the kept ones first
  std::vector<std::int32_t> distinct_; ///< distinct context ids (scratch of the penalty)
};

} // namespace tpullm::runtime
