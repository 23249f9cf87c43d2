// Back-end decisions measured on one Qwen2.5-0.5B layer (hidden 896, 14/2 heads, intermediate
// 4864; random weights from the make-model preset, vocabulary cut to 4096 since only the layer
// is timed): a prefill layer (block_0, L = 512) and a decode layer (block_cache_0_1024 at
// position 1000) compiled with and without layer groups, with and without fusions, with the KV
// cache written in place or copied. Prefill is judged against the f32 FMA peak (2 x layer
// parameters FLOP per token), decode against the read ceiling (layer weights + valid KV history
// per token). backend/decode_kernel_share reports the share of the executor's time spent inside
// kernel calls (ExecStats with profiling on): the rest is the executor's own overhead.
#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include <unistd.h>

#include "roofline.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/devtools/make_model.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/executor.hpp"

namespace tpullm::bench {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kPrefillRows = 512, kDecodeVariant = 1024, kDecodePos = 1000;

/// The one-layer checkpoint, written once per process and removed at exit.
struct LayerModel {
  fs::path dir;
  frontend::ModelPreset preset;
  LayerModel() {
    preset = frontend::find_preset("qwen2.5-0.5b");
    preset.layers = 1;
    preset.vocab = 4096;
    preset.bos_token_id.reset();
    preset.eos_token_id.reset();
    dir = fs::temp_directory_path() / ("tpullm-bench-layer-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    frontend::RandomWeights w;
    w.dtype = frontend::DType::bf16;
    frontend::write_random_model(preset, w, dir);
  }
  ~LayerModel() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  /// Weights of the linear layers of one layer (q, k, v, o, gate, up, down).
  double layer_params() const {
    const auto& p = preset;
    return static_cast<double>(p.hidden * (p.heads + 2 * p.kv_heads) * p.head_dim +
                               p.heads * p.head_dim * p.hidden + 3 * p.hidden * p.intermediate);
  }
};

LayerModel& layer_model() {
  static LayerModel m;
  return m;
}

/// A compiled variant with its executor.
struct Variant {
  codegen::CompiledModel model;
  std::unique_ptr<runtime::Executor> exec;
};

Variant& variant(const std::string& name, const compiler::CompileOptions& o) {
  static std::map<std::string, std::unique_ptr<Variant>> cache;
  auto& v = cache[name];
  if (!v) {
    auto& lm = layer_model();
    frontend::StageParams sp;
    sp.seq_length = 2048;
    sp.max_input_length = kPrefillRows;
    sp.decode_chunks = {kDecodeVariant};
    sp.with_history = false;
    v = std::make_unique<Variant>();
    v->model = compiler::compile(frontend::build_top_modules(frontend::load_model(lm.dir), sp), o);
    v->exec = runtime::make_executor(v->model);
  }
  return *v;
}

/// Inputs of program `name`: random activations, positions pos0.., empty spans for the cache.
struct Inputs {
  std::vector<std::vector<std::byte>> storage;
  std::vector<std::span<const std::byte>> spans;
};

Inputs make_inputs(const codegen::Program& p, std::int64_t pos0) {
  Inputs in;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t i = 0; i < p.args.size(); ++i) {
    const auto& a = p.args[i];
    if (a.buffer.region == ir::Region::kv) {
      in.storage.emplace_back();
      continue;
    }
    std::vector<std::byte> b(static_cast<std::size_t>(a.type.byte_size()));
    if (static_cast<std::int64_t>(i) == p.positions_arg) {
      auto* q = reinterpret_cast<std::int32_t*>(b.data());
      for (std::int64_t k = 0; k < a.type.num_elements(); ++k)
        q[k] = static_cast<std::int32_t>(pos0 + k);
    } else if (a.type.dtype == ir::DType::f32) {
      auto* q = reinterpret_cast<float*>(b.data());
      for (std::int64_t k = 0; k < a.type.num_elements(); ++k)
        q[k] = nd(rng);
    }
    in.storage.push_back(std::move(b));
  }
  for (const auto& s : in.storage)
    in.spans.emplace_back(s.data(), s.size());
  return in;
}

compiler::CompileOptions options_of(const std::string& v) {
  compiler::CompileOptions o;
  if (v == "ungrouped")
    o.layer_groups = false;
  else if (v == "grouped_cost_model")
    o.layer_groups = true;
  else if (v == "grouped_64_rows")
    o.tile_rows = 64;
  else if (v == "fused")
    o.fusions = "fuse-add-rmsnorm,fuse-qkv";
  else if (v == "kv_copied")
    o.kv_in_place = false;
  return o;
}

void prefill_layer(benchmark::State& state, const std::string& v) {
  auto& var = variant(v, options_of(v));
  const auto& p = var.exec->program("block_0");
  auto in = make_inputs(p, 0);
  for (auto _ : state)
    var.exec->run("block_0", in.spans);
  report_compute(state, 2 * layer_model().layer_params() * kPrefillRows, 2);
}

void decode_layer(benchmark::State& state, const std::string& v) {
  auto& var = variant(v, options_of(v));
  const std::string name = "block_cache_0_" + std::to_string(kDecodeVariant);
  const auto& p = var.exec->program(name);
  auto in = make_inputs(p, kDecodePos);
  for (auto _ : state)
    var.exec->run(name, in.spans);
  const auto& pr = layer_model().preset;
  const double kv = 2.0 * kDecodePos * static_cast<double>(pr.kv_heads * pr.head_dim * 4);
  report_bandwidth(state, 4 * layer_model().layer_params() + kv, 2);
}

void decode_kernel_share(benchmark::State& state) {
  auto& var = variant("ungrouped", options_of("ungrouped"));
  const std::string name = "block_cache_0_" + std::to_string(kDecodeVariant);
  auto in = make_inputs(var.exec->program(name), kDecodePos);
  var.exec->set_profiling(true);
  var.exec->reset_stats();
  for (auto _ : state)
    var.exec->run(name, in.spans);
  const auto& st = var.exec->stats();
  state.counters["kernel_share"] = st.total_seconds > 0 ? st.kernel_seconds / st.total_seconds : 0;
  state.SetLabel("share of executor time inside kernel calls");
  var.exec->set_profiling(false);
}

const bool registered = [] {
  for (const char* v :
       {"ungrouped", "grouped_cost_model", "grouped_64_rows", "fused", "kv_copied"}) {
    benchmark::RegisterBenchmark(
        ("backend/prefill_layer/qwen2.5-0.5b/" + std::string(v) + "/L:512").c_str(),
        [v](benchmark::State& s) { prefill_layer(s, v); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(
        ("backend/decode_layer/qwen2.5-0.5b/" + std::string(v) + "/S:1024").c_str(),
        [v](benchmark::State& s) { decode_layer(s, v); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("backend/decode_kernel_share/qwen2.5-0.5b/S:1024",
                               decode_kernel_share)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  return true;
}();

} // namespace
} // namespace tpullm::bench
