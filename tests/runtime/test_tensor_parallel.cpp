// Tensor parallelism (runtime/tensor_parallel.hpp) with threads as ranks: each test checkpoint
// compiled as a tensor-parallel bundle over 2 ranks (frontend/tensor_parallel.hpp) runs a
// Session whose every layer is split over the ranks, against a single process over the ordinary
// bundle: logits within 1e-4 x max|logit| (the sums run in another order) through prefill,
// prefill_kv, decode, verify and truncation, the same greedy tokens, and a slot pool's batched
// decode likewise; a rank whose half throws makes rank 0 throw its error, naming the rank, and
// the next call runs.
#include "pipeline_test_params.hpp"
#include "slot_answers.hpp"
#include "small_compile.hpp"
#include "thread_link.hpp"
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <thread>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/frontend/tensor_parallel.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/layer_split.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/runtime/slot_pool.hpp"
#include "tpullm/runtime/tensor_parallel.hpp"

using namespace tpullm;
using tpullm_test::FailingStages;
using tpullm_test::ThreadHub;
using tpullm_test::ThreadLink;

namespace {

/// A checkpoint compiled twice in memory (1 core): as one process's bundle and split over
/// `ranks` ranks.
struct TwoWays {
  TwoWays(const std::string& name, std::int64_t ranks)
      : desc(frontend::load_model(tpullm_test::model_dir(name))),
        params(tpullm_test::pipeline_test_params()) {
    compiler::CompileOptions o;
    o.target.cores = 1;
    one = compiler::compile(frontend::build_top_modules(desc, params), o);
    split = compiler::compile(frontend::build_tensor_parallel_modules(desc, params, ranks), o);
    dims = runtime::session_dims(bundle::make_model_info(desc, params, "f32"));
  }
  frontend::ModelDesc desc;
  frontend::StageParams params;
  codegen::CompiledModel one, split;
  runtime::SessionDims dims;
};

/// Rank 0's session over threads as the other ranks (each its own executor over the split
/// bundle), their loops running until it ends; the stages of every rank in `fail_ranks` throw on
/// their `fail_at`-th run.
struct ThreadTensor {
  ThreadHub hub;
  std::vector<std::unique_ptr<runtime::Executor>> execs;
  std::vector<std::unique_ptr<runtime::CompiledStages>> stages;
  std::vector<std::unique_ptr<ThreadLink>> links;
  std::vector<std::unique_ptr<FailingStages>> failing; ///< by rank (null: runs as compiled)
  std::vector<std::thread> threads;
  std::unique_ptr<runtime::TensorParallelLayers> tp;
  std::unique_ptr<runtime::Session> session;

  ThreadTensor(const TwoWays& m, int ranks, std::vector<int> fail_ranks = {}, int fail_at = 0,
               std::int64_t slots = 1) {
    for (int r = 0; r < ranks; ++r) {
      execs.push_back(runtime::make_executor(m.split, 1, slots));
      stages.push_back(std::make_unique<runtime::CompiledStages>(*execs.back()));
      links.push_back(std::make_unique<ThreadLink>(hub, r, ranks));
    }
    failing.resize(static_cast<std::size_t>(ranks));
    for (const int r : fail_ranks)
      failing[static_cast<std::size_t>(r)] =
          std::make_unique<FailingStages>(*stages[static_cast<std::size_t>(r)], fail_at);
    auto stages_of = [&](int r) -> runtime::Stages& {
      const auto i = static_cast<std::size_t>(r);
      return failing[i] ? static_cast<runtime::Stages&>(*failing[i]) : *stages[i];
    };
    for (int r = 1; r < ranks; ++r)
      threads.emplace_back([this, r, &m, &s = stages_of(r)] {
        (void)runtime::serve_tensor_rank(*links[static_cast<std::size_t>(r)], s, m.dims, m.params);
      });
    tp = std::make_unique<runtime::TensorParallelLayers>(*links[0], stages_of(0), m.dims, m.params);
    session = std::make_unique<runtime::Session>(*stages[0], m.dims, m.params);
    session->set_remote_layers(tp.get());
  }
  ~ThreadTensor() {
    session.reset();
    tp.reset(); // tells the other ranks to stop
    for (auto& t : threads)
      t.join();
  }
};

std::vector<std::int32_t> ids(std::int32_t n, std::int32_t seed, std::int64_t vocab) {
  return tpullm_test::test_ids(n, seed, vocab);
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  return tpullm_test::max_rel_diff(a, b);
}

} // namespace

