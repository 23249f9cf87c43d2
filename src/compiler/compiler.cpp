// The in-memory compiler: Top stage modules -> planned Programs (compiler/compiler.hpp).
#include "tpullm/compiler/compiler.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "tpullm/ir/verifier.hpp"
#include "tpullm/memory/plan_memory.hpp"
#include "tpullm/pass/pass_registry.hpp"
#include "tpullm/tiling/layer_group.hpp"

namespace tpullm::compiler {

namespace {

/// One module through the compilation's pipeline, with the shared converter in the context.
/// The IR is verified after every pass: a pass that leaves it invalid is our bug.
void compile_module(ir::Module& m, const pass::Pipeline& pipeline,
                    conversion::WeightConverter& conv) {
  pass::PassContext ctx;
  ctx.converter = &conv;
  for (const auto& e : pipeline.entries()) {
    e.run(m, ctx);
    const auto errors = ir::verify_module(m);
    if (!errors.empty())
      throw Error(ErrorKind::internal, "after pass '" + e.text + "'", errors.front().what());
  }
}

/// The largest KV view any module needs and the slot size they agree on, in bytes of `dtype`
/// (the KV cache's element type; Top blocks carry f32 keys and values).
std::pair<std::int64_t, std::int64_t> kv_needs(const std::vector<ir::Module>& modules,
                                               ir::DType dtype, std::int64_t* layers) {
  std::int64_t cap = 0, row = 0;
  for (const auto& m : modules)
    for (const auto& f : m.functions()) {
      if (f->info().layer >= 0)
        *layers = std::max(*layers, f->info().layer + 1);
      for (const auto& op : f->ops()) {
        // Top blocks: the history argument plus new rows is the largest view.
        if (const auto* c = op->as<ir::top::ConcatOp>();
            c && op->num_operands() == 2 && op->result(0)->type().rank() == 4) {
          const auto& t = op->result(0)->type();
          cap = std::max(cap, t.shape[1]);
          row = memory::kv_row_bytes(ir::TensorType(t.shape, dtype));
        }
        if (op->is<ir::top::FAttentionOp>()) {
          const auto& t = op->operand(1)->type();
          cap = std::max(cap, t.shape[1]);
          row = memory::kv_row_bytes(ir::TensorType(t.shape, dtype));
        }
      }
    }
  return {cap, row};
}

} // namespace

pass::Pipeline compile_pipeline(const CompileOptions& o, std::int64_t kv_capacity) {
  pass::Pipeline p;
  p.add("lower-to-tpu", o.lower);
  p.append(pass::Pipeline::parse(o.fusions));
  tiling::LayerGroupOptions lg;
  lg.local_memory = o.target.local_memory;
  lg.cores = o.target.cores;
  lg.tile_rows = o.tile_rows;
  lg.groups = o.layer_groups;
  p.add("layer-group", lg);
  memory::PlanMemoryOptions mo;
  mo.kv_capacity = kv_capacity;
  mo.kv_in_place = o.kv_in_place;
  mo.alignment = o.target.alignment;
  p.add("plan-memory", mo);
  return p;
}

codegen::CompiledModel compile(std::vector<ir::Module> modules, const CompileOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  o.target.validate();
  codegen::CompiledModel out;
  out.target = o.target;
  std::int64_t layers = 0;
  const ir::DType kv_dtype = conversion::kv_cache_dtype(o.lower);
  const auto [need, row] = kv_needs(modules, kv_dtype, &layers);
  const std::int64_t capacity = std::max(need, o.kv_capacity);
  out.kv = {layers, row > 0 ? capacity : 0, row};
  out.kv.dtype = kv_dtype;
  const pass::Pipeline pipeline = compile_pipeline(o, capacity);
  out.pipeline = pipeline.text();
  conversion::WeightConverter conv;
  // Modules compile independently: a small pool takes the next module until none is left.
  const std::size_t n = modules.size();
  const std::size_t threads = static_cast<std::size_t>(
      std::clamp<std::int64_t>(o.threads > 0 ? o.threads : o.target.cores, 1,
                               static_cast<std::int64_t>(std::max<std::size_t>(n, 1))));
  std::atomic<std::size_t> next{0}, done{0};
  std::mutex mu;
  std::exception_ptr failure;
  auto worker = [&] {
    for (std::size_t i = next++; i < n; i = next++) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (failure)
          return;
      }
      try {
        compile_module(modules[i], pipeline, conv);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure)
          failure = std::make_exception_ptr(e.within("module @" + modules[i].name()));
        return;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure)
          failure = std::current_exception();
        return;
      }
      const std::size_t d = ++done;
      if (o.progress) {
        std::lock_guard<std::mutex> lock(mu);
        o.progress(d, n, modules[i].name());
      }
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (auto& t : pool)
    t.join();
  if (failure)
    std::rethrow_exception(failure);
  std::set<std::string> seen;
  for (const auto& m : modules) {
    for (const auto& f : m.functions()) {
      out.programs.push_back(codegen::make_program(*f));
      const auto& mem = *f->info().memory;
      out.max_arena = std::max(out.max_arena, mem.arena);
      out.max_local = std::max(out.max_local, mem.local);
      out.arena_lower_bound = std::max(out.arena_lower_bound, mem.lower_bound);
    }
    for (const auto& [name, w] : m.weights())
      if (seen.insert(name).second)
        for (const auto& p : w.parts)
          out.weight_bytes += static_cast<std::int64_t>(p.bytes.size());
  }
  out.conversions = conv.conversions();
  out.modules = std::move(modules);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

} // namespace tpullm::compiler
