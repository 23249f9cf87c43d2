// The calibration pass of --mode int8 (calibration/calibrate.hpp).
#include "tpullm/calibration/calibrate.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "tpullm/conversion/calib_stats.hpp"
#include "tpullm/frontend/hf_config.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/interpreted_stages.hpp"
#include "tpullm/runtime/session.hpp"

namespace tpullm::calibration {

namespace {

using runtime::ConstBytes;
using runtime::InterpretedStages;
using runtime::MutBytes;
using runtime::Session;
using runtime::SessionDims;
using runtime::Stages;

using Ptr = std::shared_ptr<const interp::Tensor>;
using Stats = std::map<std::string, conversion::InputStats>;

bool is_block(ir::StageKind k) {
  return k == ir::StageKind::prefill || k == ir::StageKind::prefill_kv ||
         k == ir::StageKind::decode;
}

/// The name of the builtin.Weight defining `v`, or "".
std::string weight_name(const ir::Value* v) {
  if (const ir::Operation* d = v->defining_op())
    if (const auto* w = d->as<ir::builtin::WeightOp>())
      return w->name.name;
  return {};
}

/// Records one op's quantized inputs into `stats`. q / k / v read one tensor: the first records
/// it, the others copy that entry at the end (`alias`).
struct Recorder {
  Stats& stats;
  std::map<std::string, std::string>& alias;
  bool keep_values;
  Ptr last_x; ///< held, so that no later tensor reuses its address
  std::string last_name;
  /// Rows of the current segment that are real tokens: a segment padded to its prefill
  /// variant's length has padding rows after them, which are not recorded.
  std::int64_t valid_rows = 0;

  void record(const std::string& name, const Ptr& x) {
    if (x == last_x && !last_name.empty()) {
      alias.emplace(name, last_name);
      return;
    }
    std::vector<float> v = x->to_f32();
    const std::int64_t K = x->shape().empty() ? 1 : x->shape().back();
    const auto keep = static_cast<std::size_t>(valid_rows * K);
    if (v.size() > keep)
      v.resize(keep);
    stats[name].add(v, K, keep_values);
    last_x = x;
    last_name = name;
  }