TEST_CASE("tensor parallel over 2 ranks gives one process's logits within 1e-4 of their scale",
          "[tensor-parallel]") {
  for (const char* name : {"llama-gqa", "qwen2-tied-bias", "qwen3-headdim"}) {
    CAPTURE(name);
    const TwoWays m(name, 2);
    auto single_exec = runtime::make_executor(m.one, 1);
    runtime::CompiledStages single_stages(*single_exec);
    runtime::Session one(single_stages, m.dims, m.params);
    ThreadTensor t(m, 2);
    runtime::Session& many = *t.session;
    double worst = 0;
    auto close = [&](const std::vector<float>& a, const std::vector<float>& b) {
      const double e = rel(a, b);
      worst = std::max(worst, e);
      CHECK(e < 1e-4);
    };
    // 21 tokens: a prefill segment of 16 and a prefill_kv one of 5 (through the 8-row variant)
    const auto prompt = ids(21, 1, m.dims.vocab);
    close(many.prefill(prompt, true), one.prefill(prompt, true));
    for (std::int32_t x : {7, 9, 11})
      close(many.decode(x), one.decode(x));
    const std::vector<std::int32_t> draft{4, 5, 6};
    close(many.verify(draft), one.verify(draft)); // through lm_head_b4
    many.truncate(22);
    one.truncate(22);
    close(many.decode(13), one.decode(13));
    UNSCOPED_INFO(name << ": largest difference " << worst << " of max|logit|");
    // 2 segments, 3 decodes, 1 verify segment, 1 decode: two all-reduces a layer each
    const auto& st = t.tp->stats();
    CHECK(st.calls == 7);
    CHECK(st.all_reduces == 7 * 2 * m.dims.layers);
    // the lm_head: every prompt row, 3 + 1 decodes, the verify rows in one call of 4
    CHECK(st.head_calls == 21 + 4 + 1);
    CHECK(st.bytes_sent > 0);
    // greedy generation from a fresh cache, token for token
    many.reset();
    one.reset();
    runtime::GenerateOptions g;
    g.stop.max_new_tokens = 12;
    const auto a = many.generate(ids(5, 2, m.dims.vocab), g);
    const auto b = one.generate(ids(5, 2, m.dims.vocab), g);
    CHECK(a.tokens == b.tokens);
    CHECK(a.tokens.size() == 12);
  }
}

TEST_CASE("a slot pool over tensor parallel answers as one process, batched decode included",
          "[tensor-parallel][slot-pool]") {
  const TwoWays m("llama-gqa", 2);
  const std::int64_t slots = 4;
  const std::vector<std::vector<std::int32_t>> prompts{
      ids(5, 1, m.dims.vocab), ids(21, 2, m.dims.vocab), ids(1, 3, m.dims.vocab),
      ids(12, 4, m.dims.vocab)};
  // Four slots decoded together: the batched stage's halves and lm_head slices.
  auto run = [&](runtime::SlotPool& pool) {
    std::int64_t micro = 0, rows = 0, most = 0;
    int rounds = 0;
    auto got = tpullm_test::answers(pool, prompts, 9, micro, rows, rounds, most);
    CHECK(rows > static_cast<std::int64_t>(rounds)); // rounds of several rows
    return got;
  };
  auto single_exec = runtime::make_executor(m.one, 1, slots);
  runtime::SlotPool one(*single_exec, m.dims, m.params, nullptr);
  const auto want = run(one);
  ThreadTensor t(m, 2, {}, 0, slots);
  runtime::SlotPool pool(*t.execs[0], m.dims, m.params, nullptr);
  pool.set_remote_layers(t.tp.get(), 1, 1);
  const double worst = tpullm_test::logprob_gap(want, run(pool));
  UNSCOPED_INFO("largest log-prob difference " << worst);
  CHECK(worst < 1e-4);
}

