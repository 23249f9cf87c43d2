// SlotPool (runtime/slot_pool.hpp), without HTTP: two slots on one executor, a prefill segment of
// one beside the decode of the other in one round, both generating in one batched decode call,
// greedy answers equal to a lone Session's; slot states, pick() by reuse, refusals and cancel().
#include "llama_gqa.hpp"
#include "small_compile.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/slot_pool.hpp"

using namespace tpullm;
using runtime::SlotState;

namespace {

/// 128 positions, prefill segments of 32 and 8 rows (a verify segment runs through the 8),
/// decode variants 128 and 64, batched decode of 2 and 4.
frontend::StageParams pool_params() {
  auto p = tpullm_test::small_params(128, 32, {64}, {1, 2, 4});
  p.prefill_chunks = {8};
  return p;
}

std::vector<std::int32_t> ids(std::size_t n, std::size_t seed) {
  return tpullm_test::test_ids(n, seed);
}

runtime::GenerateOptions greedy(int n) {
  runtime::GenerateOptions g;
  g.stop.max_new_tokens = n;
  return g;
}

struct Compiled : tpullm_test::CompiledLlamaGqa {
  Compiled() : CompiledLlamaGqa(pool_params()) {}
  /// The greedy answer of a lone Session on its own executor.
  std::vector<std::int32_t> alone(const std::vector<std::int32_t>& prompt, int n) const {
    auto exec = runtime::make_executor(cm);
    runtime::CompiledStages stages(*exec);
    runtime::Session s(stages, dims(), pool_params());
    return s.generate(prompt, greedy(n)).tokens;
  }
};

const runtime::SlotEvent* event_of(const runtime::SlotRound& r, int slot) {
  for (const auto& e : r.events)
    if (e.slot == slot)
      return &e;
  return nullptr;
}

} // namespace

TEST_CASE("two slots: a prefill segment beside a decode, then one batched decode", "[slot-pool]") {
  const Compiled c;
  auto exec = runtime::make_executor(c.cm, 0, 2);
  runtime::SlotPool pool(*exec, c.dims(), pool_params(), nullptr);
  REQUIRE(pool.size() == 2);
  CHECK(pool.max_decode_batch() == 4);
  CHECK_FALSE(pool.busy());

  const auto a = ids(10, 1); // one prefill segment
  const auto b = ids(40, 2); // two (32 + 8)
  const int n = 6;
  std::map<int, std::vector<std::int32_t>> got;
  auto collect = [&](const runtime::SlotRound& r) {
    for (const auto& e : r.events) {
      REQUIRE_FALSE(e.error);
      if (e.token >= 0)
        got[e.slot].push_back(e.token);
    }
  };

  const auto sa = pool.pick(a);
  REQUIRE(sa);
  pool.start(*sa, {a, greedy(n)});
  CHECK(pool.state(*sa) == SlotState::prefill);
  CHECK_THROWS_AS(pool.start(*sa, {a, greedy(n)}), runtime::BusyError);

  // Round 1: a's whole prompt and its first token.
  auto r = pool.step();
  collect(r);
  CHECK(r.prefill_segments == 1);
  REQUIRE(event_of(r, *sa));
  CHECK(event_of(r, *sa)->first_token);
  CHECK(pool.state(*sa) == SlotState::generating);

  const auto sb = pool.pick(b);
  REQUIRE(sb);
  CHECK(*sb != *sa);
  pool.start(*sb, {b, greedy(n)});
  CHECK_FALSE(pool.pick(a)); // every slot busy

  // Round 2: b's first segment beside a's decode, in one round.
  r = pool.step();
  collect(r);
  CHECK(r.prefill_segments == 1);
  CHECK(r.decode_batch == 0); // a decodes alone: it is the only slot generating
  REQUIRE(event_of(r, *sa));
  CHECK(event_of(r, *sa)->token >= 0);
  CHECK_FALSE(event_of(r, *sb)); // a segment that is not the last chooses nothing
  CHECK(pool.state(*sb) == SlotState::prefill);

  // Round 3: b's last segment (its first token) beside a's decode.
  r = pool.step();
  collect(r);
  CHECK(r.prefill_segments == 1);
  REQUIRE(event_of(r, *sb));
  CHECK(event_of(r, *sb)->first_token);
  CHECK(event_of(r, *sb)->prompt_tokens == 40);
  CHECK(pool.state(*sb) == SlotState::generating);

  // Round 4: both generating, in one batched decode call.
  r = pool.step();
  collect(r);
  CHECK(r.prefill_segments == 0);
  CHECK(r.decode_batch == 2);
  CHECK(r.events.size() == 2);

  std::map<int, runtime::StopReason> stops;
  while (pool.busy()) {
    r = pool.step();
    collect(r);
    for (const auto& e : r.events)
      if (e.stop)
        stops[e.slot] = *e.stop;
  }
  CHECK(stops[*sa] == runtime::StopReason::token_budget);
  CHECK(stops[*sb] == runtime::StopReason::token_budget);
  CHECK(pool.state(*sa) == SlotState::idle);
  CHECK(got[*sa] == c.alone(a, n));
  CHECK(got[*sb] == c.alone(b, n));

  // The conversation continued goes back to the slot that holds it, and reuses its cache.
  auto more = a;
  more.insert(more.end(), got[*sa].begin(), got[*sa].end());
  more.push_back(7);
  REQUIRE(pool.pick(more) == sa);
  pool.start(*sa, {more, greedy(2)});
  r = pool.step();
  REQUIRE(event_of(r, *sa));
  CHECK(event_of(r, *sa)->cached_tokens == static_cast<std::int64_t>(a.size()) + n - 1);
  pool.cancel(*sa);
  CHECK(pool.state(*sa) == SlotState::idle);
  CHECK_FALSE(pool.busy());
}

