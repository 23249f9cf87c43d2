// Batched decode (runtime/batched_decode.hpp): several conversations, each on its own KV slot of
// one executor at its own history length, decode one step together through block_cache_i_S_bB
// with the same argmax and logits within the f32 bound (1e-4 x max|logit|, docs/guarantees.md)
// as each conversation decoding alone through the unbatched stages.
#include "small_compile.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/kernels/sampling.hpp"
#include "tpullm/runtime/batched_decode.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/bundle_session.hpp"

using namespace tpullm;

namespace {

frontend::StageParams batched_params() {
  return tpullm_test::small_params(128, 32, {64}, {1, 2, 4});
}

std::vector<std::int32_t> prompt(std::size_t n, std::size_t seed) {
  return tpullm_test::test_ids(n, seed);
}

/// N conversations on the KV slots of one executor.
struct Conversations {
  std::unique_ptr<runtime::Executor> exec;
  std::vector<std::unique_ptr<runtime::CompiledStages>> stages;
  std::vector<std::unique_ptr<runtime::Session>> sessions;
  Conversations(const codegen::CompiledModel& cm, const runtime::SessionDims& dims,
                const frontend::StageParams& p, int n)
      : exec(runtime::make_executor(cm, 0, n)) {
    for (int i = 0; i < n; ++i) {
      stages.push_back(std::make_unique<runtime::CompiledStages>(*exec, i));
      sessions.push_back(std::make_unique<runtime::Session>(*stages.back(), dims, p));
    }
  }
};

} // namespace

TEST_CASE("batched decode equals each conversation decoding alone", "[batched-decode]") {
  // GQA; q/k norms and a head_dim of its own; biases and a tied head; routed experts; 4-bit GPTQ
  // weights (the batched linear is a GEMM over the packed panels); a sliding window of 8 keys
  // (each row starts at its own window).
  const std::string model = GENERATE("llama-gqa", "qwen3-headdim", "qwen2-tied-bias",
                                     "qwen3moe-e16k4", "llama-gqa-gptq-g32", "llama-gqa window 8");
  INFO("model " << model);
  const bool windowed = model == "llama-gqa window 8";
  auto desc = frontend::load_model(std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" /
                                   (windowed ? "llama-gqa" : model));
  if (windowed)
    desc.sliding_windows.assign(static_cast<std::size_t>(desc.dims.layers), 8);
  compiler::CompileOptions o;
  o.target.cores = 2;
  const auto p = batched_params();
  CHECK(p.decode_batch_sizes() == std::vector<std::int64_t>{2, 4});
  const auto cm = compiler::compile(frontend::build_top_modules(desc, p), o);
  const auto dims = runtime::session_dims(bundle::make_model_info(desc, p, "f32"));

  // Three conversations at different history lengths, across both decode lengths (64, 128).
  const std::vector<std::size_t> lengths{5, 40, 70};
  Conversations batched(cm, dims, p, 3), alone(cm, dims, p, 3);
  std::vector<std::int32_t> next(3);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto pr = prompt(lengths[i], i);
    const auto lb = batched.sessions[i]->prefill(pr, false);
    const auto la = alone.sessions[i]->prefill(pr, false);
    CHECK(tpullm_test::row_rel_err(lb, la) <
          1e-6); // the same single-slot programs, on different slots
    next[i] = static_cast<std::int32_t>(kernels::argmax(std::span<const float>(la)));
  }
  runtime::BatchedDecoder dec(*batched.exec, dims, p);
  CHECK(dec.batches() == std::vector<std::int64_t>{1, 2, 4});
  CHECK(dec.batch_for(3) == 4);
  CHECK(dec.batch_for(9) == 4);

  const auto V = static_cast<std::size_t>(dims.vocab);
  for (int step = 0; step < 4; ++step) {
    // Step 0: all three (batch 4, one padding row); then two (batch 2); then one alone.
    std::vector<std::size_t> who = step < 2    ? std::vector<std::size_t>{0, 1, 2}
                                   : step == 2 ? std::vector<std::size_t>{2, 0}
                                               : std::vector<std::size_t>{1};
    std::vector<runtime::DecodeRow> rows;
    for (auto i : who)
      rows.push_back({batched.sessions[i].get(), static_cast<std::int32_t>(i), next[i]});
    const auto logits = dec.decode(rows);
    REQUIRE(logits.size() == who.size() * V);
    for (std::size_t r = 0; r < who.size(); ++r) {
      const std::size_t i = who[r];
      const auto ref = alone.sessions[i]->decode(next[i]);
      const std::span<const float> got(logits.data() + r * V, V);
      INFO("step " << step << " conversation " << i << " at length "
                   << alone.sessions[i]->length());
      CHECK(tpullm_test::row_rel_err(got, ref) < 1e-4);
      const auto want = kernels::argmax(std::span<const float>(ref));
      CHECK(kernels::argmax(got) == want);
      CHECK(batched.sessions[i]->length() == alone.sessions[i]->length());
      next[i] = static_cast<std::int32_t>(want);
    }
  }
  // After batched steps, each conversation's cache is what decoding alone wrote: a prefill onto
  // it gives the same logits.
  for (std::size_t i = 0; i < 3; ++i) {
    const auto more = prompt(3, 7 + i);
    CHECK(tpullm_test::row_rel_err(batched.sessions[i]->prefill(more, false),
                                   alone.sessions[i]->prefill(more, false)) < 1e-4);
  }
}

