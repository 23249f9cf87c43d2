// The compiled back end on the shared checkpoints: every function's memory plan and layer groups
// are valid (and the checkers catch planted faults), a weight is converted and stored once for
// all the stage functions that read it, the greedy lm_head fusion agrees with lm_head + argmax,
// and the executor refuses bad inputs with clear errors.
#include "test_data_dir.hpp"
#include "small_compile.hpp"
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/ir/text/printer.hpp"
#include "tpullm/kernels/worker_pool.hpp"
#include "tpullm/memory/plan_memory.hpp"
#include "tpullm/runtime/executor.hpp"
#include "tpullm/runtime/stages.hpp"
#include "tpullm/tiling/layer_group.hpp"

using namespace tpullm;

namespace {

const char* const kModels[] = {"llama-gqa", "qwen2-tied-bias", "qwen3-headdim",
                               "llama-gqa-gptq-g32", "qwen2-tied-bias-awq-g32"};

std::filesystem::path model_dir(const std::string& name) {
  return std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / name;
}

frontend::StageParams small_params() {
  return tpullm_test::halving_params(128, 32, 32); // decode variants halving down to the last
}

codegen::CompiledModel compile(const std::string& name, compiler::CompileOptions o = {}) {
  const auto d = frontend::load_model(model_dir(name));
  o.target.cores = 2;
  return compiler::compile(frontend::build_top_modules(d, small_params()), o);
}

/// Every buffer lies inside its region, checked from the Program alone.
void check_regions(const codegen::Program& p, const runtime::KvGeometry& kv) {
  INFO("@" << p.name);
  const ir::MemoryInfo& mem = *p.info.memory;
  auto check_ref = [&](const codegen::TensorRef& r) {
    const ir::Buffer& b = r.buffer;
    CHECK(b.offset >= 0);
    CHECK(b.size >= 0);
    switch (b.region) {
    case ir::Region::arena:
      CHECK(b.end() <= mem.arena);
      break;
    case ir::Region::local:
      CHECK(b.end() <= mem.local);
      break;
    case ir::Region::kv:
      CHECK(b.end() + (kv.capacity - 1) * b.pos_stride <= kv.bytes() + b.size);
      CHECK(b.offset / (kv.capacity * kv.row_bytes) ==
            (b.end() - 1) / (kv.capacity * kv.row_bytes)); // one layer's cache
      break;
    case ir::Region::input:
      CHECK(b.slot < static_cast<std::int64_t>(p.args.size()));
      CHECK(b.end() <= p.args[static_cast<std::size_t>(b.slot)].type.byte_size());
      break;
    case ir::Region::output:
      CHECK(b.slot < static_cast<std::int64_t>(p.results.size()));
      CHECK(b.end() <= p.results[static_cast<std::size_t>(b.slot)].type.byte_size());
      break;
    case ir::Region::weight:
      CHECK_FALSE(r.weight.empty());
      break;
    }
  };
  for (const auto& a : p.args)
    check_ref(a);
  for (const auto& in : p.instrs) {
    for (const auto& r : in.operands)
      check_ref(r);
    for (const auto& r : in.results)
      check_ref(r);
  }
}

} // namespace

TEST_CASE("every function of every shared checkpoint has a valid plan", "[backend][plan]") {
  const std::string name =
      GENERATE(as<std::string>{}, kModels[0], kModels[1], kModels[2], kModels[3], kModels[4]);
  const bool tiles = GENERATE(false, true);
  INFO(name << (tiles ? " with 16-row tiles and every fusion" : ""));
  compiler::CompileOptions o;
  if (tiles) {
    o.tile_rows = 16;
    o.fusions = "fuse-add-rmsnorm,fuse-qkv,fuse-lm-head-argmax";
  }
  const auto cm = compile(name, o);
  CHECK(cm.programs.size() == cm.modules.size()); // one function per module
  std::int64_t grouped = 0;
  for (const auto& m : cm.modules)
    for (const auto& f : m.functions()) {
      INFO("@" << f->name());
      CHECK(memory::check_memory_plan(*f).empty());
      CHECK(tiling::check_plans(*f, cm.target.local_memory).empty());
      for (const auto& op : f->ops())
        grouped += op->plan() && op->plan()->group >= 0 ? 1 : 0;
      CHECK(f->info().memory->arena >= f->info().memory->lower_bound);
    }
  for (const auto& p : cm.programs)
    check_regions(p, cm.kv);
  if (tiles)
    CHECK(grouped > 0);
  CHECK(cm.kv.capacity == 129); // the largest decode variant's view: 128 history + 1 new
}

