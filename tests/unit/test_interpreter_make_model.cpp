// A random qwen2.5 layer from make-model through the Top interpreter: activations stay at a real
// model's scale and the weight store holds each tensor once. (Kept here rather than in
// tests/frontend so that only the unit tests compile the interpreter for it.)
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "tpullm/devtools/make_model.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/interpreted_stages.hpp"
#include "tpullm/runtime/session.hpp"

using namespace tpullm;

TEST_CASE("a random qwen2.5 layer from make-model keeps activations at a real model's scale",
          "[interp][make-model]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tpullm-make-model-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  frontend::ModelPreset q = frontend::find_preset("qwen2.5-0.5b");
  q.layers = 1;
  q.vocab = 256;
  frontend::write_random_model(q, {7, frontend::DType::bf16, 0.02}, dir);
  const auto d = frontend::load_model(dir);
  frontend::StageParams p;
  p.seq_length = 16;
  p.max_input_length = 8;
  p.decode_chunk = 0;
  p.with_history = false;
  runtime::InterpretedStages exec(frontend::build_top_modules(d, p));
  runtime::Session s(exec, {1, 896, 2, 64, 256}, p);
  const auto logits = s.prefill({3, 1, 4, 1, 5, 9, 2, 6}, true);
  REQUIRE(logits.size() == 8 * 256);
  double sum2 = 0;
  for (float x : logits) {
    REQUIRE(std::isfinite(x));
    sum2 += static_cast<double>(x) * x;
  }
  const double rms = std::sqrt(sum2 / static_cast<double>(logits.size()));
  INFO("logits rms " << rms);
  CHECK(rms > 0.05);
  CHECK(rms < 20);
  // One store for the model: the embedding (the tied lm_head's matrix; the embedding stage
  // only gathers its rows), 12 tensors of layer 0 and the final norm. The rope cos / sin
  // tables are only gathered by rows, never stored.
  CHECK(exec.weights().size() == 14);
  std::filesystem::remove_all(dir);
}