TEST_CASE("a slot's failed step ends only that slot", "[slot-pool]") {
  const Compiled c;
  auto exec = runtime::make_executor(c.cm, 0, 2);
  runtime::SlotPool pool(*exec, c.dims(), pool_params(), nullptr);
  CHECK_THROWS_AS(pool.start(0, {{}, greedy(2)}), Error);     // an empty prompt
  CHECK_THROWS_AS(pool.start(0, {{1, 2}, greedy(0)}), Error); // a bad budget
  CHECK(pool.state(0) == SlotState::idle);
  pool.start(0, {{1, 2, 999999}, greedy(2)}); // an id outside the vocabulary: fails at prefill
  pool.start(1, {ids(5, 3), greedy(2)});
  const auto r = pool.step();
  REQUIRE(event_of(r, 0));
  CHECK(event_of(r, 0)->error);
  CHECK(pool.state(0) == SlotState::idle);
  REQUIRE(event_of(r, 1));
  CHECK_FALSE(event_of(r, 1)->error);
  CHECK(pool.state(1) == SlotState::generating);
}

// Speculation in the pool (issue 37): a slot drafting the plain answer itself (every draft
// right, its answer running into the end of the sequence mid-draft), a slot whose every third
// draft token is wrong, and a slot that does not speculate, in the same rounds: each answer is
// the lone Session's, a verifying slot emits several tokens in one round, and the next
// conversation reuses a cache that holds exactly what was kept.
TEST_CASE("slots that speculate answer as plain decoding, beside one that does not",
          "[slot-pool][speculation]") {
  const Compiled c;
  auto exec = runtime::make_executor(c.cm, 0, 3);
  runtime::SlotPool pool(*exec, c.dims(), pool_params(), nullptr);
  pool.set_draft_beside_batch(true); // drafts in the rounds the others decode in a batch
  REQUIRE(pool.size() == 3);
  const auto a = ids(100, 4), b = ids(20, 5), p = ids(12, 6);
  const int n = 40; // a: 100 + 40 > 128, so its answer ends at the end of the sequence
  const std::vector<std::int32_t> want[3] = {c.alone(a, n), c.alone(b, n), c.alone(p, n)};
  const std::vector<std::int32_t>* prompts[3] = {&a, &b, &p};
  auto drafting = [&](int slot, bool wrong_third) {
    auto g = greedy(n);
    g.speculation.draft_max = 5;
    g.speculation.draft = [&, slot, wrong_third](std::span<const std::int32_t> ctx, int k) {
      std::vector<std::int32_t> d;
      const auto& ans = want[slot];
      for (std::size_t j = ctx.size() - prompts[slot]->size();
           j < ans.size() && static_cast<int>(d.size()) < k; ++j)
        d.push_back(wrong_third && d.size() == 2 ? (ans[j] + 1) % 512 : ans[j]);
      return d;
    };
    return g;
  };
  pool.start(0, {a, drafting(0, false)});
  pool.start(1, {b, drafting(1, true)});
  pool.start(2, {p, greedy(n)});
  std::map<int, std::vector<std::int32_t>> got;
  std::map<int, runtime::StopReason> stops;
  runtime::SpeculationStats total;
  std::size_t most_in_a_round = 0;
  for (int round = 0; pool.busy() && round < 200; ++round) {
    const auto r = pool.step();
    std::map<int, std::size_t> per_slot;
    for (const auto& e : r.events) {
      REQUIRE_FALSE(e.error);
      if (e.token >= 0) {
        got[e.slot].push_back(e.token);
        most_in_a_round = std::max(most_in_a_round, ++per_slot[e.slot]);
      }
      if (e.stop)
        stops[e.slot] = *e.stop;
    }
    total.verify_calls += r.speculation.verify_calls;
    total.drafted += r.speculation.drafted;
    total.accepted += r.speculation.accepted;
  }
  REQUIRE_FALSE(pool.busy());
  for (int s = 0; s < 3; ++s) {
    INFO("slot " << s);
    CHECK(got[s] == want[s]);
  }
  CHECK(stops[0] == runtime::StopReason::sequence_end);
  CHECK(stops[1] == runtime::StopReason::token_budget);
  CHECK(total.verify_calls > 0);
  CHECK(total.accepted <= total.drafted);
  CHECK(total.accepted * 2 >= total.drafted); // slot 0 keeps every draft, slot 1 two of three
  CHECK(most_in_a_round > 1);
  // Slot 1's cache holds its prompt and the answer fed (all but the last token): a continued
  // conversation reuses all of it and then decodes as a lone Session would.
  auto more = b;
  more.insert(more.end(), got[1].begin(), got[1].end());
  REQUIRE(pool.pick(more) == 1);
  pool.start(1, {more, greedy(3)});
  std::vector<std::int32_t> next;
  std::int64_t cached = -1;
  while (pool.busy())
    for (const auto& e : pool.step().events) {
      REQUIRE_FALSE(e.error);
      cached = e.cached_tokens;
      if (e.token >= 0)
        next.push_back(e.token);
    }
  CHECK(cached == static_cast<std::int64_t>(b.size()) + n - 1);
  CHECK(next == c.alone(more, 3));
}

