#pragma once
/// Drafts for speculative decoding (speculation.hpp) from a second model with the same
/// vocabulary: a smaller model of the family, or a low-bit copy of the same checkpoint. The draft
/// model has its own session and KV cache, kept in step with the conversation through a
/// PromptCache: at each call the context's prefix that the draft cache already holds is kept
/// (a rejected draft is rolled back), the rest is fed, and k tokens are decoded greedily.

#include <cstdint>
#include <span>
#include <vector>

#include "tpullm/runtime/prompt_cache.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/runtime/speculation.hpp"

namespace tpullm::runtime {

/// See the file comment. Holds `session` (the draft model's) by reference; one conversation.
class DraftModel {
public:
  explicit DraftModel(Session& session) : cache_(session) {}

  /// Up to `k` tokens the draft model decodes greedily after `context` (prompt and answer so
  /// far); empty when k <= 0 or the context and the draft would not fit the draft model's
  /// compiled sequence length (the target then decodes plainly). Ids outside the draft model's
  /// vocabulary are Error(invalid_input) (prefill()'s refusal).
  std::vector<std::int32_t> draft(std::span<const std::int32_t> context, int k);

  /// Feeds the draft model `context` (what the cache does not already hold), so that the next
  /// draft() after it only decodes; does nothing when the context would not fit the draft
  /// model's sequence (draft() then returns nothing either).
  void prepare(std::span<const std::int32_t> context);

  /// The draft source of SpeculationOptions::draft over this object (which must outlive it).
  auto source() {
    return [this](std::span<const std::int32_t> context, int k) { return draft(context, k); };
  }
  /// Forgets the conversation: the next call feeds its whole context.
  void reset() { cache_.reset(); }

  /// SpeculationOptions::prepare over this object (which must outlive it).
  auto preparer() {
    return [this](std::span<const std::int32_t> context) { prepare(context); };
  }

private:
  PromptCache cache_;
};

} // namespace tpullm::runtime
