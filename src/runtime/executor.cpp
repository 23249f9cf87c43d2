// The executor: regions, weights, the run loop and layer-group tiles (runtime/executor.hpp).
#include "tpullm/runtime/executor.hpp"

#include <chrono>
#include <cstring>
#include <stdexcept>

#include "exec_call.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/codegen/compiled_model.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/conversion/weight_convert.hpp"
#include "tpullm/kernels/worker_pool.hpp"
#include "tpullm/tiling/core_split_plan.hpp"

namespace tpullm::runtime {

using detail::Call;
using detail::Regions;
using detail::WeightRef;

struct Executor::Impl {
  std::int64_t cores = 1, local_memory = 0;
  /// cores threads, the caller's included (shared with another executor: share_workers)
  std::shared_ptr<kernels::WorkerPool> pool;
  KvRegion kv;
  kernels::AlignedArray<std::byte> arena, local;
  std::int64_t local_stride = 0;
  std::map<std::string, ir::Weight> weights;
  std::map<std::string, WeightRef> refs;
  std::map<std::string, std::unique_ptr<kernels::PackedWeights>> packed;
  struct Prog {
    codegen::Program p;
    std::vector<std::vector<std::byte>>
        staging; ///< per result, when the caller gives no span (sized on first use)
    /// per instruction, its operands' weights (null for other operands), resolved when added
    std::vector<std::vector<const WeightRef*>> weights;
    std::int64_t id = -1; ///< index in by_id
    std::string where;    ///< "@name", for messages
  };
  std::map<std::string, Prog> programs;
  std::vector<Prog*> by_id; ///< programs by id (program_id), in the order first added

  const WeightRef& weight(const std::string& name) const {
    auto it = refs.find(name);
    check(it != refs.end(), ErrorKind::internal, "weight @" + name, "is not loaded");
    return it->second;
  }

