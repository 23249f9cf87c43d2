// Pipeline parallelism (runtime/layer_pipeline.hpp) with threads as ranks: the layer split rules,
// and on the compiled llama-gqa checkpoint (3 layers) a Session whose later layers run on 1 or 2
// other ranks gives the logits of a single-process session bit for bit, through prefill,
// prefill_kv, decode, verify, truncation and greedy generation; a rank whose layers throw makes
// rank 0 throw that error, naming the rank, and the pipeline goes on.
#include "llama_gqa.hpp"
#include "pipeline_test_params.hpp"
#include "slot_answers.hpp"
#include "thread_link.hpp"
#include <catch2/catch.hpp>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/layer_pipeline.hpp"
#include "tpullm/runtime/layer_split.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/runtime/slot_pool.hpp"

using namespace tpullm;
using runtime::LayerRange;

namespace {

using tpullm_test::FailingStages;
using tpullm_test::ThreadHub;
using tpullm_test::ThreadLink;

/// Rank 0's session over a pipeline of threads, the other ranks' loops running until it ends.
struct ThreadPipeline {
  ThreadHub hub;
  std::vector<std::unique_ptr<runtime::Executor>> execs;
  std::vector<std::unique_ptr<runtime::CompiledStages>> stages;
  std::vector<std::unique_ptr<ThreadLink>> links;
  std::unique_ptr<FailingStages> failing;
  std::vector<std::thread> threads;
  std::unique_ptr<runtime::LayerPipeline> pipe;
  std::unique_ptr<runtime::Session> session;

  ThreadPipeline(const tpullm_test::CompiledLlamaGqa& m, std::vector<LayerRange> ranges,
                 int fail_rank = -1, int fail_at = 0, std::int64_t slots = 1) {
    const int n = static_cast<int>(ranges.size());
    for (int r = 0; r < n; ++r) {
      execs.push_back(runtime::make_executor(m.cm, 1, slots));
      stages.push_back(std::make_unique<runtime::CompiledStages>(*execs.back()));
      links.push_back(std::make_unique<ThreadLink>(hub, r, n));
    }
    if (fail_rank > 0)
      failing =
          std::make_unique<FailingStages>(*stages[static_cast<std::size_t>(fail_rank)], fail_at);
    for (int r = 1; r < n; ++r)
      threads.emplace_back([this, r, &m, range = ranges[static_cast<std::size_t>(r)], fail_rank] {
        runtime::Stages& s = r == fail_rank ? static_cast<runtime::Stages&>(*failing)
                                            : *stages[static_cast<std::size_t>(r)];
        (void)runtime::serve_pipeline_rank(*links[static_cast<std::size_t>(r)], s, range,
                                           m.dims().hidden, m.stage_params);
      });
    pipe = std::make_unique<runtime::LayerPipeline>(*links[0], ranges, m.dims().hidden,
                                                    runtime::pipeline_max_rows(m.stage_params));
    session = std::make_unique<runtime::Session>(*stages[0], m.dims(), m.stage_params);
    session->set_remote_layers(pipe.get());
  }
  ~ThreadPipeline() {
    session.reset();
    pipe.reset(); // tells the other ranks to stop
    for (auto& t : threads)
      t.join();
  }
};

std::vector<std::int32_t> ids(std::int32_t n, std::int32_t seed) {
  return tpullm_test::test_ids(n, seed, 253); // within every test checkpoint's vocabulary
}

} // namespace