TEST_CASE("a tensor-parallel rank whose half throws makes rank 0 throw its error, and the run "
          "goes on",
          "[tensor-parallel]") {
  auto single_exec = runtime::make_executor(TwoWays("llama-gqa", 2).one, 1);
  runtime::CompiledStages single_stages(*single_exec);
  // The failing ranks throw on their third half: layer 1's attention of the first segment. With
  // ranks 0 and 1 failing at once, rank 0 throws its own error and still takes rank 1's (else
  // the next call's all-reduce would read it as rank 1's values); on 4 ranks, 1 and 3 fail
  // together and the lower one's error is thrown.
  const std::vector<std::pair<int, std::vector<int>>> cases{
      {2, {1}}, {2, {0}}, {2, {0, 1}}, {4, {1, 3}}};
  for (const auto& [ranks, fail] : cases) {
    CAPTURE(ranks, fail);
    const TwoWays m("llama-gqa", ranks);
    runtime::Session one(single_stages, m.dims, m.params);
    const auto prompt = ids(6, 3, m.dims.vocab);
    const auto want = one.prefill(prompt, false);
    ThreadTensor t(m, ranks, fail, 3);
    CHECK_THROWS_WITH(t.session->prefill(prompt, false),
                      Catch::Contains("tensor parallel rank " + std::to_string(fail.front())) &&
                          Catch::Contains("a layer that fails on purpose"));
    CHECK(t.session->length() == 0); // the failed segment was not counted
    CHECK(rel(t.session->prefill(prompt, false), want) < 1e-4);
    CHECK(rel(t.session->decode(7), one.decode(7)) < 1e-4); // and the call after it
  }
}

TEST_CASE("tensor parallel needs rank 0, 2 ranks and stages that keep their cache",
          "[tensor-parallel]") {
  const TwoWays m("llama-gqa", 2);
  auto exec = runtime::make_executor(m.split, 1);
  runtime::CompiledStages stages(*exec);
  ThreadHub hub;
  ThreadLink l1(hub, 1, 2), alone(hub, 0, 1);
  CHECK_THROWS_WITH(runtime::TensorParallelLayers(l1, stages, m.dims, m.params),
                    Catch::Contains("runs on rank 0"));
  CHECK_THROWS_WITH(runtime::TensorParallelLayers(alone, stages, m.dims, m.params),
                    Catch::Contains("needs 2 ranks or more"));
}

TEST_CASE("a tensor-parallel rank holds its own shards, the layers' shared weights and, on rank "
          "0, the rest",
          "[tensor-parallel]") {
  CHECK(frontend::tp_weight_rank("layers.3.q.tp1.pf32") == 1); // the lowering's part after it
  CHECK(frontend::tp_weight_rank("layers.3.q.tp12") == 12);
  CHECK(frontend::tp_weight_rank("layers.3.attn_norm") == -1);
  CHECK(frontend::tp_weight_rank("layers.3.q.tpx.pf32") == -1);
  CHECK(frontend::tp_weight_rank("layers.3.q.tp1x") == -1);
  CHECK(frontend::tp_weight_rank("embedding.tp1.pbf16") == 1); // a slice of the lm_head
  const runtime::LayerRange all{0, 3};
  CHECK(runtime::rank_holds("layers.0.q.tp1.pf32", all, false, 1));
  CHECK_FALSE(runtime::rank_holds("layers.0.q.tp1.pf32", all, true, 0));
  CHECK(runtime::rank_holds("layers.0.attn_norm", all, false, 1));
  CHECK(runtime::rank_holds("embedding", all, true, 0));
  CHECK_FALSE(runtime::rank_holds("embedding", all, false, 1));
  CHECK(runtime::rank_holds("lm_head.tp1.pbf16", all, false, 1)); // its slice of the head
  CHECK_FALSE(runtime::rank_holds("lm_head.tp1.pbf16", all, true, 0));
  CHECK(runtime::rank_holds("lm_head.tp0.pbf16", all, true, 0));
  CHECK(runtime::rank_holds("layers.0.q.tp1.pf32", all, true, -1)); // one process: every shard
  CHECK_FALSE(runtime::rank_holds("layers.0.q.tp1.pf32", {1, 3}, false, 1));
}
