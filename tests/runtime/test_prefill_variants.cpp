// Prefill length variants: a short prompt segment runs through the smallest compiled
// block_i_P / block_kv_i_P that holds it (not a whole padded max_input_length), with the same
// logits as the padded path within the f32 bound; bundles keep the variant list.
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/bundle_session.hpp"

using namespace tpullm;

namespace {

frontend::StageParams params(std::vector<std::int64_t> chunks) {
  frontend::StageParams p;
  p.seq_length = 128;
  p.max_input_length = 32;
  p.decode_chunks = {64};
  p.prefill_chunks = std::move(chunks);
  return p;
}

/// Records the names of the functions a session runs.
struct Recording : runtime::Stages {
  runtime::Stages& inner;
  std::multiset<std::string> calls;
  explicit Recording(runtime::Stages& e) : inner(e) {}
  void run(const std::string& name, std::span<const runtime::ConstBytes> in,
           std::span<const runtime::MutBytes> out) override {
    calls.insert(name);
    inner.run(name, in, out);
  }
  bool has_function(const std::string& name) const override { return inner.has_function(name); }
  bool owns_kv_cache() const override { return inner.owns_kv_cache(); }
};

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return worst / scale;
}

} // namespace

TEST_CASE("a short segment runs through the smallest prefill variant, same logits",
          "[prefill-variants]") {
  const auto desc =
      frontend::load_model(std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / "llama-gqa");
  compiler::CompileOptions o;
  o.target.cores = 2;
  const auto pv = params({8, 16});
  const auto pp = params({});
  CHECK(pv.prefill_lengths() == std::vector<std::int64_t>{32, 16, 8});
  CHECK(pv.prefill_length_for(5) == 8);
  CHECK(pv.prefill_length_for(9) == 16);
  CHECK(pv.prefill_length_for(17) == 32);
  const auto with = compiler::compile(frontend::build_top_modules(desc, pv), o);
  const auto without = compiler::compile(frontend::build_top_modules(desc, pp), o);
  auto ew = runtime::make_executor(with);
  auto eo = runtime::make_executor(without);
  runtime::CompiledStages sw(*ew), so(*eo);
  Recording rec(sw);
  const auto dims = runtime::session_dims(bundle::make_model_info(desc, pv, "f32"));
  runtime::Session a(rec, dims, pv), b(so, dims, pp);

  // A 5-token prompt: block_i_8 for every layer, never the padded block_i.
  const std::vector<std::int32_t> p1{11, 7, 300, 42, 5};
  const auto la = a.prefill(p1, true), lb = b.prefill(p1, true);
  CHECK(rel_err(la, lb) < 1e-4);
  CHECK(rec.calls.count("block_0_8") == 1);
  CHECK(rec.calls.count("block_1_8") == 1);
  CHECK(rec.calls.count("block_0") == 0);
  for (std::int32_t t : {3, 9}) {
    const auto da = a.decode(t), db = b.decode(t);
    CHECK(rel_err(da, db) < 1e-4);
  }
  // A second turn of 12 tokens onto the kept cache: block_kv_i_16.
  rec.calls.clear();
  const std::vector<std::int32_t> p2{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  CHECK(rel_err(a.prefill(p2, true), b.prefill(p2, true)) < 1e-4);
  CHECK(rec.calls.count("block_kv_0_16") == 1);
  CHECK(rec.calls.count("block_kv_0") == 0);
  // 40 tokens: one whole segment (block_kv_i) and a tail of 8 (block_kv_i_8).
  rec.calls.clear();
  std::vector<std::int32_t> p3(40);
  for (std::size_t i = 0; i < p3.size(); ++i)
    p3[i] = static_cast<std::int32_t>((i * 37 + 5) % 500);
  CHECK(rel_err(a.prefill(p3, false), b.prefill(p3, false)) < 1e-4);
  CHECK(rec.calls.count("block_kv_0") == 1);
  CHECK(rec.calls.count("block_kv_0_8") == 1);

  // The bundle keeps the variants: an engine over it runs the same short path.
  std::ostringstream os;
  bundle::write_bundle(with, bundle::make_model_info(desc, pv, "f32"), os);
  const auto bytes = os.str();
  const auto path = std::filesystem::temp_directory_path() /
                    ("tpullm-test-prefill-variants-" + std::to_string(::getpid()) + ".bundle");
  {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  {
    runtime::BundleSession e(path);
    CHECK(e.bundle().model().params.prefill_lengths() == pv.prefill_lengths());
    CHECK(rel_err(e.session().prefill(p1, true), la) < 1e-6);
  }
  std::filesystem::remove(path);
}

TEST_CASE("prefill variants longer than max_input_length are refused", "[prefill-variants]") {
  auto p = params({64});
  CHECK_THROWS_AS(p.validate(0), Error);
  p.prefill_chunks = {0};
  CHECK_THROWS_AS(p.validate(0), Error);
  p.prefill_chunks = {};
  p.prefill_auto = true;
  CHECK(p.prefill_lengths() == std::vector<std::int64_t>{32, 16});
}

TEST_CASE("verify lengths are prefill variants of 2 to 16 rows", "[prefill-variants]") {
  auto p = params({16});
  p.verify_lengths = {8, 4, 4};
  p.validate(0);
  CHECK(p.prefill_lengths() == std::vector<std::int64_t>{32, 16, 8, 4});
  CHECK(p.prefill_length_for(3) == 4);
  CHECK(p.prefill_length_for(5) == 8);
  for (std::int64_t bad : {1, 0, 17}) {
    p.verify_lengths = {4, bad};
    CHECK_THROWS_AS(p.validate(0), Error);
  }
  p.max_input_length = 8; // no segment is longer than a prefill call
  p.prefill_chunks = {};
  p.verify_lengths = {12};
  CHECK_THROWS_AS(p.validate(0), Error);
  p.verify_lengths = {8, 2};
  p.validate(0);
  CHECK(p.prefill_lengths() == std::vector<std::int64_t>{8, 2});
  p.with_history = false; // a verify call runs through prefill_kv
  CHECK_THROWS_AS(p.validate(0), Error);
}

// Executor profiling: every instruction's time goes to its op kind (ExecStats::op_seconds), the
// kinds add up to the kernel time, and nothing is counted while profiling is off.
TEST_CASE("profiling splits the kernel time by op kind", "[prefill-variants][profiling]") {
  const auto desc =
      frontend::load_model(std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / "llama-gqa");
  compiler::CompileOptions o;
  o.target.cores = 2;
  const auto p = params({8});
  auto ex = runtime::make_executor(compiler::compile(frontend::build_top_modules(desc, p), o));
  runtime::CompiledStages st(*ex);
  const auto dims = runtime::session_dims(bundle::make_model_info(desc, p, "f32"));
  runtime::Session s(st, dims, p);
  (void)s.prefill(std::vector<std::int32_t>{11, 7, 300, 42, 5}, true);
  (void)s.decode(3);
  double off = 0;
  for (double t : ex->stats().op_seconds)
    off += t;
  CHECK(off == 0);
  CHECK(ex->stats().kernel_seconds == 0);

  ex->set_profiling(true);
  for (std::int32_t t : {9, 4, 17})
    (void)s.decode(t);
  const auto& stats = ex->stats();
  double sum = 0;
  for (double t : stats.op_seconds)
    sum += t;
  CHECK(stats.kernel_seconds > 0);
  CHECK(std::abs(sum - stats.kernel_seconds) <= 1e-9 * stats.kernel_seconds);
  auto seconds = [&](ir::OpKind k) { return stats.op_seconds[static_cast<std::size_t>(k)]; };
  CHECK(seconds(ir::OpKind::tpu_FAttention) > 0);
  CHECK(seconds(ir::OpKind::tpu_RMSNorm) > 0);
  CHECK(seconds(ir::OpKind::tpu_MatMul) + seconds(ir::OpKind::tpu_MLP) > 0);
  CHECK(seconds(ir::OpKind::top_MatMul) == 0); // Top ops never run
}