TEST_CASE("layers split by bytes, every rank at least one, rank 0 carrying the shared weights",
          "[pipeline]") {
  const std::vector<std::int64_t> even(24, 100);
  CHECK(runtime::split_layers(even, 2) == std::vector<LayerRange>{{0, 12}, {12, 24}});
  CHECK(runtime::split_layers(even, 3) == std::vector<LayerRange>{{0, 8}, {8, 16}, {16, 24}});
  // rank 0's embedding and lm_head (400 bytes) move four layers to rank 1
  CHECK(runtime::split_layers(even, 2, 400) == std::vector<LayerRange>{{0, 10}, {10, 24}});
  const std::vector<std::int64_t> uneven{10, 10, 10, 70};
  CHECK(runtime::split_layers(uneven, 2) == std::vector<LayerRange>{{0, 3}, {3, 4}});
  CHECK(runtime::split_layers(uneven, 4) ==
        std::vector<LayerRange>{{0, 1}, {1, 2}, {2, 3}, {3, 4}});
  const std::vector<std::int64_t> unknown(5, 0); // no sizes: counts
  CHECK(runtime::split_layers(unknown, 2) == std::vector<LayerRange>{{0, 3}, {3, 5}});
  CHECK(runtime::split_layers(even, 1) == std::vector<LayerRange>{{0, 24}});
  CHECK_THROWS_WITH(runtime::split_layers(uneven, 5),
                    Catch::Contains("5 ranks cannot each take a layer of 4"));
  CHECK(runtime::parse_layer_split("2,1", 3, 2) == std::vector<LayerRange>{{0, 2}, {2, 3}});
  CHECK_THROWS_WITH(runtime::parse_layer_split("2,2", 3, 2),
                    Catch::Contains("counts more than the model's 3 layers"));
  CHECK_THROWS_WITH(runtime::parse_layer_split("1,1", 3, 2),
                    Catch::Contains("counts 2 layers; the model has 3"));
  CHECK_THROWS_WITH(runtime::parse_layer_split("3", 3, 2), Catch::Contains("gives 1 counts for 2"));
  CHECK_THROWS_WITH(runtime::parse_layer_split("1,x", 3, 2), Catch::Contains("got 'x'"));
  CHECK_THROWS_WITH(runtime::parse_layer_split("0,3", 3, 2), Catch::Contains("got '0'"));
  // a count near the largest int64 is refused before the running sum could overflow
  CHECK_THROWS_WITH(runtime::parse_layer_split("1,9223372036854775807", 3, 2),
                    Catch::Contains("counts more than the model's 3 layers"));
}

TEST_CASE("a pipeline over 2 and 3 ranks gives a single process's logits bit for bit",
          "[pipeline]") {
  const tpullm_test::CompiledLlamaGqa m(tpullm_test::pipeline_test_params());
  auto single_exec = runtime::make_executor(m.cm, 1);
  runtime::CompiledStages single_stages(*single_exec);
  const std::vector<LayerRange> splits[] = {
      {{0, 1}, {1, 3}}, {{0, 2}, {2, 3}}, {{0, 1}, {1, 2}, {2, 3}}};
  for (const auto& ranges : splits) {
    CAPTURE(ranges.size(), ranges[0].end);
    runtime::Session one(single_stages, m.dims(), m.stage_params);
    ThreadPipeline p(m, ranges);
    runtime::Session& many = *p.session;
    // 21 tokens: a prefill segment of 16 and a prefill_kv one of 5 (through the 8-row variant)
    const auto prompt = ids(21, 1);
    CHECK(many.prefill(prompt, true) == one.prefill(prompt, true));
    for (std::int32_t t : {7, 9, 11})
      CHECK(many.decode(t) == one.decode(t));
    const std::vector<std::int32_t> draft{4, 5, 6};
    CHECK(many.verify(draft) == one.verify(draft)); // through lm_head_b4
    many.truncate(22);
    one.truncate(22);
    CHECK(many.decode(13) == one.decode(13));
    CHECK(many.length() == one.length());
    CHECK(p.pipe->stats().round_trips == 2 + 3 + 1 + 1);
    // greedy generation from a fresh cache, token for token
    many.reset();
    one.reset();
    runtime::GenerateOptions g;
    g.stop.max_new_tokens = 12;
    const auto a = many.generate(ids(5, 2), g), b = one.generate(ids(5, 2), g);
    CHECK(a.tokens == b.tokens);
    CHECK(a.tokens.size() == 12);
  }
}

