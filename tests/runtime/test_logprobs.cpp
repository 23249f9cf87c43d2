// Log probabilities (runtime/logprobs.hpp): against a float64 log-softmax written here on small
// rows, top alternatives in order with ties to lower ids, refusals, and, on a shared checkpoint
// compiled and run through the runtime, the logprobs a Generation reports equal the log-softmax
// of the logits HuggingFace transformers computed in float64 (goldens.safetensors).
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include "error_kind.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/goldens.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/generation.hpp"
#include "tpullm/runtime/logprobs.hpp"

using namespace tpullm;
using namespace tpullm::runtime;

namespace {

/// log softmax(row)[i] in long double, the plain way: log(exp(x_i) / sum exp(x_j)).
double reference_logprob(const std::vector<float>& row, std::size_t i) {
  long double sum = 0;
  for (float x : row)
    sum += std::exp(static_cast<long double>(x));
  return static_cast<double>(std::log(std::exp(static_cast<long double>(row[i])) / sum));
}

} // namespace

TEST_CASE("logprobs are the log-softmax of the row, top alternatives best first", "[logprobs]") {
  const std::vector<float> row = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  const TokenLogprobs lp = token_logprobs(row, 4, 3);
  CHECK(lp.chosen.token == 4);
  CHECK(lp.chosen.logprob == Approx(reference_logprob(row, 4)).epsilon(1e-12));
  REQUIRE(lp.top.size() == 3);
  CHECK(lp.top[0].token == 1); // the tie at 3.0 goes to the lower id first
  CHECK(lp.top[1].token == 3);
  CHECK(lp.top[2].token == 0);
  for (const auto& t : lp.top)
    CHECK(t.logprob == Approx(reference_logprob(row, static_cast<std::size_t>(t.token))));
  double mass = 0;
  for (std::size_t i = 0; i < row.size(); ++i)
    mass += std::exp(token_logprobs(row, static_cast<std::int32_t>(i), 0).chosen.logprob);
  CHECK(mass == Approx(1.0).epsilon(1e-12));
  CHECK(token_logprobs(row, 0, 0).top.empty());
  CHECK(token_logprobs(row, 0, 20).top.size() == row.size()); // at most the vocabulary
}

TEST_CASE("logprobs stay finite for large logits and are -inf for -inf logits", "[logprobs]") {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> row = {1000.0f, 999.0f, ninf};
  const TokenLogprobs lp = token_logprobs(row, 1, 2);
  CHECK(lp.chosen.logprob == Approx(-1.0 - std::log1p(std::exp(-1.0))));
  CHECK(lp.top[0].logprob == Approx(-std::log1p(std::exp(-1.0))));
  CHECK(token_logprobs(row, 2, 0).chosen.logprob == -std::numeric_limits<double>::infinity());
}

TEST_CASE("logprobs refuse bad rows, tokens and counts", "[logprobs][neg]") {
  const std::vector<float> row = {0.0f, 1.0f};
  CHECK_THROWS_KIND(token_logprobs(std::vector<float>{}, 0, 0), invalid_input);
  CHECK_THROWS_KIND(token_logprobs(row, 2, 0), invalid_input);
  CHECK_THROWS_KIND(token_logprobs(row, -1, 0), invalid_input);
  CHECK_THROWS_KIND(token_logprobs(row, 0, 21), invalid_input);
  CHECK_THROWS_KIND(token_logprobs(std::vector<float>{0.0f, std::nanf("")}, 0, 0), invalid_input);
  const float ninf = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_KIND(token_logprobs(std::vector<float>{ninf, ninf}, 0, 0), invalid_input);
  GenerateOptions o;
  o.logprobs = 21;
  CHECK_THROWS_KIND(Generation(o, nullptr, {}), invalid_input);
}

TEST_CASE("a Generation's logprobs match the log-softmax of transformers' float64 logits",
          "[logprobs][goldens]") {
  const auto dir = std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / "llama-gqa";
  const frontend::ModelDesc desc = frontend::load_model(dir);
  const frontend::Goldens g = frontend::load_goldens(dir / "goldens.safetensors");
  frontend::StageParams p;
  p.seq_length = 64;
  p.max_input_length = 48;
  p.decode_chunks = {64};
  compiler::CompileOptions co;
  co.target.cores = 2;
  const codegen::CompiledModel cm = compiler::compile(frontend::build_top_modules(desc, p), co);
  auto exec = runtime::make_executor(cm);
  CompiledStages stages(*exec);
  Session s(stages, session_dims(bundle::make_model_info(desc, p, "f32")), p);
  const std::vector<float> logits = s.prefill(g.a.prompt, false);

  GenerateOptions o;
  o.logprobs = 20;
  o.stop.max_new_tokens = 4;
  Generation gen(o, nullptr, g.a.prompt);
  const GenerationStep step = gen.step(logits, s.length(), p.seq_length);
  REQUIRE(step.logprobs);
  CHECK(step.token == g.a.decode_tokens[0]);

  // The oracle: log-softmax in long double of the golden row (float64 logits from transformers).
  const auto golden = g.a.prefill_logits.row(g.a.prefill_logits.rows - 1);
  const std::vector<float> grow(golden.begin(), golden.end());
  float scale = 0;
  for (float x : grow)
    scale = std::max(scale, std::abs(x));
  // Our logits match the golden ones within 1e-4 of max|golden| (verify's criterion); a
  // log-softmax moves by at most twice a uniform logit error.
  const double tol = 2e-4 * scale;
  CHECK(step.logprobs->chosen.logprob ==
        Approx(reference_logprob(grow, static_cast<std::size_t>(step.token))).margin(tol));
  REQUIRE(step.logprobs->top.size() == 20);
  CHECK(step.logprobs->top[0].token == step.token);
  for (const auto& t : step.logprobs->top) {
    INFO("token " << t.token);
    CHECK(t.logprob ==
          Approx(reference_logprob(grow, static_cast<std::size_t>(t.token))).margin(tol));
  }
  for (std::size_t i = 1; i < step.logprobs->top.size(); ++i)
    CHECK(step.logprobs->top[i - 1].logprob >= step.logprobs->top[i].logprob);
  // accept() has no row: no logprobs.
  CHECK_FALSE(gen.accept(g.a.decode_tokens[1], s.length() + 1, p.seq_length).logprobs);
}