TEST_CASE("batched decode refuses bad rows", "[batched-decode]") {
  const auto desc =
      frontend::load_model(std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / "llama-gqa");
  compiler::CompileOptions o;
  o.target.cores = 2;
  const auto p = batched_params();
  const auto cm = compiler::compile(frontend::build_top_modules(desc, p), o);
  const auto dims = runtime::session_dims(bundle::make_model_info(desc, p, "f32"));
  Conversations c(cm, dims, p, 2);
  for (auto& s : c.sessions)
    s->prefill(prompt(4, 1), false);
  runtime::BatchedDecoder dec(*c.exec, dims, p);
  const runtime::DecodeRow same[] = {{c.sessions[0].get(), 0, 1}, {c.sessions[1].get(), 0, 2}};
  CHECK_THROWS_AS(dec.decode(same), Error);
  const runtime::DecodeRow bad_id[] = {{c.sessions[0].get(), 0, -1}, {c.sessions[1].get(), 1, 2}};
  CHECK_THROWS_AS(dec.decode(bad_id), Error);
  const runtime::DecodeRow bad_slot[] = {{c.sessions[0].get(), 0, 1}, {c.sessions[1].get(), 5, 2}};
  CHECK_THROWS_AS(dec.decode(bad_slot), Error);
  // A batched program run without a slot per row is refused by the executor.
  const auto id = c.exec->program_id(frontend::StageNames::block_cache(0, 64, 2));
  std::vector<float> h(static_cast<std::size_t>(2 * dims.hidden));
  std::vector<std::int32_t> pos{4, 4};
  const runtime::ConstBytes in[4] = {std::as_bytes(std::span<const float>(h)),
                                     std::as_bytes(std::span<const std::int32_t>(pos)),
                                     {},
                                     {}};
  CHECK_THROWS_AS(c.exec->run(id, in, {}), Error);
  // A bundle without batched variants has only batch 1.
  auto p1 = p;
  p1.decode_batches = {};
  const auto cm1 = compiler::compile(frontend::build_top_modules(desc, p1), o);
  auto e1 = runtime::make_executor(cm1, 0, 2);
  CHECK(!runtime::BatchedDecoder(*e1, dims, p1).batched());
  p1.decode_batches = {0};
  CHECK_THROWS_AS(p1.validate(0), Error);
}