TEST_CASE("the plan checkers catch planted faults", "[backend][plan]") {
  auto cm = compile("llama-gqa");
  ir::Function& f = *cm.modules[2].functions().front(); // block_0 (prefill)
  REQUIRE(memory::check_memory_plan(f).empty());
  // Two arena values made to overlap while both live.
  std::vector<ir::Value*> arena;
  for (const auto& op : f.ops())
    for (std::size_t r = 0; r < op->num_results(); ++r)
      if (auto b = op->result(r)->buffer(); b && b->region == ir::Region::arena && !b->view)
        arena.push_back(op->result(r));
  REQUIRE(arena.size() >= 2);
  ir::Value* a = nullptr;
  ir::Value* b = nullptr;
  f.number_ops();
  for (auto* x : arena)
    for (auto* y : arena)
      if (x != y && x->defining_op()->number() < y->defining_op()->number() && !a) {
        bool live = false;
        for (const auto* u : x->users())
          live = live || u->number() > y->defining_op()->number();
        if (live) {
          a = x;
          b = y;
        }
      }
  REQUIRE(a != nullptr);
  auto moved = *b->buffer();
  moved.offset = a->buffer()->offset;
  b->set_buffer(moved);
  CHECK_THAT(memory::check_memory_plan(f), Catch::Contains("overlap"));
  // A buffer beyond the arena.
  moved.offset = f.info().memory->arena;
  b->set_buffer(moved);
  CHECK_THAT(memory::check_memory_plan(f), Catch::Contains("beyond the arena"));
}

TEST_CASE("a weight is converted and stored once for every stage function that reads it",
          "[backend][weights]") {
  const auto cm = compile("qwen3-headdim", [] {
    compiler::CompileOptions o;
    o.lower.mode = "bf16";
    return o;
  }());
  // The same name must mean the very same bytes in every module (one conversion, shared).
  std::map<std::string, const std::byte*> data;
  std::set<std::string> readers_of_q0;
  for (const auto& m : cm.modules) {
    for (const auto& [name, w] : m.weights()) {
      auto [it, fresh] = data.emplace(name, w.parts.front().bytes.data());
      CHECK(it->second == w.parts.front().bytes.data());
    }
    if (m.find_weight("layers.0.q.pbf16"))
      readers_of_q0.insert(m.name());
  }
  // block_0, block_kv_0 and the three decode variants of layer 0 read one packed q weight.
  CHECK(readers_of_q0 == std::set<std::string>{"block_0", "block_kv_0", "block_cache_0_128",
                                               "block_cache_0_64", "block_cache_0_32"});
  // Every weight of a Tpu module is the product of one conversion, done once.
  CHECK(cm.conversions == static_cast<std::int64_t>(data.size()));
}

