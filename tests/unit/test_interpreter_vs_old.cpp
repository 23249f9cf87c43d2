// The interpreter on xtensor and Eigen against a frozen copy of the one it replaced
// (old_top_interpreter.hpp): every stage call the generation loop makes in the three golden
// scenarios of every shared checkpoint runs through both on the same inputs, and every f64
// output must agree to 1e-12 of its tensor's largest magnitude (integer outputs exactly).
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "old_top_interpreter.hpp"
#include "tpullm/frontend/goldens.hpp"
#include "tpullm/frontend/make_model.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/interp/top_interpreter.hpp"
#include "tpullm/runtime/interpreter_executor.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/verify/golden_check.hpp"

using namespace tpullm;

namespace {

constexpr double kBound = 1e-12;

/// A StageExecutor that runs each call through the new and the old interpreter, compares their
/// f64 results and hands the new ones on (rounded to f32, as InterpreterExecutor does).
class ComparingExecutor : public runtime::StageExecutor {
public:
  explicit ComparingExecutor(std::vector<ir::Module> modules)
      : modules_(std::move(modules)), store_(std::make_shared<interp::WeightStore>()) {
    for (auto& m : modules_) {
      auto fresh = std::make_shared<interp::TopInterpreter>(m, store_);
      auto old = std::make_shared<old_interp::TopInterpreter>(m);
      for (const auto& f : m.functions()) {
        fresh_[f->name()] = fresh;
        old_[f->name()] = old;
        functions_[f->name()] = f.get();
      }
    }
  }

  bool has_function(const std::string& name) const override { return fresh_.count(name) > 0; }

  void run(const std::string& name, std::span<const runtime::ConstBytes> inputs,
           std::span<const runtime::MutBytes> outputs) override {
    const ir::Function& f = *functions_.at(name);
    std::vector<interp::Tensor> in_new;
    std::vector<old_interp::Tensor> in_old;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const ir::TensorType& t = f.argument(i)->type();
      const std::size_t n = static_cast<std::size_t>(t.num_elements());
      REQUIRE(inputs[i].size() == n * 4);
      if (t.dtype == ir::DType::i32) {
        std::vector<std::int32_t> v(n);
        std::memcpy(v.data(), inputs[i].data(), n * 4);
        in_new.push_back(interp::Tensor::from_i32(t.shape, v));
        in_old.push_back(old_interp::Tensor::from_ints(t.shape, {v.begin(), v.end()}));
      } else {
        std::vector<float> v(n);
        std::memcpy(v.data(), inputs[i].data(), n * 4);
        in_new.push_back(interp::Tensor::from_f32(t.shape, v));
        in_old.push_back(old_interp::Tensor::from_f32(t.shape, v));
      }
    }
    const auto got = fresh_.at(name)->run(name, in_new);
    const auto want = old_.at(name)->run(name, in_old);
    REQUIRE(got.size() == want.size());
    for (std::size_t r = 0; r < got.size(); ++r) {
      INFO("@" << name << " result #" << r);
      REQUIRE(got[r].shape() == want[r].shape());
      REQUIRE(got[r].dtype() == want[r].dtype());
      const bool wanted = r < outputs.size() && !outputs[r].empty();
      if (got[r].is_float()) {
        const auto g = got[r].float_values();
        const auto& w = want[r].floats();
        double diff = 0, scale = 0;
        for (std::size_t i = 0; i < g.size(); ++i) {
          diff = std::max(diff, std::abs(g[i] - w[i]));
          scale = std::max(scale, std::abs(w[i]));
        }
        const double rel = scale > 0 ? diff / scale : diff;
        CHECK(rel <= kBound);
        if (rel > worst_) {
          worst_ = rel;
          worst_where_ = "@" + name;
        }
        if (wanted) {
          const std::vector<float> v = got[r].to_f32();
          REQUIRE(outputs[r].size() == v.size() * 4);
          std::memcpy(outputs[r].data(), v.data(), outputs[r].size());
        }
      } else {
        CHECK(got[r].int_values() == want[r].ints());
        if (wanted) {
          std::vector<std::int32_t> v;
          for (auto x : got[r].int_values())
            v.push_back(static_cast<std::int32_t>(x));
          REQUIRE(outputs[r].size() == v.size() * 4);
          std::memcpy(outputs[r].data(), v.data(), outputs[r].size());
        }
      }
      ++compared_;
    }
  }

  /// Largest max|new - old| / max|old| over every float result so far, and where.
  double worst() const { return worst_; }
  const std::string& worst_where() const { return worst_where_; }
  /// Results compared so far.
  std::int64_t compared() const { return compared_; }

private:
  std::vector<ir::Module> modules_;
  std::shared_ptr<interp::WeightStore> store_;
  std::map<std::string, std::shared_ptr<interp::TopInterpreter>> fresh_;
  std::map<std::string, std::shared_ptr<old_interp::TopInterpreter>> old_;
  std::map<std::string, const ir::Function*> functions_;
  double worst_ = 0;
  std::string worst_where_;
  std::int64_t compared_ = 0;
};

} // namespace

TEST_CASE("the interpreter matches the one it replaced to 1e-12 on every shared checkpoint",
          "[interp][vs-old]") {
  const std::filesystem::path models = std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models";
  const auto name = GENERATE(as<std::string>{}, "llama-gqa", "qwen2-tied-bias", "qwen3-headdim",
                             "llama-gqa-gptq-g32", "qwen2-tied-bias-awq-g32");
  INFO(name);
  const auto d = frontend::load_model(models / name);
  frontend::StageParams p;
  p.seq_length = 512;
  p.max_input_length = 64;
  p.decode_chunk = 128; // decode variants 512, 256, 128
  ComparingExecutor exec(frontend::build_top_modules(d, p));
  runtime::Session session(
      exec, {d.dims.layers, d.dims.hidden, d.dims.kv_heads, d.dims.head_dim, d.dims.vocab}, p);
  // Scenarios a, b (continuing a's cache: prefill_kv) and c (300 tokens: 1 prefill + 4
  // prefill_kv); the goldens must still pass as well.
  for (const auto& r : verify::check_goldens(session, frontend::load_goldens(models / name)))
    CHECK(r.ok);
  // lm_head_greedy (ArgMax) is not on the generation loop's path: run it on a few states.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int k = 0; k < 4; ++k) {
    std::vector<float> h;
    for (std::int64_t i = 0; i < d.dims.hidden; ++i)
      h.push_back(normal(rng));
    std::int32_t token = -1;
    const runtime::ConstBytes in[] = {std::as_bytes(std::span<const float>(h))};
    const runtime::MutBytes out[] = {std::as_writable_bytes(std::span<std::int32_t>(&token, 1))};
    exec.run("lm_head_greedy", in, out);
    CHECK(token >= 0);
  }
  std::printf("interpreter vs old on %s: %lld results, max|new - old| / max|old| = %.3g (%s)\n",
              name.c_str(), static_cast<long long>(exec.compared()), exec.worst(),
              exec.worst_where().c_str());
  CHECK(exec.compared() > 100);
  CHECK(exec.worst() <= kBound);
}

TEST_CASE("a random qwen2.5 layer from make-model keeps activations at a real model's scale",
          "[interp][make-model]") {
  // Checked here rather than in tests/frontend so that only one test file compiles the
  // interpreter for it.
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
  runtime::InterpreterExecutor exec(frontend::build_top_modules(d, p));
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
  // One store for the model: the embedding (read by embedding and the tied lm_head) once, 12
  // tensors of layer 0, the rope cos / sin tables and the final norm.
  CHECK(exec.weights().size() == 16);
  std::filesystem::remove_all(dir);
}