TEST_CASE("a rank whose layers throw makes rank 0 throw its error, and the pipeline goes on",
          "[pipeline]") {
  const tpullm_test::CompiledLlamaGqa m(tpullm_test::pipeline_test_params());
  auto single_exec = runtime::make_executor(m.cm, 1);
  runtime::CompiledStages single_stages(*single_exec);
  runtime::Session one(single_stages, m.dims(), m.stage_params);
  // rank 1 of 3 fails on its first layer run: the prompt's segment
  ThreadPipeline p(m, {{0, 1}, {1, 2}, {2, 3}}, 1, 1);
  const auto prompt = ids(6, 3);
  CHECK_THROWS_WITH(p.session->prefill(prompt, false),
                    Catch::Contains("pipeline rank 1") &&
                        Catch::Contains("a layer that fails on purpose"));
  // the session did not count the failed segment; the next call runs on every rank
  CHECK(p.session->length() == 0);
  CHECK(p.session->prefill(prompt, false) == one.prefill(prompt, false));
}

TEST_CASE("a session keeps 0 to layers - 1 layers on rank 0", "[pipeline]") {
  const tpullm_test::CompiledLlamaGqa m(tpullm_test::pipeline_test_params());
  auto exec = runtime::make_executor(m.cm, 1);
  runtime::CompiledStages stages(*exec);
  runtime::Session s(stages, m.dims(), m.stage_params);
  struct Fake : runtime::RemoteLayers {
    std::int64_t n;
    explicit Fake(std::int64_t k) : n(k) {}
    std::int64_t local_layers() const override { return n; }
    void submit(const runtime::BlockCall&, std::span<const float>, std::span<const std::int32_t>,
                std::span<const std::int32_t>) override {}
    void collect(std::span<float>) override {}
    std::int64_t in_flight() const override { return 0; }
  } zero(0), all(3);
  s.set_remote_layers(&zero); // tensor parallel: every layer elsewhere
  s.set_remote_layers(nullptr);
  CHECK_THROWS_WITH(s.set_remote_layers(&all), Catch::Contains("rank 0 must run 0 to 2"));
  ThreadHub hub;
  ThreadLink l1(hub, 1, 2);
  CHECK_THROWS_WITH(runtime::LayerPipeline(l1, {{0, 1}, {1, 3}}, 128, 16),
                    Catch::Contains("runs on rank 0"));
  ThreadLink l0(hub, 0, 2);
  CHECK_THROWS_WITH(runtime::LayerPipeline(l0, {{0, 1}, {2, 3}}, 128, 16),
                    Catch::Contains("do not follow"));
}