  void grow(kernels::AlignedArray<std::byte>& a, std::int64_t bytes) {
    if (static_cast<std::int64_t>(a.size()) < bytes)
      a = kernels::AlignedArray<std::byte>(static_cast<std::size_t>(bytes));
  }
};

Executor::Executor(KvGeometry kv, std::int64_t cores, std::int64_t local_memory,
                   const memory::KvRings& rings)
    : impl_(std::make_unique<Impl>()), kv_(kv) {
  check(kv.layers >= 0 && kv.capacity >= 0 && kv.row_bytes >= 0 && kv.slots >= 1,
        ErrorKind::invalid_input, "executor", "bad KV geometry");
  check(cores >= 1, ErrorKind::invalid_input, "executor", "cores must be >= 1, got ", cores);
  impl_->cores = cores;
  impl_->pool = std::make_shared<kernels::WorkerPool>(
      static_cast<int>(std::min<std::int64_t>(cores, kernels::WorkerPool::kMaxThreads)));
  impl_->local_memory = local_memory;
  impl_->kv = KvRegion(kv, rings);
}

Executor::~Executor() = default;

void Executor::add_weight(const ir::Weight& w) {
  auto [it, fresh] = impl_->weights.emplace(w.name, w);
  if (!fresh) {
    check(it->second.type == w.type, ErrorKind::invalid_input, "weight @" + w.name,
          "is already loaded as ", it->second.type.str(), ", not ", w.type.str());
    return;
  }
  check(w.has_data(), ErrorKind::invalid_input, "weight @" + w.name,
        "has no data; the executor needs weight bytes (a module parsed from text has none)");
  WeightRef ref;
  if (w.type.layout == ir::Layout::panels) {
    auto p = std::make_unique<kernels::PackedWeights>(conversion::packed_view(it->second));
    ref.packed = p.get();
    ref.bytes = it->second.part("data").bytes;
    impl_->packed[w.name] = std::move(p);
  } else {
    const ir::WeightPart& d = it->second.part("data");
    check(d.dtype == w.type.dtype &&
              static_cast<std::int64_t>(d.bytes.size()) == w.type.byte_size(),
          ErrorKind::invalid_input, "weight @" + w.name, "data is ", d.bytes.size(), " bytes of ",
          ir::name(d.dtype), ", the type ", w.type.str(), " needs ", w.type.byte_size());
    check(reinterpret_cast<std::uintptr_t>(d.bytes.data()) % ir::byte_size(d.dtype, 1) == 0 ||
              ir::byte_size(d.dtype, 1) == 0,
          ErrorKind::invalid_input, "weight @" + w.name, "data is not aligned to its element");
    ref.bytes = d.bytes;
  }
  impl_->refs[w.name] = ref;
}

void Executor::add_weights(const ir::Module& m) {
  for (const auto& [name, w] : m.weights())
    add_weight(w);
}

void Executor::add_program(codegen::Program p) {
  const std::string where = "@" + p.name;
  check(p.info.memory.has_value(), ErrorKind::invalid_input, where, "has no memory plan");
  const ir::MemoryInfo& mem = *p.info.memory;
  if (mem.kv_row > 0) {
    check(mem.kv_row == kv_.row_bytes && mem.kv_capacity == kv_.capacity, ErrorKind::invalid_input,
          where, "was planned for KV slots of ", mem.kv_row, " bytes x ", mem.kv_capacity,
          ", the executor holds ", kv_.row_bytes, " x ", kv_.capacity);
    check(p.info.layer < kv_.layers, ErrorKind::invalid_input, where, "addresses layer ",
          p.info.layer, " of a cache with ", kv_.layers, " layers");
  }
  check(mem.local <= impl_->local_memory, ErrorKind::invalid_input, where, "needs ", mem.local,
        " bytes of local memory per core, the executor has ", impl_->local_memory);
  for (const auto& in : p.instrs)
    for (const auto& r : in.operands)
      if (r.buffer.region == ir::Region::weight)
        impl_->weight(r.weight); // throws when missing
  impl_->grow(impl_->arena, mem.arena);
  if (mem.local > 0) {
    impl_->local_stride = std::max(impl_->local_stride, (mem.local + 63) / 64 * 64);
    impl_->grow(impl_->local, impl_->local_stride * impl_->cores);
  }
  Impl::Prog prog{std::move(p), {}, {}, -1, {}};
  // staging is allocated on the first run that returns into it: the runtime passes its own
  // output spans, and one zero-filled buffer per result of every program (per layer, stage and
  // variant) was ~170 MiB resident on the 0.5B model before a single token
  prog.staging.resize(prog.p.results.size());
  for (const auto& in : prog.p.instrs) {
    auto& w = prog.weights.emplace_back(in.operands.size(), nullptr);
    for (std::size_t k = 0; k < in.operands.size(); ++k)
      if (in.operands[k].buffer.region == ir::Region::weight)
        w[k] = &impl_->weight(in.operands[k].weight);
  }
  const std::string name = prog.p.name;
  auto [it, fresh] = impl_->programs.try_emplace(name);
  const std::int64_t id = fresh ? static_cast<std::int64_t>(impl_->by_id.size()) : it->second.id;
  it->second = std::move(prog);
  it->second.id = id;
  it->second.where = "@" + name;
  if (fresh)
    impl_->by_id.push_back(&it->second);
}

std::int64_t Executor::program_id(const std::string& name) const {
  auto it = impl_->programs.find(name);
  check(it != impl_->programs.end(), ErrorKind::invalid_input, "@" + name,
        "no such function in the compiled model");
  return it->second.id;
}

bool Executor::has_program(const std::string& name) const {
  return impl_->programs.count(name) > 0;
}

const codegen::Program& Executor::program(const std::string& name) const {
  auto it = impl_->programs.find(name);
  check(it != impl_->programs.end(), ErrorKind::invalid_input, "@" + name, "no such program");
  return it->second.p;
}

std::span<float> Executor::cache(std::int64_t layer, int kind, std::int64_t slot) {
  check(layer >= 0 && layer < kv_.layers && (kind == 0 || kind == 1) && slot >= 0 &&
            slot < kv_.slots,
        ErrorKind::invalid_input, "cache", "layer ", layer, " kind ", kind, " slot ", slot,
        " does not exist");
  check(kv_.dtype == ir::DType::f32, ErrorKind::unsupported, "cache", "the KV cache holds ",
        ir::name(kv_.dtype), " values, not f32");
  const std::int64_t bytes = kv_.capacity * kv_.row_bytes;
  auto* base = reinterpret_cast<float*>(impl_->kv.data() + kv_.slot_offset(slot) +
                                        kv_.cache_offset(layer, kind));
  return {base, static_cast<std::size_t>(bytes / 4)};
}

const memory::KvRings& Executor::kv_rings() const {
  return impl_->kv.rings();
}
std::int64_t Executor::kv_memory_bytes() const {
  return impl_->kv.memory_bytes();
}
std::int64_t Executor::kv_resident_bytes() const {
  return impl_->kv.rings().resident_bytes(kv_); // every position's without rings
}

std::int64_t Executor::arena_bytes() const {
  return static_cast<std::int64_t>(impl_->arena.size());
}
std::int64_t Executor::local_bytes() const {
  return static_cast<std::int64_t>(impl_->local.size());
}

namespace {

using clock_type = std::chrono::steady_clock;

/// Runs one instruction, locating what the kernels throw at it. The kernels classify their own
/// errors (kernels.md, "Errors"); a ModelValueError keeps its type.
void run_call(Call& c) {
  try {
    detail::execute(c);
  } catch (const ModelValueError& e) {
    throw e.within(c.in.where);
  } catch (const Error& e) {
    throw e.within(c.in.where);
  }
}

/// The kernels' form of a planned split, at most `cores` parts.
kernels::CoreSplit to_kernel_split(const ir::SplitPlan& s, std::int64_t cores) {
  kernels::SplitDim d = kernels::SplitDim::none;
  switch (s.dim) {
  case ir::SliceDim::none:
    d = kernels::SplitDim::none;
    break;
  case ir::SliceDim::rows:
  case ir::SliceDim::tiles:
    d = kernels::SplitDim::rows;
    break;
  case ir::SliceDim::cols:
    d = kernels::SplitDim::cols;
    break;
  case ir::SliceDim::heads:
    d = kernels::SplitDim::heads;
    break;
  }
  return {d, static_cast<int>(std::min<std::int64_t>(s.parts, cores))};
}

/// The split an instruction runs with: its plan's, or the tiler's policy when it has none.
kernels::CoreSplit split_of(const codegen::Instr& in, std::int64_t cores) {
  if (!in.planned)
    return to_kernel_split(
        tiling::core_split(
            in.op, in.operands.size(),
            [&](std::size_t k) -> const ir::TensorType& { return in.operands[k].type; }, cores),
        cores);
  return to_kernel_split(in.plan.split, cores);
}

} // namespace

std::int64_t Executor::threads() const {
  return impl_->pool->size();
}
std::int64_t Executor::pool_stalls() const {
  return impl_->pool->stalls();
}
void Executor::share_workers(const Executor& other) {
  check(other.impl_->pool->size() == impl_->pool->size(), ErrorKind::invalid_input, "executor",
        "cannot share a pool of ", other.impl_->pool->size(), " threads with one planned for ",
        impl_->pool->size());
  impl_->pool = other.impl_->pool;
}

std::vector<std::span<const std::byte>>
Executor::run(const std::string& name, std::span<const std::span<const std::byte>> inputs,
              std::span<const std::span<std::byte>> outputs) {
  return run(program_id(name), inputs, outputs);
}

std::vector<std::span<const std::byte>>
Executor::run(std::int64_t id, std::span<const std::span<const std::byte>> inputs,
              std::span<const std::span<std::byte>> outputs) {
  return run(id, inputs, outputs, {});
}

std::vector<std::span<const std::byte>>
Executor::run(std::int64_t id, std::span<const std::span<const std::byte>> inputs,
              std::span<const std::span<std::byte>> outputs, std::span<const std::int32_t> slots) {
  const auto t0 = clock_type::now();
  const kernels::ScopedPool on_this_pool(*impl_->pool); // the kernels' splits run on our workers
  check(id >= 0 && id < static_cast<std::int64_t>(impl_->by_id.size()), ErrorKind::invalid_input,
        "executor", "no program with id ", id);
  Impl::Prog& prog = *impl_->by_id[static_cast<std::size_t>(id)];
  const codegen::Program& p = prog.p;
  const std::string& where = prog.where; // "@name", built when the program was added
  check(inputs.size() == p.args.size(), ErrorKind::invalid_input, where, "expects ", p.args.size(),
        " inputs, got ", inputs.size());
  check(outputs.empty() || outputs.size() == p.results.size(), ErrorKind::invalid_input, where,
        "expects ", p.results.size(), " output spans (or none), got ", outputs.size());
  for (auto sl : slots)
    check(sl >= 0 && sl < kv_.slots, ErrorKind::invalid_input, where, "KV slot ", sl,
          " is outside [0, ", kv_.slots, ")");
  Regions reg;
  reg.inputs = inputs;
  reg.kv_all = impl_->kv.data();
  reg.slot_bytes = kv_.slot_bytes();
  reg.kv = impl_->kv.data() + (slots.empty() ? 0 : kv_.slot_offset(slots[0]));
  reg.arena = impl_->arena.data();
  reg.kv_capacity = kv_.capacity;
  reg.local = impl_->local.data();
  reg.local_stride = impl_->local_stride;
  for (std::size_t j = 0; j < p.results.size(); ++j) {
    const std::int64_t want = p.results[j].type.byte_size();
    if (!outputs.empty() && !outputs[j].empty()) {
      check(static_cast<std::int64_t>(outputs[j].size()) == want, ErrorKind::invalid_input, where,
            "output ", j, " is ", outputs[j].size(), " bytes, the result needs ", want);
      reg.outputs.push_back(outputs[j]);
    } else {
      auto& st = prog.staging[j];
      st.resize(static_cast<std::size_t>(want));
      reg.outputs.emplace_back(st.data(), st.size());
    }
  }
  // Positions: consecutive, inside the cache.
  if (p.positions_arg >= 0) {
    const auto& pa = p.args[static_cast<std::size_t>(p.positions_arg)];
    const auto& in = inputs[static_cast<std::size_t>(p.positions_arg)];
    const std::int64_t L = pa.type.num_elements();
    check(static_cast<std::int64_t>(in.size()) == L * 4, ErrorKind::invalid_input, where,
          "position_ids must be ", L * 4, " bytes");
    const auto* pos = reinterpret_cast<const std::int32_t*>(in.data());
    const std::int64_t batch = pa.type.rank() == 2 ? pa.type.shape[0] : 1;
    if (batch > 1) {
      // A batched decode: one token per row, each row its own slot and position.
      check(static_cast<std::int64_t>(slots.size()) == batch, ErrorKind::invalid_input, where,
            "a batched decode of ", batch, " rows needs ", batch, " KV slots, got ", slots.size());
      for (std::int64_t i = 0; i < L; ++i)
        check(pos[i] >= 0 && pos[i] < kv_.capacity, ErrorKind::invalid_input, where, "position ",
              pos[i], " of row ", i, " is outside the KV cache of ", kv_.capacity, " positions");
      reg.row_slots = slots;
      reg.row_pos = pos;
      for (std::int64_t i = 0; i < L; ++i)
        impl_->kv.settle(slots[static_cast<std::size_t>(i)], p.info.layer, pos[i]);
    } else {
      check(slots.size() <= 1, ErrorKind::invalid_input, where,
            "a single-conversation program runs on one KV slot, got ", slots.size());
      for (std::int64_t i = 0; i < L; ++i)
        check(pos[i] == pos[0] + i && pos[i] >= 0, ErrorKind::invalid_input, where,
              "position_ids must be consecutive and non-negative (row ", i, " is ", pos[i],
              " after ", pos[0], ")");
      reg.pos0 = pos[0];
      if (p.info.memory && p.info.memory->kv_row > 0) {
        check(pos[0] + L <= kv_.capacity, ErrorKind::invalid_input, where, "positions ", pos[0],
              "..", pos[0] + L - 1, " do not fit the KV cache of ", kv_.capacity, " slots");
        impl_->kv.settle(slots.empty() ? 0 : slots[0], p.info.layer, pos[0]);
      }
    }
  }
  for (std::size_t i = 0; i < p.args.size(); ++i) {
    const auto& a = p.args[i];
    if (a.buffer.region == ir::Region::kv) {
      if (!inputs[i].empty()) { // tests may hand history in; the runtime never does
        check(reg.row_slots.empty(), ErrorKind::invalid_input, where,
              "a batched decode reads its history from the KV slots (history input ", i,
              " must be empty)");
        check(static_cast<std::int64_t>(inputs[i].size()) == a.type.byte_size(),
              ErrorKind::invalid_input, where, "history input ", i, " must be empty or ",
              a.type.byte_size(), " bytes");
        std::memcpy(reg.kv + a.buffer.offset, inputs[i].data(), inputs[i].size());
      }
      continue;
    }
    check(static_cast<std::int64_t>(inputs[i].size()) == a.type.byte_size(),
          ErrorKind::invalid_input, where, "input ", i, " is ", inputs[i].size(),
          " bytes, the argument ", a.type.str(), " needs ", a.type.byte_size());
  }
  auto weight = [this](const std::string& n) -> const WeightRef& { return impl_->weight(n); };
  const std::int64_t cores = impl_->cores;
  const std::int64_t lm = impl_->local_memory;
  double kernel_s = 0;
  const auto& instrs = p.instrs;
  for (std::size_t i = 0; i < instrs.size();) {
    const codegen::Instr& in = instrs[i];
    const ir::OpPlan& plan = in.plan;
    const bool row_group =
        plan.group >= 0 && plan.tile.dim == ir::SliceDim::rows && plan.tile.count > 1;
    const auto k0 = profiling_ ? clock_type::now() : clock_type::time_point{};
    if (!row_group) {
      Call c{in, reg, prog.weights[i].data(), weight, split_of(in, cores)};
      c.local_memory = plan.local > 0 ? plan.local : lm;
      run_call(c);
      ++stats_.instrs;
      ++i;
    } else {
      // The group's instructions, run tile by tile; tiles dealt to cores.
      std::size_t e = i;
      while (e < instrs.size() && instrs[e].plan.group == plan.group)
        ++e;
      const std::int64_t rows = Call::rows_of(in.results.at(0).type);
      // The plan's tiles; a count that does not cover the rows exactly is a damaged plan.
      const std::int64_t T = plan.tile.size, n = plan.tile.count;
      check(T > 0 && T * n >= rows && T * (n - 1) < rows, ErrorKind::invalid_input, in.where, n,
            " tiles of ", T, " rows do not cover ", rows, " rows");
      const int parts =
          plan.split.dim == ir::SliceDim::tiles
              ? static_cast<int>(std::clamp<std::int64_t>(plan.split.parts, 1, std::min(cores, n)))
              : 1;
      // Tiles handed out one at a time; a tile runs on one worker, with that worker's scratch.
      impl_->pool->run(n, parts, [&](std::int64_t t, int worker) {
        for (std::size_t j = i; j < e; ++j) {
          const codegen::Instr& gi = instrs[j];
          Call c{gi, reg, prog.weights[j].data(), weight, kernels::CoreSplit{}};
          c.core = worker;
          c.tiled = true;
          c.rows_total = rows;
          c.r0 = t * T;
          c.r1 = std::min(rows, (t + 1) * T);
          // The kernels' own working set: what the group's intermediates leave free.
          c.local_memory = std::max(lm - plan.local, lm / 4);
          run_call(c);
        }
      });
      stats_.instrs += static_cast<std::int64_t>((e - i)) * n;
      i = e;
    }
    if (profiling_) {
      const double dt = std::chrono::duration<double>(clock_type::now() - k0).count();
      kernel_s += dt;
      stats_.op_seconds[static_cast<std::size_t>(in.kind())] += dt;
    }
  }
  // Results: produced in place, or copied to the caller's span, or handed out as views.
  std::vector<std::span<const std::byte>> views;
  const codegen::Instr none;
  Call at{none, reg, nullptr, weight, {}};
  for (std::size_t j = 0; j < p.results.size(); ++j) {
    const auto& r = p.results[j];
    const std::int64_t bytes = r.type.byte_size();
    const bool in_slot = r.buffer.region == ir::Region::output &&
                         r.buffer.slot == static_cast<std::int64_t>(j) && r.buffer.offset == 0;
    const std::byte* src = at.addr(r, false);
    const bool caller = !outputs.empty() && !outputs[j].empty();
    if (in_slot || !caller) {
      views.emplace_back(in_slot ? reg.outputs[j].data() : src, static_cast<std::size_t>(bytes));
    } else {
      std::memcpy(outputs[j].data(), src, static_cast<std::size_t>(bytes));
      views.emplace_back(outputs[j].data(), static_cast<std::size_t>(bytes));
    }
  }
  const double total = std::chrono::duration<double>(clock_type::now() - t0).count();
  stats_.total_seconds += total;
  stats_.kernel_seconds += kernel_s;
  ++stats_.runs;
  return views;
}

namespace {

/// The executor make_executor returns, still without weights and programs: one rule for the
/// thread count and one memory check, whatever holds the programs (`where` names it).
std::unique_ptr<Executor> empty_executor(KvGeometry kv, std::span<const codegen::Program> programs,
                                         bool kv_rings, const target::Target& target,
                                         std::int64_t max_arena, std::int64_t max_local,
                                         std::int64_t cores, std::int64_t slots,
                                         const std::string& where) {
  check(cores >= 0 && cores <= 4096, ErrorKind::invalid_input, "cores",
        "must be in [0, 4096] (0: the target's), got ", cores);
  check(slots >= 1 && slots <= 4096, ErrorKind::invalid_input, "slots",
        "must be in [1, 4096], got ", slots);
  kv.slots = slots;
  const memory::KvRings rings = kv_rings ? kv_rings_of(programs, kv) : memory::KvRings{};
  // The target's cores, but no more than this process may run on (an explicit count is obeyed).
  const std::int64_t n =
      cores > 0 ? cores : std::min<std::int64_t>(target.cores, kernels::usable_cores());
  const std::int64_t local = std::max(target.local_memory, max_local);
  // What the executor allocates (the weights stay where they are): refuse before touching it.
  const double need = static_cast<double>(rings.bytes(kv)) + static_cast<double>(max_arena) +
                      static_cast<double>(local) * static_cast<double>(n);
  const double limit = frontend::memory_limit_bytes();
  check(need <= limit, ErrorKind::invalid_input, where, "running it needs ",
        static_cast<std::int64_t>(need / (1 << 20)), " MiB for the KV cache (", slots, " x ",
        kv.capacity, " positions) and activations, more than the ",
        static_cast<std::int64_t>(limit / (1 << 20)), " MiB of memory available");
  auto ex = std::make_unique<Executor>(kv, n, local, rings);
  // A system that refused the rings' mappings (vm.max_map_count) left every position kept:
  // that must fit too.
  const double kept =
      static_cast<double>(ex->kv_memory_bytes()) + need - static_cast<double>(rings.bytes(kv));
  check(kept <= limit, ErrorKind::invalid_input, where, "the system refused to map the KV cache's ",
        "sliding-window rings (see vm.max_map_count), and keeping every position needs ",
        static_cast<std::int64_t>(kept / (1 << 20)), " MiB, more than the ",
        static_cast<std::int64_t>(limit / (1 << 20)), " MiB of memory available");
  return ex;
}

} // namespace

std::unique_ptr<Executor> make_executor(const bundle::Bundle& b, std::int64_t cores,
                                        std::int64_t slots, bool kv_rings) {
  auto ex = empty_executor(b.kv(), b.programs(), kv_rings, b.target(), b.max_arena(), b.max_local(),
                           cores, slots, b.path());
  for (const auto& w : b.weights())
    ex->add_weight(w);
  for (const auto& p : b.programs())
    ex->add_program(p);
  return ex;
}

std::unique_ptr<Executor> make_executor(const codegen::CompiledModel& m, std::int64_t cores,
                                        std::int64_t slots, bool kv_rings) {
  auto ex = empty_executor(m.kv, m.programs, kv_rings, m.target, m.max_arena, m.max_local, cores,
                           slots, "compiled model");
  for (const auto& mod : m.modules)
    ex->add_weights(mod);
  for (const auto& p : m.programs)
    ex->add_program(p);
  return ex;
}

} // namespace tpullm::runtime
