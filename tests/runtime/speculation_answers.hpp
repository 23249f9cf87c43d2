#pragma once
// Helpers of the speculative-decoding tests (test_speculation.cpp,
// test_speculation_checkpoints.cpp): plain decoding's answer, and drafts taken from it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "tpullm/runtime/session.hpp"

namespace tpullm_test {

/// Plain decoding's answer to `prompt` in `s` with `g`; with `eos`, the answer's token 20 is made
/// the eos id (written into g.stop.eos_ids) and the answer decoded again, now ended by it.
inline tpullm::runtime::GenerateResult plain_answer(tpullm::runtime::Session& s,
                                                    const std::vector<std::int32_t>& prompt,
                                                    tpullm::runtime::GenerateOptions& g, bool eos) {
  auto plain = s.generate(prompt, g);
  if (eos) { // an eos id met in the middle of the answer
    REQUIRE(plain.tokens.size() > 20);
    g.stop.eos_ids = {plain.tokens[20]};
    s.reset();
    plain = s.generate(prompt, g);
    CHECK(plain.reason == tpullm::runtime::StopReason::eos);
  }
  return plain;
}

/// Drafts from a known answer to a prompt of `n_prompt` tokens: the answer's next tokens after
/// the context, every third one made wrong ((id + 1) % vocab) when `wrong_third`. `answer` must
/// outlive the returned function.
inline std::function<std::vector<std::int32_t>(std::span<const std::int32_t>, int)>
answer_drafts(const std::vector<std::int32_t>& answer, std::size_t n_prompt, bool wrong_third,
              std::int32_t vocab) {
  return [&answer, n_prompt, wrong_third, vocab](std::span<const std::int32_t> ctx, int k) {
    std::vector<std::int32_t> d;
    for (std::size_t j = ctx.size() - n_prompt; j < answer.size() && static_cast<int>(d.size()) < k;
         ++j)
      d.push_back(wrong_third && d.size() == 2 ? (answer[j] + 1) % vocab : answer[j]);
    return d;
  };
}

/// A speculative answer against plain decoding's: the same tokens and stop reason, the same
/// tokens held in both sessions' caches (`spec_length`, `plain_length`), no more drafts kept
/// than drafted.
inline void check_same_answer(const tpullm::runtime::GenerateResult& spec,
                              const tpullm::runtime::GenerateResult& plain,
                              std::int64_t spec_length, std::int64_t plain_length) {
  CHECK(spec.tokens == plain.tokens);
  CHECK(spec.reason == plain.reason);
  CHECK(spec_length == plain_length);
  CHECK(spec.speculation.accepted <= spec.speculation.drafted);
}

} // namespace tpullm_test
