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
#include "tpullm/ir/tpu_ops.hpp"
#include "tpullm/memory/kv_rings.hpp"
#include "tpullm/memory/plan_memory.hpp"
#include "tpullm/pass/pass_registry.hpp"
#include "tpullm/tiling/layer_group.hpp"

namespace tpullm::compiler {

namespace {

/// True when an attention op of `modules` has a sliding window.
bool has_window(const std::vector<ir::Module>& modules) {
  for (const auto& m : modules)
    for (const auto& f : m.functions())
      for (const auto& op : f->ops())
        if (const auto* a = op->as<ir::tpu::FAttentionOp>(); a && a->window)
          return true;
  return false;
}

/// Runs entries [first, last) of `pipeline` on one module, with the shared converter in the
/// context. The IR is verified after every pass: a pass that leaves it invalid is our bug.
void run_passes(ir::Module& m, const pass::Pipeline& pipeline, std::size_t first, std::size_t last,
                conversion::WeightConverter& conv) {
  pass::PassContext ctx;
  ctx.converter = &conv;
  for (std::size_t i = first; i < last; ++i) {
    const auto& e = pipeline.entries()[i];
    e.run(m, ctx);
    const auto errors = ir::verify_module(m);
    if (!errors.empty())
      throw Error(ErrorKind::internal, "after pass '" + e.text + "'", errors.front().what());
  }
}

/// Calls `work(module)` for every module on a small pool (`threads` workers, each taking the
/// next module until none is left); rethrows the first failure, naming its module.
template <class Work>
void for_each_module(std::vector<ir::Module>& modules, std::size_t threads, Work&& work) {
  const std::size_t n = modules.size();
  std::atomic<std::size_t> next{0};
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
        work(modules[i]);
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
  for (const auto& m : modules)
    for (const auto& f : m.functions())
      if (f->info().layer >= 0)
        layers = std::max(layers, f->info().layer + 1);
  conversion::WeightConverter conv;
  // Modules compile independently on a small pool, in two rounds: every pass but plan-memory,
  // then plan-memory with the one KV capacity all modules share (memory::kv_needs over their
  // Tpu KV ops, at least the requested kv_capacity).
  const std::size_t n = modules.size();
  const std::size_t threads = static_cast<std::size_t>(
      std::clamp<std::int64_t>(o.threads > 0 ? o.threads : o.target.cores, 1,
                               static_cast<std::int64_t>(std::max<std::size_t>(n, 1))));
  // The quantization plan is decided once (a calibration table loaded once) and shared by both
  // rounds' pipelines, unless the caller already made it.
  CompileOptions planned = o;
  if (!planned.lower.plan)
    planned.lower.plan =
        std::make_shared<const conversion::QuantPlan>(conversion::make_quant_plan(o.lower));
  const pass::Pipeline lowering = compile_pipeline(planned, 0);
  const std::size_t planning = lowering.entries().size() - 1; // plan-memory comes last
  check(lowering.entries().back().text.starts_with("plan-memory"), ErrorKind::internal, "compile",
        "the compile pipeline must end with plan-memory");
  for_each_module(modules, threads,
                  [&](ir::Module& m) { run_passes(m, lowering, 0, planning, conv); });
  memory::KvNeeds need;
  for (const auto& m : modules)
    need = memory::kv_needs(m, need);
  std::int64_t capacity = std::max(need.capacity, o.kv_capacity);
  // A sliding-window layer's cache may be kept as a ring (memory/kv_rings.hpp), which maps
  // whole pages: with a window, every cache starts on a page (a few positions more, never
  // touched).
  if (need.row > 0 && has_window(modules)) {
    const std::int64_t q = memory::ring_quantum(need.row, memory::kRingPage);
    capacity = (capacity + q - 1) / q * q;
  }
  out.kv = {layers, need.row > 0 ? capacity : 0, need.row};
  out.kv.dtype = planned.lower.plan->kv_dtype;
  const pass::Pipeline pipeline = compile_pipeline(planned, capacity);
  out.pipeline = pipeline.text();
  std::atomic<std::size_t> done{0};
  std::mutex progress_mu;
  for_each_module(modules, threads, [&](ir::Module& m) {
    run_passes(m, pipeline, planning, pipeline.entries().size(), conv);
    const std::size_t d = ++done;
    if (o.progress) {
      std::lock_guard<std::mutex> lock(progress_mu);
      o.progress(d, n, m.name());
    }
  });
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