TEST_CASE("the greedy lm_head (MatMulArgMax) picks the argmax of lm_head", "[backend][exec]") {
  compiler::CompileOptions o;
  o.fusions = "fuse-lm-head-argmax";
  for (const char* name : {"qwen2-tied-bias", "llama-gqa-gptq-g32"}) {
    INFO(name);
    const auto cm = compile(name, o);
    const auto& greedy = *std::find_if(cm.programs.begin(), cm.programs.end(),
                                       [](const auto& p) { return p.name == "lm_head_greedy"; });
    REQUIRE(std::any_of(greedy.instrs.begin(), greedy.instrs.end(),
                        [](const auto& i) { return i.kind() == ir::OpKind::tpu_MatMulArgMax; }));
    auto ex = runtime::make_executor(cm);
    const std::int64_t H = greedy.args[0].type.shape.back();
    const std::int64_t V = ex->program("lm_head").results[0].type.shape.back();
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (int k = 0; k < 8; ++k) {
      std::vector<float> h(static_cast<std::size_t>(H));
      for (auto& x : h)
        x = normal(rng);
      std::vector<float> logits(static_cast<std::size_t>(V));
      std::int32_t token = -1;
      const runtime::ConstBytes in[] = {std::as_bytes(std::span<const float>(h))};
      const runtime::MutBytes lo[] = {std::as_writable_bytes(std::span<float>(logits))};
      const runtime::MutBytes to[] = {std::as_writable_bytes(std::span<std::int32_t>(&token, 1))};
      ex->run("lm_head", in, lo);
      ex->run("lm_head_greedy", in, to);
      CHECK(token == std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
  }
}

TEST_CASE("the executor refuses bad inputs with clear errors", "[backend][exec]") {
  const auto cm = compile("llama-gqa");
  auto ex = runtime::make_executor(cm);
  const auto& p = ex->program("block_cache_0_32");
  const std::int64_t H = p.args[0].type.shape.back();
  std::vector<float> x(static_cast<std::size_t>(H), 0.1f);
  std::int32_t pos = 5;
  auto run = [&](std::span<const std::byte> hidden, std::int32_t position) {
    pos = position;
    const runtime::ConstBytes in[] = {
        hidden, std::as_bytes(std::span<const std::int32_t>(&pos, 1)), {}, {}};
    return ex->run("block_cache_0_32", in);
  };
  const auto ok = std::as_bytes(std::span<const float>(x));
  CHECK_NOTHROW(run(ok, 5));
  CHECK_THROWS_WITH(run(ok.first(ok.size() - 4), 5), Catch::Contains("input 0 is"));
  CHECK_THROWS_WITH(run(ok, 129), Catch::Contains("do not fit the KV cache"));
  CHECK_THROWS_WITH(run(ok, -1), Catch::Contains("consecutive and non-negative"));
  const runtime::ConstBytes none[] = {ok};
  CHECK_THROWS_WITH(ex->run("no_such_function", none), Catch::Contains("no such function"));
  // Prefill positions must be consecutive.
  const auto& pre = ex->program("block_0");
  const std::int64_t L = pre.args[1].type.num_elements();
  std::vector<float> xs(static_cast<std::size_t>(L * H), 0.1f);
  std::vector<std::int32_t> ps(static_cast<std::size_t>(L));
  for (std::int64_t i = 0; i < L; ++i)
    ps[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(2 * i);
  const runtime::ConstBytes in[] = {std::as_bytes(std::span<const float>(xs)),
                                    std::as_bytes(std::span<const std::int32_t>(ps))};
  CHECK_THROWS_WITH(ex->run("block_0", in), Catch::Contains("consecutive"));
  // The new keys land at their positions in the cache, nowhere else.
  std::fill(ex->cache(0, 0).begin(), ex->cache(0, 0).end(), 0.0f);
  CHECK_NOTHROW(run(ok, 7));
  const auto k = ex->cache(0, 0);
  const std::int64_t row = cm.kv.row_bytes / 4;
  for (std::int64_t s = 0; s < cm.kv.capacity; ++s) {
    bool any = false;
    for (std::int64_t j = 0; j < row; ++j)
      any = any || k[static_cast<std::size_t>(s * row + j)] != 0.0f;
    CHECK(any == (s == 7));
  }
}

TEST_CASE("the pipeline compile records is the one it ran, and parses back into it",
          "[backend][pipeline]") {
  compiler::CompileOptions o;
  o.tile_rows = 16;
  o.fusions = "fuse-add-rmsnorm,fuse-qkv";
  const auto cm = compile("llama-gqa", o);
  // The recorded text names every decision: the mode, the fusions, the target's cores and
  // local memory, the cache capacity and the alignment.
  CHECK(cm.pipeline.find("lower-to-tpu") == 0);
  CHECK(cm.pipeline.find("fuse-add-rmsnorm,fuse-qkv,layer-group{") != std::string::npos);
  CHECK(cm.pipeline.find("cores=2") != std::string::npos);
  CHECK(cm.pipeline.find("tile-rows=16") != std::string::npos);
  CHECK(cm.pipeline.find("kv-capacity=" + std::to_string(cm.kv.capacity)) != std::string::npos);
  const pass::Pipeline parsed = pass::Pipeline::parse(cm.pipeline);
  CHECK(parsed.text() == cm.pipeline);
  // Running the parsed text over the same Top modules (as tpullm-opt -p would) gives the same
  // planned IR as compile.
  const auto d = frontend::load_model(model_dir("llama-gqa"));
  auto modules = frontend::build_top_modules(d, small_params());
  REQUIRE(modules.size() == cm.modules.size());
  for (std::size_t i = 0; i < modules.size(); i += 3) {
    INFO("module @" << modules[i].name());
    parsed.run(modules[i]);
    CHECK(ir::text::print_module(modules[i]) == ir::text::print_module(cm.modules[i]));
  }
}

TEST_CASE("make_executor runs a compiled model by the one rule for cores and memory",
          "[backend][exec]") {
  auto cm = compile("llama-gqa");
  // cores 0: the target's, but no more than this process may use; an explicit count is obeyed.
  cm.target.cores = 4096;
  CHECK(runtime::make_executor(cm)->threads() ==
        std::min<std::int64_t>(kernels::usable_cores(), kernels::WorkerPool::kMaxThreads));
  CHECK(runtime::make_executor(cm, 3)->threads() == 3);
  CHECK(runtime::make_executor(cm, 1, 2)->kv_geometry().slots == 2);
  CHECK_THROWS_WITH(runtime::make_executor(cm, -1), Catch::Contains("must be in [0, 4096]"));
  CHECK_THROWS_WITH(runtime::make_executor(cm, 0, 0), Catch::Contains("must be in [1, 4096]"));
  // A KV cache no machine holds is refused before anything is allocated, naming what was run.
  cm.kv.capacity = std::int64_t{1} << 40;
  CHECK_THROWS_WITH(runtime::make_executor(cm),
                    Catch::Contains("compiled model") && Catch::Contains("of memory available"));
}
