// --mode int8 end to end below the CLI: the calibration statistics and thresholds against hand
// computations, the table independent of threads, the static / smoothed attributes surviving a
// bundle (what is written is what is read), and a bundle running to the in-memory logits.
#include "small_compile.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <type_traits>
#include <variant>

#include <unistd.h>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/conversion/calib_stats.hpp"
#include "tpullm/conversion/int8_calib.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/rewrite/op_equivalence.hpp"
#include "tpullm/calibration/calibrate.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/bundle_session.hpp"

using namespace tpullm;
namespace fs = std::filesystem;

namespace {

frontend::StageParams int8_params() {
  return tpullm_test::small_params(64, 16, {64});
}

/// A file in the temporary directory, removed at scope exit.
struct Int8TempFile {
  fs::path path;
  explicit Int8TempFile(const std::string& tag) {
    static int n = 0;
    path = fs::temp_directory_path() /
           ("tpullm-int8-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + tag);
  }
  ~Int8TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

/// Writes `cm` with `info` as a bundle file at `path`.
void write_bundle_file(const codegen::CompiledModel& cm, const bundle::ModelInfo& info,
                       const fs::path& path) {
  std::ofstream f(path, std::ios::binary);
  bundle::write_bundle(cm, info, f);
  REQUIRE(f.good());
}

} // namespace

TEST_CASE("calibration thresholds follow their definitions", "[int8]") {
  // Nearest rank: the ceil(0.9999 * 20000) = 19998th smallest of 1..20000.
  std::vector<float> v(20000);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(v.size() - i); // descending: order must not matter
  CHECK(conversion::percentile_threshold(v) == 19998.0f);
  CHECK(conversion::percentile_threshold({}) == 0.0f);
  // A bulk in [0, 1) and one outlier at 1000: every candidate clips the outlier alike, so KL
  // takes the smallest, 128 bins: (128 + 0.5) * 1000 / 2048; a uniform distribution over
  // [0, 1000] keeps nearly the whole range.
  std::vector<float> bulk;
  for (int i = 0; i < 10000; ++i)
    bulk.push_back(static_cast<float>(i % 1000) / 1000.0f);
  bulk.push_back(1000.0f);
  CHECK(conversion::kl_threshold(bulk, 1000.0f) == Approx(128.5 * 1000 / 2048));
  std::vector<float> uni;
  for (int i = 0; i <= 100000; ++i)
    uni.push_back(static_cast<float>(i) / 100.0f);
  CHECK(conversion::kl_threshold(uni, 1000.0f) > 900.0f);
  CHECK(conversion::kl_threshold(uni, 1000.0f) <= 1000.0f);
}

TEST_CASE("static parameters and smoothing factors by hand", "[int8]") {
  conversion::CalibEntry e{"x", -2.0f, 6.0f, 6.0f, 4.0f, {6.0f, 1.0f}};
  const auto sym = conversion::static_act_params(e, false);
  CHECK(sym.scale == Approx(4.0 / 127));
  CHECK(sym.zero == 0);
  // Asymmetric: [-2, min(6, 4)] over 255 levels; -2 maps to -128.
  const auto asym = conversion::static_act_params(e, true);
  CHECK(asym.scale == Approx(6.0 / 255));
  CHECK(asym.zero == static_cast<int>(std::nearbyint(-128 + 2.0 / (6.0 / 255))));
  // s = x^a / w^(1-a): 16^0.5 / 4^0.5 = 2; a zero channel keeps 1.
  const auto s =
      conversion::smooth_factors(std::vector<float>{16, 0, 9}, std::vector<float>{4, 3, 1}, 0.5);
  CHECK(s[0] == Approx(2.0));
  CHECK(s[1] == 1.0f);
  CHECK(s[2] == Approx(3.0));
  // max(16 / 2, 0, 9 / 3) / 16.
  CHECK(conversion::smoothed_shrink(std::vector<float>{16, 0, 9}, s, 16) == Approx(0.5));
  CHECK_THROWS_AS(conversion::smooth_factors(std::vector<float>{1}, std::vector<float>{1}, 1.0),
                  Error);
  conversion::CalibEntry zero{"z", 0, 0, 0, 0, {0}};
  CHECK_THROWS_WITH(conversion::static_act_params(zero, false),
                    Catch::Contains("is all zero on the calibration samples"));
}

TEST_CASE("calibration: stats of the first input match a direct computation", "[int8]") {
  // layers.0.q reads rms_norm(embedding[ids]) * gamma: computed here from the interpreter-free
  // definition on the checkpoint's own tensors, in double.
  const auto desc = frontend::load_model(tpullm_test::model_dir("llama-gqa"));
  const auto samples = calibration::builtin_calib_samples(desc.dims.vocab, 12, 2);
  calibration::CalibrateOptions o;
  const auto t = calibration::calibrate(desc, int8_params(), samples, o);
  REQUIRE(t.inputs.size() == static_cast<std::size_t>(7 * desc.dims.layers));
  const conversion::CalibEntry* q = t.find("layers.0.q");
  REQUIRE(q != nullptr);
  const std::int64_t H = desc.dims.hidden;
  const auto emb = desc.embedding.tensor().to_f32();
  const auto gamma = desc.layers[0].attn_norm.tensor().to_f32();
  double mn = 1e30, mx = -1e30;
  std::vector<double> ch(static_cast<std::size_t>(H), 0.0);
  for (const auto& s : samples)
    for (std::int32_t id : s) {
      const float* row = emb.data() + static_cast<std::int64_t>(id) * H;
      double ss = 0;
      for (std::int64_t j = 0; j < H; ++j)
        ss += double(row[j]) * row[j];
      const double r = 1.0 / std::sqrt(ss / static_cast<double>(H) + desc.norm_eps);
      for (std::int64_t j = 0; j < H; ++j) {
        const double y = row[j] * r * gamma[static_cast<std::size_t>(j)];
        mn = std::min(mn, y);
        mx = std::max(mx, y);
        ch[static_cast<std::size_t>(j)] = std::max(ch[static_cast<std::size_t>(j)], std::fabs(y));
      }
    }
  CHECK(q->min == Approx(mn).epsilon(1e-5));
  CHECK(q->max == Approx(mx).epsilon(1e-5));
  CHECK(q->threshold == q->absmax); // method max
  REQUIRE(q->channel_absmax.size() == static_cast<std::size_t>(H));
  for (std::int64_t j = 0; j < H; ++j)
    CHECK(q->channel_absmax[static_cast<std::size_t>(j)] ==
          Approx(ch[static_cast<std::size_t>(j)]).epsilon(1e-5));
  // k and v read the same tensor; down reads the wider SwiGLU activation.
  CHECK(t.find("layers.0.k")->channel_absmax == q->channel_absmax);
  CHECK(t.find("layers.0.down")->channel_absmax.size() ==
        static_cast<std::size_t>(desc.dims.intermediate));
  CHECK(t.samples == 2);
  CHECK(t.tokens == 24);
  // The same table on two threads, and for every method its text parses back to itself.
  o.threads = 2;
  CHECK(conversion::format_calib_table(calibration::calibrate(desc, int8_params(), samples, o)) ==
        conversion::format_calib_table(t));
  for (const char* m : {"percentile", "kl"}) {
    o.method = m;
    const auto tm = calibration::calibrate(desc, int8_params(), samples, o);
    const std::string text = conversion::format_calib_table(tm);
    CHECK(conversion::format_calib_table(conversion::parse_calib_table(text, "t")) == text);
    for (const auto& e : tm.inputs)
      CHECK((e.threshold > 0 && e.threshold <= e.absmax));
  }
}

TEST_CASE("calibration in a small weight budget: the same table, the budget kept", "[int8]") {
  const auto desc = frontend::load_model(tpullm_test::model_dir("llama-gqa"));
  REQUIRE(desc.dims.layers >= 2);
  const auto samples = calibration::builtin_calib_samples(desc.dims.vocab, 12, 3);
  calibration::CalibrateStats all;
  calibration::CalibrateOptions o;
  o.stats = &all;
  const std::string want =
      conversion::format_calib_table(calibration::calibrate(desc, int8_params(), samples, o));
  // The default budget holds the tiny model whole: each weight is widened once, and neither
  // the embedding table (gathered by rows) nor the lm_head (not run) is among them.
  CHECK(all.budget_bytes == calibration::kDefaultCalibBudget);
  CHECK(all.peak_bytes < all.budget_bytes);
  const auto emb = static_cast<std::size_t>(desc.dims.vocab * desc.dims.hidden) * 8;
  std::size_t block_bytes = 0;
  for (const auto& l : desc.layers)
    for (const frontend::WeightRef* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      block_bytes += static_cast<std::size_t>(w->tensor().numel()) * 8;
  CHECK(all.peak_bytes >= block_bytes);
  CHECK(all.peak_bytes < block_bytes + emb);
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    // The least budget this run accepts: one layer per thread, so every sample widens every
    // layer again; the table is byte-equal and the store stayed within the budget.
    calibration::CalibrateStats st;
    calibration::CalibrateOptions small;
    small.threads = threads;
    small.stats = &st;
    small.memory_budget = all.min_budget_bytes * static_cast<std::size_t>(threads);
    CHECK(conversion::format_calib_table(
              calibration::calibrate(desc, int8_params(), samples, small)) == want);
    CHECK(st.min_budget_bytes == small.memory_budget);
    CHECK(st.budget_bytes == small.memory_budget);
    CHECK(st.peak_bytes <= small.memory_budget);
    CHECK(st.peak_bytes > 0);
    CHECK(st.materializations > all.materializations);
    // One byte less is refused before any work, naming the minimum.
    small.memory_budget -= 1;
    CHECK_THROWS_WITH(calibration::calibrate(desc, int8_params(), samples, small),
                      Catch::Contains("--memory-budget") &&
                          Catch::Contains("of f64 weights that " + std::to_string(threads) +
                                          " thread(s) use at once"));
  }
}

TEST_CASE("int8 static attributes survive a bundle and run to the in-memory logits", "[int8]") {
  const auto desc = frontend::load_model(tpullm_test::model_dir("qwen3-headdim"));
  calibration::CalibrateOptions co;
  const auto table = calibration::calibrate(
      desc, int8_params(), calibration::builtin_calib_samples(desc.dims.vocab, 16, 2), co);
  Int8TempFile calib(".json");
  std::ofstream(calib.path) << conversion::format_calib_table(table);
  compiler::CompileOptions o;
  o.lower.mode = "int8";
  o.lower.act_quant = "static";
  o.lower.act_asymmetric = true;
  o.lower.smooth_alpha = 0.5;
  o.lower.calib = calib.path.string();
  o.target.cores = 2;
  const auto cm = compiler::compile(frontend::build_top_modules(desc, int8_params()), o);
  const auto info = bundle::make_model_info(desc, int8_params(), "int8");
  Int8TempFile file(".bundle");
  write_bundle_file(cm, info, file.path);
  {
    const auto b = bundle::Bundle::open(file.path);
    REQUIRE(b->programs().size() == cm.programs.size());
    std::size_t static_ops = 0, zero_points = 0;
    for (std::size_t i = 0; i < cm.programs.size(); ++i) {
      REQUIRE(b->programs()[i].instrs.size() == cm.programs[i].instrs.size());
      for (std::size_t k = 0; k < cm.programs[i].instrs.size(); ++k) {
        const auto& got = b->programs()[i].instrs[k].op;
        CHECK(rewrite::attributes_equal(got, cm.programs[i].instrs[k].op));
        if (const auto* m = std::get_if<ir::tpu::MLPOp>(&got)) {
          static_ops += m->act_quant == ir::ActQuantKind::static_tensor && m->down_act_scale;
          zero_points += m->act_zero.has_value();
        }
        if (const auto* m = std::get_if<ir::tpu::MatMulOp>(&got)) {
          static_ops += m->act_quant == ir::ActQuantKind::static_tensor && m->act_scale;
          zero_points += m->act_zero.has_value();
        }
      }
    }
    CHECK(static_ops > 0);
    CHECK(zero_points > 0);
  }
  auto exec = runtime::make_executor(cm);
  runtime::CompiledStages stages(*exec);
  runtime::Session mem(stages, runtime::session_dims(info), int8_params());
  runtime::BundleSession engine(file.path);
  const std::vector<std::int32_t> prompt{1,  5,  9,  2,  7,  3,  8,  4,  6,  10,
                                         11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  const auto a = mem.prefill(prompt, true);
  const auto b = engine.session().prefill(prompt, true);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

namespace {
/// Compiles mixtral-e8k2 with `o` (2 cores), writes the bundle and opens it again, checks that
/// every op's attributes survived the file, and calls f(instruction as read back) on each.
template <class F>
void for_each_instr_through_bundle(compiler::CompileOptions o, F&& f) {
  const auto desc = frontend::load_model(tpullm_test::model_dir("mixtral-e8k2"));
  o.target.cores = 2;
  const auto cm = compiler::compile(frontend::build_top_modules(desc, int8_params()), o);
  Int8TempFile file(".bundle");
  write_bundle_file(cm, bundle::make_model_info(desc, int8_params(), o.lower.mode), file.path);
  const auto b = bundle::Bundle::open(file.path);
  REQUIRE(b->programs().size() == cm.programs.size());
  for (std::size_t i = 0; i < cm.programs.size(); ++i) {
    REQUIRE(b->programs()[i].instrs.size() == cm.programs[i].instrs.size());
    for (std::size_t k = 0; k < cm.programs[i].instrs.size(); ++k) {
      CHECK(rewrite::attributes_equal(b->programs()[i].instrs[k].op, cm.programs[i].instrs[k].op));
      f(b->programs()[i].instrs[k]);
    }
  }
}
} // namespace

TEST_CASE("int8 MoE: every tpu.MoE carries act_quant = dynamic through a bundle", "[int8][moe]") {
  // An attribute lost on the way would still run (int8 experts with f32 activations) inside
  // verify's int8 bound: this checks the op itself, before and after the file.
  compiler::CompileOptions o;
  o.lower.mode = "int8";
  std::size_t moe_ops = 0;
  for_each_instr_through_bundle(o, [&](const auto& in) {
    if (const auto* m = std::get_if<ir::tpu::MoEOp>(&in.op)) {
      ++moe_ops;
      CHECK(m->act_quant == ir::ActQuantKind::dynamic);
    }
  });
  CHECK(moe_ops > 0);
}

TEST_CASE("the quantization plan is built once from the options, with the caller's table",
          "[int8][quant]") {
  conversion::LowerOptions o;
  o.mode = "int8";
  o.act_quant = "static";
  o.calib = (fs::path(TPULLM_TEST_DATA_DIR) / "no-such-calib.json").string();
  const auto table = std::make_shared<const conversion::CalibTable>();
  const conversion::QuantPlan p = conversion::make_quant_plan(o, table);
  CHECK(p.calib == table); // the caller's table: the file is not read
  CHECK(p.linear.w8a8);
  CHECK(p.linear.bits == 8);
  CHECK(p.linear.dtype == ir::DType::bf16);
  CHECK(p.act.static_tensor);
  CHECK_FALSE(p.act.asymmetric);
  CHECK(p.kv_dtype == ir::DType::f16);
  // Without one, the plan loads the file named by calib (here: missing).
  CHECK_THROWS_WITH(conversion::make_quant_plan(o), Catch::Contains("no-such-calib.json"));
  // The rules refuse with the option's name.
  o.act_quant = "per-row";
  CHECK_THROWS_WITH(conversion::make_quant_plan(o, table),
                    Catch::Contains("lower-to-tpu option 'act-quant'") &&
                        Catch::Contains("must be dynamic or static, got 'per-row'"));
  // The same rule, named as a tool's flag: one rule, whoever spells the options.
  CHECK_THROWS_WITH(conversion::plan_quant_options(o, {.flags = true}),
                    Catch::Contains("--act-quant: must be dynamic or static, got 'per-row'"));
  o.act_quant = "static";
  const conversion::QuantPlan flagged = conversion::make_quant_plan(o, table, {.flags = true});
  CHECK_THAT(flagged.moe_refusal(), Catch::StartsWith("--act-quant static does not cover"));
  CHECK_THAT(flagged.quantized_weight_refusal("w"), Catch::StartsWith("--mode int8 quantizes"));
  CHECK(p.moe_refusal().starts_with("act-quant=static does not cover"));
  o.act_quant = "dynamic";
  CHECK(conversion::make_quant_plan(o, table).moe_refusal().empty());
  conversion::LowerOptions w;
  w.mode = "w4a16";
  w.keep_float = "^(?:layers\\.0\\.q|layers\\.1\\.k)$";
  const conversion::QuantPlan q = conversion::make_quant_plan(w);
  CHECK(q.linear.bits == 4);
  CHECK(q.keeps_float("layers.0.q"));
  CHECK(q.keeps_float("layers.1.k"));
  CHECK_FALSE(q.keeps_float("layers.0.k"));
  w.mode = "bf16";
  CHECK_THROWS_WITH(conversion::make_quant_plan(w),
                    Catch::Contains("'keep-float'") &&
                        Catch::Contains("applies only to mode=w8a16 / w4a16 / int8"));
  // A text pipeline builds the plan when it is bound: a missing table is refused before any
  // module is lowered.
  CHECK_THROWS_AS(
      pass::Pipeline::parse("lower-to-tpu{mode=int8,act-quant=static,calib=" + o.calib + "}"),
      pass::PipelineError);
}

TEST_CASE("act-quant dynamic outside mode int8: exactly the linears over integer weights carry "
          "it, through a bundle",
          "[int8][act_int8]") {
  // w8a16 with layer 0's q kept float and the lm_head in bf16 (w8a16's default): those read f32
  // activations; every other MatMul, MLP and MoE (all of its weights integer) rounds to int8.
  compiler::CompileOptions o;
  o.lower.mode = "w8a16";
  o.lower.group_size = 32;
  o.lower.act_quant = "dynamic";
  o.lower.keep_float = "layers\\.0\\.q";
  std::size_t with = 0, without = 0, moe = 0;
  for_each_instr_through_bundle(o, [&](const auto& in) {
    std::visit(
        [&](const auto& op) {
          using Op = std::decay_t<decltype(op)>;
          if constexpr (requires { op.act_quant; }) {
            bool all_int = true; // every packed weight operand integer (the MoE router is f32)
            for (std::size_t j = 1; j < in.operands.size(); ++j) {
              const auto& t = in.operands[j].type;
              const bool router = std::is_same_v<Op, ir::tpu::MoEOp> && j == ir::tpu::MoEOp::router;
              if (t.layout == ir::Layout::panels && !router)
                all_int = all_int && t.quant.has_value();
            }
            INFO(in.where);
            CHECK(op.act_quant.has_value() == all_int);
            if (op.act_quant)
              CHECK(*op.act_quant == ir::ActQuantKind::dynamic);
            (op.act_quant ? with : without) += 1;
            moe += std::is_same_v<Op, ir::tpu::MoEOp> && op.act_quant.has_value();
          }
        },
        in.op);
  });
  CHECK(with > 0);
  CHECK(without > 0); // layer 0's q and the lm_head
  CHECK(moe > 0);
}
