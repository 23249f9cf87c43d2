#pragma once
/// What a slot pool answers (runtime/slot_pool.hpp), for the tests that compare a pool over a
/// pipeline or tensor-parallel ranks with one over a single process (test_layer_pipeline.cpp,
/// test_tensor_parallel.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "tpullm/runtime/slot_pool.hpp"

namespace tpullm_test {

using namespace tpullm;

/// A slot's tokens and their log-probabilities, in the order the pool chose them, by slot.
using SlotAnswers = std::map<int, std::vector<std::pair<std::int32_t, double>>>;

/// Every slot's tokens and token log-probabilities, in the order the pool chose them, for
/// `prompts` started together (slot i: prompts[i]) and greedy answers of `n` tokens; the
/// rounds' micro-batch steps and decode rows summed into `micro` and `rows` (the most in one
/// round in `most_micro`), the rounds taken in `rounds`.
inline SlotAnswers answers(runtime::SlotPool& pool,
                           const std::vector<std::vector<std::int32_t>>& prompts, int n,
                           std::int64_t& micro, std::int64_t& rows, int& rounds,
                           std::int64_t& most_micro) {
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    runtime::SlotRequest r;
    r.prompt = prompts[i];
    r.options.stop.max_new_tokens = n;
    r.options.logprobs = 0;
    pool.start(static_cast<int>(i), r);
  }
  SlotAnswers got;
  for (rounds = 0; rounds < 200 && pool.busy(); ++rounds) {
    const auto r = pool.step();
    micro += r.micro_batches;
    most_micro = std::max(most_micro, r.micro_batches);
    rows += r.decode_batch;
    for (const auto& e : r.events) {
      REQUIRE_FALSE(e.error);
      if (e.token >= 0) {
        REQUIRE(e.logprobs);
        got[e.slot].emplace_back(e.token, e.logprobs->chosen.logprob);
      }
    }
  }
  CHECK_FALSE(pool.busy());
  return got;
}

/// Checks that `got` has `want`'s tokens, slot by slot; returns the largest log-probability
/// difference.
inline double logprob_gap(const SlotAnswers& want, const SlotAnswers& got) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (const auto& [slot, toks] : want) {
    const auto& g = got.at(slot);
    REQUIRE(g.size() == toks.size());
    for (std::size_t i = 0; i < toks.size(); ++i) {
      CHECK(g[i].first == toks[i].first);
      worst = std::max(worst, std::abs(g[i].second - toks[i].second));
    }
  }
  return worst;
}

} // namespace tpullm_test