  void operator()(const ir::Operation& op, const std::vector<Ptr>& args) {
    const ir::Function* f = op.parent();
    if (!f || !is_block(f->info().stage))
      return;
    if (op.is<ir::top::MatMulOp>()) {
      const std::string w = weight_name(op.operand(ir::top::MatMulOp::b));
      if (!w.empty())
        record(w, args[0]);
    } else if (const auto* m = op.as<ir::top::MLPOp>()) {
      using P = ir::top::MLPOp;
      const std::string g = weight_name(op.operand(P::gate)), u = weight_name(op.operand(P::up)),
                        d = weight_name(op.operand(P::down));
      if (g.empty() || u.empty() || d.empty())
        return;
      record(g, args[0]);
      record(u, args[0]);
      const interp::Tensor gx = interp::ref::matmul(*args[0], *args[1], m->transpose_b, nullptr);
      const interp::Tensor ux = interp::ref::matmul(*args[0], *args[2], m->transpose_b, nullptr);
      record(d, std::make_shared<const interp::Tensor>(
                    interp::FloatArray(interp::ref::silu(gx).floats() * ux.floats()), gx.dtype()));
    }
  }
};

/// The interpreter, less the lm_head: calibration reads the blocks' inputs, never the logits a
/// Session computes for a prompt's last row, so the head (for a tied model the whole embedding
/// table, widened) is never materialized. Its outputs are zeros.
class NoLogitsStages : public Stages {
public:
  explicit NoLogitsStages(InterpretedStages& exec) : exec_(exec) {
    for (const auto& m : exec.modules())
      for (const auto& f : m.functions())
        if (f->info().stage == ir::StageKind::lm_head)
          skipped_.insert(f->name());
  }
  bool has_function(const std::string& name) const override { return exec_.has_function(name); }
  using Stages::run;
  void run(const std::string& name, std::span<const ConstBytes> inputs,
           std::span<const MutBytes> outputs) override {
    if (skipped_.count(name) == 0)
      return exec_.run(name, inputs, outputs);
    for (const MutBytes& o : outputs)
      std::fill(o.begin(), o.end(), std::byte{0});
  }

private:
  InterpretedStages& exec_;
  std::set<std::string> skipped_;
};

/// Bytes (8 per element) of the weights one run of the widest function of `modules` holds,
/// lm_head functions left out and tables only gathered by rows not counted.
std::size_t widest_function_bytes(const std::vector<ir::Module>& modules) {
  std::size_t widest = 0;
  for (const auto& m : modules)
    for (const auto& f : m.functions()) {
      if (f->info().stage == ir::StageKind::lm_head)
        continue;
      std::set<std::string> names;
      std::size_t sum = 0;
      for (const auto& op : f->ops())
        if (const auto* w = op->as<ir::builtin::WeightOp>(); w && !interp::gathered_by_rows(*op))
          if (const ir::Weight* wt = m.find_weight(w->name.name);
              wt && names.insert(wt->name).second)
            sum += static_cast<std::size_t>(wt->type.num_elements()) * 8;
      widest = std::max(widest, sum);
    }
  return widest;
}

std::string calib_mib(std::size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return b;
}

} // namespace

std::vector<std::vector<std::int32_t>> builtin_calib_samples(std::int64_t vocab,
                                                             std::int64_t length, int count) {
  check(vocab > 0 && length > 0 && count > 0, ErrorKind::invalid_input, "calibration samples",
        "need vocab, length and count > 0");
  std::vector<std::vector<std::int32_t>> out;
  for (int s = 0; s < count; ++s) {
    std::mt19937 rng(20240613u + static_cast<unsigned>(s));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(length));
    for (auto& id : ids)
      id = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(vocab));
    out.push_back(std::move(ids));
  }
  return out;
}