TEST_CASE("a slot pool over a pipeline answers as one process, micro-batches in flight",
          "[pipeline][slot-pool]") {
  const tpullm_test::CompiledLlamaGqa m(tpullm_test::pipeline_test_params());
  const std::int64_t slots = 4;
  // prompts of one segment, two segments and one token: slots join the decode at other rounds
  const std::vector<std::vector<std::int32_t>> prompts{ids(5, 1), ids(21, 2), ids(1, 3),
                                                       ids(12, 4)};
  const int n = 9;
  auto single_exec = runtime::make_executor(m.cm, 1, slots);
  runtime::SlotPool one(*single_exec, m.dims(), m.stage_params, nullptr);
  std::int64_t micro0 = 0, rows0 = 0;
  int rounds0 = 0;
  std::int64_t most0 = 0;
  const auto want = tpullm_test::answers(one, prompts, n, micro0, rows0, rounds0, most0);
  REQUIRE(want.size() == prompts.size());
  CHECK(micro0 == 0);
  const std::vector<LayerRange> splits[] = {{{0, 1}, {1, 3}}, {{0, 1}, {1, 2}, {2, 3}}};
  for (const auto& ranges : splits)
    for (auto [micro, steps] : {std::pair{1, 1}, {2, 1}, {3, 1}, {1, 3}, {2, 4}}) {
      CAPTURE(ranges.size(), micro, steps);
      ThreadPipeline p(m, ranges, -1, 0, slots);
      runtime::SlotPool pool(*p.execs[0], m.dims(), m.stage_params, nullptr);
      pool.set_remote_layers(p.pipe.get(), micro, steps);
      CHECK(pool.micro_batches() == micro);
      std::int64_t micro_n = 0, rows = 0;
      int rounds = 0;
      std::int64_t most_micro = 0;
      const auto got = tpullm_test::answers(pool, prompts, n, micro_n, rows, rounds, most_micro);
      CHECK(most_micro == micro * steps); // G micro-batches of K steps in a round
      if (steps > 1)                      // rounds of several decode steps each
        CHECK(rounds < rounds0);
      if (micro == 1 && steps == 1) {
        CHECK(got == want); // the same batches as one process: tokens and log-probs, exactly
      } else {
        // Micro-batches are batched decodes of fewer rows (GEMMs of another M, or the one-row
        // stage), and with several steps a round a slot whose prompt ends joins the decode a
        // few steps later, in another batch: each step is computed as one process decoding
        // those rows together would compute it. The same tokens, log-probs within float
        // rounding.
        const double worst = tpullm_test::logprob_gap(want, got);
        UNSCOPED_INFO("largest log-prob difference " << worst);
        CHECK(worst < 1e-5);
      }
      CHECK(rows >= rows0); // a lone generating slot decodes through the pipeline's path too
      // The first round's four prompt segments are in flight together (a slot is in at most one
      // call at a time, so four is the most).
      CHECK(p.pipe->stats().most_in_flight == slots);
      CHECK(micro_n > 0);
      // a second request on a slot reuses its cache on every rank
      runtime::SlotRequest again;
      again.prompt = prompts[1];
      again.prompt.insert(again.prompt.end(), {7, 8, 9});
      again.options.stop.max_new_tokens = 3;
      runtime::SlotRequest fresh = again;
      pool.start(1, again);
      one.start(1, fresh);
      std::vector<std::int32_t> a, b;
      for (int round = 0; round < 50 && (pool.busy() || one.busy()); ++round) {
        for (const auto& e : pool.step().events)
          if (e.token >= 0)
            a.push_back(e.token);
        for (const auto& e : one.step().events)
          if (e.token >= 0)
            b.push_back(e.token);
      }
      CHECK(a == b);
      CHECK(a.size() == 3);
    }
}

TEST_CASE("a slot pool refuses micro-batches and steps outside [1, 64] and a pipeline change while "
          "busy",
          "[pipeline][slot-pool]") {
  const tpullm_test::CompiledLlamaGqa m(tpullm_test::pipeline_test_params());
  ThreadPipeline p(m, {{0, 1}, {1, 3}}, -1, 0, 2);
  runtime::SlotPool pool(*p.execs[0], m.dims(), m.stage_params, nullptr);
  CHECK_THROWS_WITH(pool.set_remote_layers(p.pipe.get(), 0), Catch::Contains("[1, 64]"));
  CHECK_THROWS_WITH(pool.set_remote_layers(p.pipe.get(), 65), Catch::Contains("[1, 64]"));
  CHECK_THROWS_WITH(pool.set_remote_layers(p.pipe.get(), 2, 0), Catch::Contains("[1, 64]"));
  pool.set_remote_layers(p.pipe.get(), 2);
  runtime::SlotRequest r;
  r.prompt = ids(3, 1);
  pool.start(0, r);
  CHECK_THROWS_WITH(pool.set_remote_layers(nullptr), Catch::Contains("while busy"));
  pool.cancel(0);
}
