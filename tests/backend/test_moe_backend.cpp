// The compiled back end on the two shared MoE checkpoints: every function's memory plan and
// layer groups are valid with and without tiles (tpu.MoE stays ungrouped), each expert's weights
// are converted and stored once for every stage that reads them, the router stays f32 in the
// bf16 mode while the experts take bf16, and the bundle holds the same weights.
#include "test_data_dir.hpp"
#include "small_compile.hpp"
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "../cli/hostile.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/memory/plan_memory.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/tiling/layer_group.hpp"

using namespace tpullm;

namespace {

frontend::StageParams moe_params() {
  return tpullm_test::halving_params(128, 32, 64); // decode variants halving down to the last
}

codegen::CompiledModel compile_moe(const frontend::ModelDesc& d, compiler::CompileOptions o = {}) {
  o.target.cores = 2;
  return compiler::compile(frontend::build_top_modules(d, moe_params()), o);
}

codegen::CompiledModel compile_moe(const std::string& name, compiler::CompileOptions o = {}) {
  return compile_moe(
      frontend::load_model(std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / name), o);
}

} // namespace

TEST_CASE("MoE checkpoints: valid plans, tpu.MoE ungrouped", "[backend][plan][moe]") {
  const std::string name = GENERATE(as<std::string>{}, "qwen3moe-e16k4", "mixtral-e8k2");
  const bool tiles = GENERATE(false, true);
  INFO(name << (tiles ? " with 16-row tiles" : ""));
  compiler::CompileOptions o;
  if (tiles)
    o.tile_rows = 16;
  const auto cm = compile_moe(name, o);
  std::int64_t moe_ops = 0, grouped = 0;
  for (const auto& m : cm.modules)
    for (const auto& f : m.functions()) {
      INFO("@" << f->name());
      CHECK(memory::check_memory_plan(*f).empty());
      CHECK(tiling::check_plans(*f, cm.target.local_memory).empty());
      for (const auto& op : f->ops()) {
        grouped += op->plan() && op->plan()->group >= 0 ? 1 : 0;
        if (op->is<ir::tpu::MoEOp>()) {
          ++moe_ops;
          CHECK((!op->plan() || op->plan()->group < 0)); // its grouping is data-dependent
        }
      }
    }
  // qwen3moe: layer 0 sparse, layer 1 dense; mixtral: both sparse. Per sparse layer one MoE in
  // each of block, block_kv and the two decode variants.
  CHECK(moe_ops == (name == "mixtral-e8k2" ? 2 : 1) * 4);
  if (tiles)
    CHECK(grouped > 0);
}

TEST_CASE("MoE weights: converted once, router f32, experts in the mode",
          "[backend][weights][moe]") {
  compiler::CompileOptions o;
  o.lower.mode = "bf16";
  const auto cm = compile_moe("qwen3moe-e16k4", o);
  std::map<std::string, const std::byte*> data;
  std::set<std::string> readers_of_expert;
  for (const auto& m : cm.modules) {
    for (const auto& [name, w] : m.weights()) {
      auto [it, fresh] = data.emplace(name, w.parts.front().bytes.data());
      CHECK(it->second == w.parts.front().bytes.data());
    }
    if (m.find_weight("layers.0.expert.11.down.pbf16"))
      readers_of_expert.insert(m.name());
  }
  CHECK(readers_of_expert ==
        std::set<std::string>{"block_0", "block_kv_0", "block_cache_0_128", "block_cache_0_64"});
  CHECK(cm.conversions == static_cast<std::int64_t>(data.size()));
  // The router is f32 panels; no bf16 copy of it exists; every expert slot is bf16.
  CHECK(data.count("layers.0.router.pf32") == 1);
  CHECK(data.count("layers.0.router.pbf16") == 0);
  std::int64_t experts = 0;
  for (const auto& [name, p] : data)
    if (name.rfind("layers.0.expert.", 0) == 0) {
      ++experts;
      CHECK(name.size() > 6);
      CHECK(name.substr(name.size() - 6) == ".pbf16");
    }
  CHECK(experts == 16 * 3);
  for (const auto& m : cm.modules)
    for (const auto& f : m.functions())
      for (const auto& op : f->ops())
        if (op->is<ir::tpu::MoEOp>()) {
          CHECK(op->operand(1)->type().dtype == ir::DType::f32);
          for (std::size_t i = 2; i < op->num_operands(); ++i)
            CHECK(op->operand(i)->type().dtype == ir::DType::bf16);
        }
}

TEST_CASE("a NaN router logit through the executor is the model's invalid input, not internal",
          "[backend][moe][errors]") {
  // mixtral-e8k2 with layer 1's router weights NaN (as the CLI's hostile corpus has it): the
  // kernel (kernels/moe.hpp) raises ModelValueError, the executor locates it at the instruction
  // and keeps its type and kind.
  namespace fs = std::filesystem;
  fe_test::TempDir t;
  const fs::path src = fs::path(TPULLM_TEST_DATA_DIR) / "models" / "mixtral-e8k2";
  const fs::path dst = t / "moe-nan-router";
  fs::create_directories(dst);
  fs::copy_file(src / "config.json", dst / "config.json");
  hostile::rewrite_safetensors(src / "model.safetensors", dst / "model.safetensors", [](auto& e) {
    auto& g = e.at("model.layers.1.block_sparse_moe.gate.weight");
    REQUIRE(g.dtype == "F32");
    const float nan = NAN;
    for (std::size_t i = 0; i + sizeof nan <= g.bytes.size(); i += sizeof nan)
      std::memcpy(g.bytes.data() + i, &nan, sizeof nan);
  });
  const auto desc = frontend::load_model(dst);
  const auto p = moe_params();
  const auto cm = compile_moe(desc);
  const auto exec = runtime::make_executor(cm, 0, 1);
  runtime::CompiledStages stages(*exec, 0);
  runtime::Session s(stages, runtime::session_dims(bundle::make_model_info(desc, p, "f32")), p);
  const std::vector<std::int32_t> ids{1, 2, 3};
  try {
    (void)s.prefill(ids, false);
    FAIL("a NaN router logit ran through");
  } catch (const ModelValueError& e) {
    CHECK(e.kind() == ErrorKind::invalid_input);
    CHECK_THAT(e.where(), Catch::Contains("block_1") && Catch::Contains("tpu.MoE"));
    CHECK_THAT(e.message(), Catch::Contains("the router logit of row 0, expert 0 is NaN: the "
                                            "model's weights (or the layers before) produce "
                                            "values that are not finite"));
  } catch (const Error& e) {
    FAIL("not a ModelValueError: " << e.what());
  }
}