conversion::CalibTable calibrate(const frontend::ModelDesc& desc,
                                 const frontend::StageParams& params,
                                 const std::vector<std::vector<std::int32_t>>& samples,
                                 const CalibrateOptions& options) {
  const std::string& method = options.method;
  check(method == "max" || method == "percentile" || method == "kl", ErrorKind::invalid_input,
        "--method", "must be max, percentile or kl, got '", method, "'");
  check(!samples.empty(), ErrorKind::invalid_input, "--samples", "holds no prompt");
  check(options.threads >= 1 && options.threads <= 256, ErrorKind::invalid_input, "--threads",
        "must be in [1, 256], got ", options.threads);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    check(!s.empty() && static_cast<std::int64_t>(s.size()) <= params.seq_length,
          ErrorKind::invalid_input, "sample " + std::to_string(i + 1), "has ", s.size(),
          " tokens; a sample needs 1 to --seq-length = ", params.seq_length);
    for (auto id : s)
      check(id >= 0 && id < desc.dims.vocab, ErrorKind::invalid_input,
            "sample " + std::to_string(i + 1), "token id ", id, " is outside the vocabulary [0, ",
            desc.dims.vocab, ")");
  }
  for (const auto& l : desc.layers) {
    check(!l.sparse(), ErrorKind::unsupported, desc.dir.string(),
          "is a mixture-of-experts model; --mode int8 (and so calibrate) supports dense models");
    for (const frontend::WeightRef* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      check(!w->is_quantized(), ErrorKind::unsupported, desc.dir.string(), "'", w->name(),
            "' is already quantized; --mode int8 (and so calibrate) needs a float checkpoint");
  }
  const bool keep = method != "max";
  const SessionDims dims{desc.dims.layers, desc.dims.hidden, desc.dims.kv_heads, desc.dims.head_dim,
                         desc.dims.vocab};
  const int threads = std::min<int>(options.threads, static_cast<int>(samples.size()));
  // Worker 0's modules, built first: they size the budget.
  std::vector<ir::Module> first = frontend::build_top_modules(desc, params);
  const std::size_t min_budget = static_cast<std::size_t>(threads) * widest_function_bytes(first);
  const std::size_t budget =
      options.memory_budget > 0 ? options.memory_budget : std::max(kDefaultCalibBudget, min_budget);
  check(budget >= min_budget, ErrorKind::invalid_input, "--memory-budget",
        calib_mib(options.memory_budget), " cannot hold the ", calib_mib(min_budget),
        " of f64 weights that ", threads, " thread(s) use at once (one layer each); give at least ",
        (min_budget + (std::size_t{1} << 20) - 1) >> 20, threads > 1 ? " or fewer --threads" : "");
  auto weights = std::make_shared<interp::WeightStore>(budget);
  std::vector<Stats> per_sample(samples.size());
  std::vector<std::map<std::string, std::string>> aliases(samples.size());
  std::mutex mu;
  std::size_t next = 0, done = 0;
  std::exception_ptr failure;
  auto worker = [&](bool is_first) {
    try {
      InterpretedStages exec(
          is_first ? std::move(first) : frontend::build_top_modules(desc, params), weights);
      NoLogitsStages no_logits(exec);
      Session session(no_logits, dims, params);
      for (;;) {
        std::size_t i = 0;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next >= samples.size() || failure)
            return;
          i = next++;
        }
        Recorder rec{per_sample[i], aliases[i], keep, nullptr, {}, 0};
        exec.set_observer(
            [&rec](const ir::Operation& op, const std::vector<Ptr>& a) { rec(op, a); });
        session.reset();
        // One segment per call, so that the recorder knows how many rows are real.
        const auto& s = samples[i];
        const auto L = static_cast<std::size_t>(params.max_input_length);
        for (std::size_t at = 0; at < s.size(); at += L) {
          const std::vector<std::int32_t> seg(
              s.begin() + static_cast<std::ptrdiff_t>(at),
              s.begin() + static_cast<std::ptrdiff_t>(std::min(s.size(), at + L)));
          rec.valid_rows = static_cast<std::int64_t>(seg.size());
          rec.last_x = nullptr;
          (void)session.prefill(seg, false);
        }
        exec.set_observer({});
        std::lock_guard<std::mutex> lock(mu);
        ++done;
        if (options.progress)
          options.progress(done, samples.size());
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure)
        failure = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(worker, false);
  worker(true);
  for (auto& t : pool)
    t.join();
  if (failure)
    std::rethrow_exception(failure);
  if (options.stats)
    *options.stats = {budget, min_budget, weights->peak_bytes(), weights->materializations()};

  Stats all;
  std::map<std::string, std::string> alias;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    for (const auto& [name, st] : per_sample[i])
      all[name].merge(st);
    for (const auto& [a, b] : aliases[i])
      alias.emplace(a, b);
  }
  conversion::CalibTable t;
  t.model = {std::string(frontend::family_name(desc.family)), desc.dims.layers, desc.dims.hidden,
             desc.dims.intermediate, desc.dims.vocab};
  t.method = method;
  t.samples = static_cast<std::int64_t>(samples.size());
  for (const auto& s : samples)
    t.tokens += static_cast<std::int64_t>(s.size());
  for (std::int64_t l = 0; l < desc.dims.layers; ++l)
    for (const char* slot : {"q", "k", "v", "o", "gate", "up", "down"}) {
      const std::string name = "layers." + std::to_string(l) + "." + slot;
      auto it = all.find(name);
      if (it == all.end()) {
        auto a = alias.find(name);
        if (a != alias.end())
          it = all.find(a->second);
      }
      check(it != all.end(), ErrorKind::internal, "calibrate", "no input of '", name,
            "' was observed (the Top modules name their weights differently?)");
      t.inputs.push_back(it->second.entry(name, method));
    }
  return t;
}

} // namespace tpullm::calibration