// By default a slot drafts only while it generates alone: two slots drafting the plain answer
// (every draft right) make no verify call while both generate, then the one left drafts; both
// answers are the lone Session's.
TEST_CASE("a slot drafts only while no other slot generates beside it",
          "[slot-pool][speculation]") {
  const Compiled c;
  auto exec = runtime::make_executor(c.cm, 0, 2);
  runtime::SlotPool pool(*exec, c.dims(), pool_params(), nullptr);
  const auto a = ids(10, 7), b = ids(12, 8);
  const int na = 6, nb = 30;
  const std::vector<std::int32_t> want[2] = {c.alone(a, na), c.alone(b, nb)};
  const std::vector<std::int32_t>* prompts[2] = {&a, &b};
  auto drafting = [&](int slot, int n) {
    auto g = greedy(n);
    g.speculation.draft_max = 3;
    g.speculation.draft = [&, slot](std::span<const std::int32_t> ctx, int k) {
      std::vector<std::int32_t> d;
      for (std::size_t j = ctx.size() - prompts[slot]->size();
           j < want[slot].size() && static_cast<int>(d.size()) < k; ++j)
        d.push_back(want[slot][j]);
      return d;
    };
    return g;
  };
  pool.start(0, {a, drafting(0, na)});
  pool.start(1, {b, drafting(1, nb)});
  std::map<int, std::vector<std::int32_t>> got;
  std::int64_t beside = 0, alone = 0; // verify calls in rounds with two slots generating, one
  for (int round = 0; pool.busy() && round < 100; ++round) {
    const int generating = (pool.state(0) == SlotState::generating ? 1 : 0) +
                           (pool.state(1) == SlotState::generating ? 1 : 0);
    const auto r = pool.step();
    for (const auto& e : r.events) {
      REQUIRE_FALSE(e.error);
      if (e.token >= 0)
        got[e.slot].push_back(e.token);
    }
    (generating >= 2 ? beside : alone) += r.speculation.verify_calls;
  }
  REQUIRE_FALSE(pool.busy());
  CHECK(got[0] == want[0]);
  CHECK(got[1] == want[1]);
  CHECK(beside == 0);
  CHECK(alone > 0);
}
