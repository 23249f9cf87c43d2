// Embeddings (runtime/embeddings.hpp) on the shared checkpoints: a bundle compiled and run
// through the runtime gives, for last-token and mean pooling, the pooled and L2-normalized final
// hidden states the float64 Top interpreter computes for the same prompt (its rows put through
// final_norm here, pooled and normalized in double by the test), within verify's 1e-4 of
// max|ref|; a prompt of several segments; refusals (no final_norm stage, empty prompt, bad
// pooling name).
#include "small_compile.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "error_kind.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/goldens.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/embeddings.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/interpreted_stages.hpp"

using namespace tpullm;
using namespace tpullm::runtime;

namespace {

/// 37 + 23 tokens: more than three 16-token segments (the last through prefill_kv), and
/// within the 64-token sequence.
frontend::StageParams small_params() {
  return tpullm_test::small_params(64, 16, {64});
}

/// The reference: every row's final hidden state from the interpreter, through its final_norm,
/// pooled and normalized in double here.
std::vector<double> reference(InterpretedStages& exec, Session& s,
                              const std::vector<std::int32_t>& prompt, Pooling pooling) {
  const std::int64_t H = s.dims().hidden;
  std::vector<std::vector<float>> rows;
  s.reset();
  s.prefill_hidden(prompt, true, [&](std::int64_t i, std::span<const float> h) {
    CHECK(i == static_cast<std::int64_t>(rows.size()));
    std::vector<float> n(static_cast<std::size_t>(H));
    const ConstBytes in[] = {cbytes(h.data(), H)};
    const MutBytes out[] = {mbytes(n.data(), H)};
    exec.run("final_norm", in, out);
    rows.push_back(std::move(n));
  });
  REQUIRE(rows.size() == prompt.size());
  std::vector<double> v(static_cast<std::size_t>(H), 0.0);
  if (pooling == Pooling::last) {
    std::copy(rows.back().begin(), rows.back().end(), v.begin());
  } else {
    for (const auto& r : rows)
      for (std::size_t j = 0; j < v.size(); ++j)
        v[j] += r[j];
    for (double& x : v)
      x /= static_cast<double>(rows.size());
  }
  double n2 = 0;
  for (double x : v)
    n2 += x * x;
  for (double& x : v)
    x /= std::sqrt(n2);
  return v;
}

} // namespace

TEST_CASE("embeddings of a compiled bundle match the float64 interpreter's normed hidden states",
          "[embeddings][goldens]") {
  const auto name = GENERATE(as<std::string>{}, "llama-gqa", "qwen2-tied-bias");
  INFO(name);
  const auto dir = std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / name;
  const frontend::ModelDesc desc = frontend::load_model(dir);
  const frontend::Goldens g = frontend::load_goldens(dir / "goldens.safetensors");
  std::vector<std::int32_t> prompt = g.a.prompt;
  prompt.insert(prompt.end(), g.b.prompt.begin(), g.b.prompt.end());
  const frontend::StageParams p = small_params();
  REQUIRE(static_cast<std::int64_t>(prompt.size()) > 3 * p.max_input_length);
  REQUIRE(static_cast<std::int64_t>(prompt.size()) <= p.seq_length);
  const SessionDims dims = session_dims(bundle::make_model_info(desc, p, "f32"));

  compiler::CompileOptions co;
  co.target.cores = 2;
  const codegen::CompiledModel cm = compiler::compile(frontend::build_top_modules(desc, p), co);
  auto exec = runtime::make_executor(cm);
  CompiledStages stages(*exec);
  Session s(stages, dims, p);
  InterpretedStages ref_exec(frontend::build_top_modules(desc, p));
  Session ref_s(ref_exec, dims, p);

  for (const Pooling pooling : {Pooling::last, Pooling::mean}) {
    INFO("pooling " << to_string(pooling));
    const std::vector<double> ref = reference(ref_exec, ref_s, prompt, pooling);
    // A conversation already in the session is forgotten: embed() starts from position 0.
    s.reset();
    s.prefill({g.a.prompt.begin(), g.a.prompt.begin() + 10}, false);
    const std::vector<float> got = embed(s, prompt, {pooling, true});
    REQUIRE(got.size() == ref.size());
    CHECK(s.length() == static_cast<std::int64_t>(prompt.size()));
    double max_ref = 0, max_err = 0, n2 = 0;
    for (std::size_t j = 0; j < ref.size(); ++j) {
      max_ref = std::max(max_ref, std::abs(ref[j]));
      max_err = std::max(max_err, std::abs(static_cast<double>(got[j]) - ref[j]));
      n2 += static_cast<double>(got[j]) * got[j];
    }
    INFO("max|err| " << max_err << ", max|ref| " << max_ref);
    CHECK(max_err <= 1e-4 * max_ref);
    CHECK(std::sqrt(n2) == Approx(1.0).epsilon(1e-5));
    // Without normalization: the same direction, its length the pooled vector's.
    const std::vector<float> raw = embed(s, prompt, {pooling, false});
    double raw2 = 0;
    for (float x : raw)
      raw2 += static_cast<double>(x) * x;
    REQUIRE(raw2 > 0);
    for (std::size_t j = 0; j < ref.size(); ++j)
      CHECK(std::abs(raw[j] / std::sqrt(raw2) - ref[j]) <= 1e-4 * max_ref);
  }
  // Last and mean pooling differ for a prompt of several tokens.
  CHECK(embed(s, prompt, {Pooling::last, true}) != embed(s, prompt, {Pooling::mean, true}));
}

TEST_CASE("embeddings are refused without a final_norm stage, for an empty prompt, a bad pooling",
          "[embeddings][neg]") {
  const auto dir = std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / "llama-gqa";
  const frontend::ModelDesc desc = frontend::load_model(dir);
  const frontend::StageParams p = small_params();
  const SessionDims dims = session_dims(bundle::make_model_info(desc, p, "f32"));
  {
    InterpretedStages exec(frontend::build_top_modules(desc, p));
    Session s(exec, dims, p);
    CHECK_THROWS_KIND(embed(s, {}), invalid_input);
    CHECK_THROWS_KIND(embed(s, {1, static_cast<std::int32_t>(dims.vocab)}), invalid_input);
  }
  // A bundle compiled before final_norm existed: its modules without it.
  auto modules = frontend::build_top_modules(desc, p);
  std::erase_if(modules, [](const ir::Module& m) { return m.name() == "final_norm"; });
  InterpretedStages old(std::move(modules));
  Session s(old, dims, p);
  CHECK_THROWS_KIND(embed(s, {1, 2, 3}), unsupported);
  CHECK_THROWS_WITH(embed(s, {1, 2, 3}),
                    Catch::Contains("this bundle has no final_norm stage; recompile it"));
  CHECK(parse_pooling("mean", "--pooling") == Pooling::mean);
  CHECK(parse_pooling("last", "--pooling") == Pooling::last);
  CHECK_THROWS_KIND(parse_pooling("cls", "--pooling"), invalid_input);
}
