#pragma once
/// Speculative decoding with drafts from the prompt (prompt lookup, no second model): the tokens
/// that followed the latest earlier occurrence of the context's last n-gram are proposed, fed
/// with the last sampled token as one short segment through the prefill_kv stage (the verify
/// call: one read of the weights for 1 + k positions), and the answer is sampled row by row from
/// the segment's logits exactly as plain decoding samples it, keeping the drafts while they
/// equal what was sampled. Every row's logits are those plain decoding would compute after the
/// same tokens, and each answer token is sampled from them with the same sampler state, so the
/// answer is plain decoding's, greedy or sampled, seed for seed; only the float arithmetic of
/// the segment (a GEMM of 1 + k rows instead of a GEMV) differs. Rejected positions are undone
/// by rolling the cache length back (their slots are overwritten later).

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

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
  /// Throws Error(invalid_input, "speculation") unless 0 <= draft_max <= kMaxDraft and
  /// 1 <= ngram_min <= ngram_max <= kMaxNgram.
  void validate() const;
  static constexpr int kMaxDraft = 32; ///< bound on draft_max
  static constexpr int kMaxNgram = 8;  ///< bound on ngram_max
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
  /// accepted / drafted (0 when nothing was drafted).
  double acceptance() const {
    return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  }
};

/// The draft length to ask for next, adapted to what was accepted so far: it grows by one after
/// a fully accepted draft (up to draft_max) and falls to one more than what was accepted
/// otherwise; after kPatience verify calls in a row that accept nothing, drafting pauses for a
/// number of decode steps that doubles each time (up to kMaxPause), so a context whose drafts
/// never match costs at most one verify call per kMaxPause steps.
class DraftLength {
public:
  explicit DraftLength(int draft_max) : max_(draft_max), k_(draft_max) {}
  /// Tokens to draft at this step (0: decode plainly); counts a paused step.
  int next();
  /// Records a verify call of `drafted` tokens of which the first `accepted` were kept.
  void record(int drafted, int accepted);
  static constexpr int kPatience = 2;  ///< verify calls accepting nothing before a pause
  static constexpr int kMaxPause = 64; ///< longest pause, in decode steps

private:
  int max_, k_;
  int misses_ = 0, pause_ = 0, next_pause_ = 4;
};

} // namespace tpullm::runtime
