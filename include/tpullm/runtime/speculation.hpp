#pragma once
/// Speculative decoding with drafts from the prompt (prompt lookup, no second model): the tokens
/// that followed the latest earlier occurrence of the context's last n-gram are proposed, fed
/// with the last sampled token as one short segment through the prefill_kv stage (the verify
/// call: one read of the weights for 1 + k positions), and the answer is sampled row by row from
/// the segment's logits exactly as plain decoding samples it, keeping the drafts while they
/// equal what was sampled. Every row's logits are those plain decoding would compute after the
/// same tokens, and each answer token is sampled from them with the same sampler state, so the
/// answer is plain decoding's, greedy or sampled, seed for seed. Bit for bit so where every
/// linear takes int8-rounded inputs (--act-quant dynamic on integer weights, the GGUF default):
/// a segment of up to kernels::kDecodeArithmeticRows rows computes its attention as decode steps
/// and its integer linears sum each row as one; float linears sum 1 + k rows in another order
/// than one, so there a row agrees to rounding (a greedy tie that close can go either way).
/// Rejected positions are undone by rolling the cache length back (their slots are overwritten
/// later).

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/kernels/attention_shape.hpp"

namespace tpullm::runtime {

/// How drafts are made (GenerateOptions::speculation).
struct SpeculationOptions {
  /// Most draft tokens per verify call (0: plain decoding). The verify segment is 1 + draft
  /// tokens: a bundle with prefill variants of those lengths (--prefill-lengths 4,8,...) and
  /// batched lm_heads (--decode-batches ...,4,8) runs a short one at about the cost of one
  /// decode step.
  int draft_max = 0;
  int ngram_max = 3; ///< longest n-gram looked up (tried first)
  int ngram_min = 2; ///< shortest n-gram looked up
  /// Where drafts come from: (context: prompt and answer so far, k) -> at most k tokens (more
  /// are cut; empty: decode plainly this step). Empty: prompt lookup (prompt_lookup_draft). A
  /// draft only decides how many tokens a verify call may keep, never which: any source gives
  /// the same answer.
  std::function<std::vector<std::int32_t>(std::span<const std::int32_t>, int)> draft;
  /// Called with the prompt once the model has prefilled it, before the first answer token is
  /// taken (null: nothing to do): a draft model catches up on the prompt there, in the prompt's
  /// time (GenerateResult::draft_prefill_seconds), instead of inside its first draft call, where
  /// a long prompt made that call cost many decode steps. Like a draft, it may throw: the answer
  /// goes on, and the first draft call catches up instead.
  std::function<void(std::span<const std::int32_t>)> prepare;
  /// What drafting one token costs, in decode steps of the model (DraftLength): 0 for prompt
  /// lookup; a draft model's bytes read per step over the model's (`--draft` sets it).
  double draft_cost = 0;
  /// Throws Error(invalid_input, "speculation") unless 0 <= draft_max <= kMaxDraft,
  /// 1 <= ngram_min <= ngram_max <= kMaxNgram and 0 <= draft_cost <= 100.
  void validate() const;
  /// Bound on draft_max: a verify segment of 1 + draft_max rows computes as decode steps
  /// (kernels::kDecodeArithmeticRows).
  static constexpr int kMaxDraft = static_cast<int>(kernels::kDecodeArithmeticRows) - 1;
  static constexpr int kMaxNgram = 8; ///< bound on ngram_max
};

/// At most `k` tokens that followed an earlier occurrence (not the suffix itself) of the last n
/// tokens of `context`, for n from ngram_max down to ngram_min (the first n that occurs wins):
/// the latest occurrence that has k tokens after it, else the latest one; empty when none
/// occurs or k <= 0. O(|context| * ngram_max).
std::vector<std::int32_t> prompt_lookup_draft(std::span<const std::int32_t> context,
                                              const SpeculationOptions& o, int k);

/// What speculation did in one answer.
struct SpeculationStats {
  std::int64_t verify_calls = 0; ///< verify segments fed
  std::int64_t drafted = 0;      ///< draft tokens proposed in them
  std::int64_t accepted = 0;     ///< draft tokens kept (equal to what was sampled)
  double draft_seconds = 0;      ///< time spent making the drafts (the draft source's calls)
  double verify_seconds = 0;     ///< time spent in the verify calls
  /// accepted / drafted (0 when nothing was drafted).
  double acceptance() const {
    return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  }
};

/// The draft length to ask for next, chosen for speed from what was kept so far and what a draft
/// costs. Acceptance is modelled as geometric: each draft token is kept with probability p,
/// estimated from decayed counts (kDecay per verify call) of kept tokens and of calls that
/// ended in a rejection, starting from an optimistic prior (p = 0.8, worth two calls of
/// evidence). A call of k drafts then yields E(k) = 1 + p + ... + p^k tokens for a cost of
/// 1 + k * (row_cost + draft_cost) decode steps (row_cost: what each verify row adds, measured
/// 0.05 on the 0.5B preset; draft_cost: SpeculationOptions::draft_cost), and the k in
/// [1, draft_max] with the best E(k) / cost is asked for while that ratio is at least 1. When no
/// k is worth it, drafting pauses, then one token is drafted as a probe; the pause starts at
/// first_pause() steps (so that probes cost about 2% of the steps)
/// and doubles after each probe that keeps nothing, up to kMaxPause. So drafts that never match
/// cost a few verify calls and then about one probe per kMaxPause steps. A timed draft (a draft
/// model: draft_cost > 0) does not probe: once no k is worth it, it stays off for the rest of
/// the answer, because a probe would first feed the draft model every token of the pause (its
/// catch-up took 248 ms for 160 tokens, 1.5 ms a token, beside 14-20 ms decode steps on the
/// 0.5B Q4_0 preset: 8-11% of the paused steps, more than the 3% a draft that never matches may
/// cost).
class DraftLength {
public:
  /// `draft_max` 0: never drafts.
  explicit DraftLength(int draft_max, double draft_cost = 0, double row_cost = kRowCost);
  /// Tokens to draft at this step (0: decode plainly); counts a paused step.
  int next();
  /// Records a verify call of `drafted` tokens of which the first `accepted` were kept.
  void record(int drafted, int accepted);
  /// Corrects the draft cost with what a call took: `draft_seconds` to make `drafted` tokens
  /// (with the draft model's catching up on the context) beside `verify_seconds` for their
  /// verify call, worth 1 + drafted * row_cost decode steps. A draft model's step costs more
  /// than its share of the bytes says (integer weights are slower to read per byte, its own
  /// prefill_kv of the kept tokens): the cost follows the measured one (weight 0.3 per call).
  /// Ignored for free drafts (a draft_cost of 0 at construction: prompt lookup, whose choices
  /// stay independent of timing).
  /// Once a plain step has been timed (observe_step), the decode step is that time: the call's
  /// verify cost in steps corrects row_cost as well, so a verify call that costs 1.5 steps
  /// instead of the modelled 1.15 is priced as such.
  void observe(double draft_seconds, double verify_seconds, int drafted);
  /// Times a plain decode step (`seconds`, weight 0.3 per step after the first one kept), which
  /// observe() then measures verify calls and drafts against. The first step given is left out
  /// (right after a prefill it measured 3x a later one), and a timed draft (a draft model)
  /// decodes its first two steps plainly to have a time. Ignored for free drafts.
  void observe_step(double seconds);
  /// The draft cost in use (decode steps per draft token).
  double draft_cost() const { return draft_cost_; }
  /// The cost of a verify row in use (decode steps per drafted token).
  double row_cost() const { return row_cost_; }
  /// The estimated probability that a draft token is kept.
  double acceptance() const { return kept_ / (kept_ + missed_); }
  /// The first pause of an untimed draft, in decode steps: max(4, row_cost / 0.02).
  int first_pause() const { return first_pause_; }
  static constexpr double kRowCost = 0.05; ///< default cost of a verify row, in decode steps
  static constexpr double kDecay = 0.9;    ///< weight of the evidence of one call ago
  static constexpr int kMaxPause = 256;    ///< longest pause, in decode steps

private:
  /// The best draft length and its expected tokens per decode step's cost.
  std::pair<int, double> best() const;
  int max_;
  double draft_cost_, row_cost_;
  bool timed_;                       ///< observe() corrects draft_cost_ (a draft model)
  double step_seconds_ = 0;          ///< a plain decode step's time (0: none timed yet)
  int steps_asked_ = 0;              ///< plain steps next() asked for, to time the second
  int steps_seen_ = 0;               ///< plain steps observe_step() was given
  double kept_ = 2.0, missed_ = 0.5; ///< decayed counts, the prior included
  int first_pause_, next_pause_, pause_ = 0;
  bool probe_ = false;
  bool off_ = false; ///< a timed draft that stopped paying: no drafts for the rest of the answer
};

/// The draft length a bundle of stage parameters `p` verifies exactly: `draft_max` capped so
/// that 1 + draft rows run through a prefill_kv variant of at most
/// kernels::kDecodeArithmeticRows rows (whose rows compute as decode steps). Throws
/// Error(unsupported, `where`) when draft_max > 0 and the bundle has no prefill_kv stage
/// (--no-history) or no prefill length that short; 0 stays 0.
int verify_draft_max(const frontend::StageParams& p, int draft_max,
                     const char* where = "speculation");

/// Runs spec.prepare over `context` (the prompt, once it is prefilled) when speculation is on
/// and a draft source has one; a prepare that throws is ignored (the first draft call catches up
/// instead: a draft decides the speed, never the answer). Returns the seconds it took.
double prepare_draft(const SpeculationOptions& spec, std::span<const std::int32_t> context);

/// The draft for the next step of an answer, as Session::generate and SlotPool ask for it: the
/// length `length` proposes, cut so that the verify segment (1 + k positions) fits the `room`
/// positions left in the cache and no more than `budget` - 1 tokens are drafted (`budget`: the
/// answer's tokens still allowed), from spec.draft or prompt lookup over `context`. A draft
/// source that throws gives no draft (the step decodes plainly: a draft decides the speed, never
/// the answer). `seconds` gets the time the draft took (DraftLength::observe).
std::vector<std::int32_t> next_draft(const SpeculationOptions& spec, DraftLength& length,
                                     std::span<const std::int32_t> context, std::int64_t room,
                                     std::int64_t budget, double& seconds);

} // namespace tpullm::runtime
