// The engine of run and chat: one process or a pipeline rank, and --memory-budget
// (pipeline_run.hpp).
#include "pipeline_run.hpp"

#include <iostream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tpullm/runtime/layer_pipeline.hpp"
#include "tpullm/runtime/layer_split.hpp"
#include "tpullm/runtime/tensor_parallel.hpp"
#ifdef TPULLM_HAVE_MPI
#include "tpullm/mpi/mpi_link.hpp"
#endif

namespace tpullm::cli {

namespace po = boost::program_options;

po::options_description parallel_options(ParallelArgs& a, bool budget_alone) {
  po::options_description o(
      "processes and memory (--parallel: start with mpirun -np N; docs/distributed.md)");
  o.add_options()("parallel", po::value(&a.mode),
                  "'pipeline': each MPI rank runs a contiguous range of the layers, rank 0 "
                  "also the embedding, the lm_head and the text side; 'tensor': every rank "
                  "runs its share of every layer's attention heads and MLP columns, with two "
                  "all-reduces a layer (a bundle compiled with --tensor-parallel N, run on N "
                  "ranks). BUNDLE must be a bundle file")(
      "layer-split", po::value(&a.layer_split),
      "with --parallel pipeline: layers per rank, comma-separated, in rank "
      "order (default: balanced by weight bytes, rank 0's embedding and "
      "lm_head counted)")(
      "memory-budget", po::value(&a.memory_budget_mib),
      budget_alone
          ? "MiB this process (each rank) may hold: its weights, its layers' KV cache, the "
            "activations and what the process holds already; refused before running "
            "when over, and the peak resident set checked against it at the end"
          : "with --parallel pipeline: MiB each rank may hold: its weights, its layers' "
            "KV cache of every slot, the activations and what the process holds "
            "already; refused before serving when over, and the peak resident set "
            "checked against it at the end");
  return o;
}

namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

std::string ranges_text(const std::vector<runtime::LayerRange>& ranges) {
  std::ostringstream s;
  for (std::size_t r = 0; r < ranges.size(); ++r)
    s << (r ? " " : "") << "[" << ranges[r].begin << ", " << ranges[r].end << ")";
  return s.str();
}

/// Refuses (Error(invalid_input)) a process whose share of `b` would exceed `budget_mib`:
/// `range` its layers, `shared` whether it holds the embedding and lm_head too, `process` what
/// it held before it opened the bundle (code, libraries, MPI).
void check_budget(std::int64_t budget_mib, runtime::BundleSession& e, runtime::LayerRange range,
                  bool shared, std::int64_t tensor_rank, std::int64_t process,
                  const std::string& who, const std::string& advice) {
  if (budget_mib <= 0)
    return;
  const auto& b = e.bundle();
  const auto m = runtime::rank_memory(b, range, shared, e.executor().threads(),
                                      e.executor().kv_geometry().slots, tensor_rank);
  const std::int64_t need = process + m.total();
  check(need <= budget_mib * kMiB, ErrorKind::invalid_input, "--memory-budget", who, " needs ",
        need / kMiB, " MiB: ", m.weights / kMiB, " of weights (layers [", range.begin, ", ",
        range.end, ")", shared ? " and the embedding / lm_head" : "", "), ", m.kv / kMiB,
        tensor_rank >= 0 ? str_cat(" (its shard of every layer)") : std::string(), " of KV cache, ",
        m.activations / kMiB, " of activations, ", process / kMiB,
        " held by the process; more than the budget of ", budget_mib, " MiB", advice);
}

} // namespace

/// One process's part of a pipeline run (see CommandEngine).
class PipelineRun {
public:
  PipelineRun(const ParallelArgs& p, const BundleArgs& source, const std::string& options);
  ~PipelineRun() = default;

#ifdef TPULLM_HAVE_MPI
  std::unique_ptr<mpi::MpiSession> mpi;
  std::unique_ptr<mpi::MpiLink> link;
#endif
  std::unique_ptr<runtime::BundleSession> engine;
  std::vector<runtime::LayerRange> ranges;
  std::unique_ptr<runtime::LayerPipeline> pipe;          // last: stops the other ranks first
  std::unique_ptr<runtime::TensorParallelLayers> tensor; // --parallel tensor's, likewise
  bool tensor_mode = false;
  int rank = 0, ranks = 1;
  std::int64_t slots = 1;
  bool failed = false;
  bool reported = false; ///< rank 0 gathered the layer ranks' reports
};

PipelineRun::PipelineRun(const ParallelArgs& p, const BundleArgs& source,
                         const std::string& options) {
  check(p.mode == "pipeline" || p.mode == "tensor", ErrorKind::invalid_input, "--parallel",
        "takes 'pipeline' or 'tensor', not '", p.mode, "'");
  tensor_mode = p.mode == "tensor";
#ifndef TPULLM_HAVE_MPI
  (void)source;
  (void)options;
  throw Error(ErrorKind::unsupported, "--parallel",
              "this tpullm was built without MPI (install libopenmpi-dev and rebuild)");
#else
  // Refused before MPI starts, alike on every rank (the same command line).
  check(classify_source(source.source) == SourceKind::bundle, ErrorKind::invalid_input,
        "--parallel", "runs a compiled bundle file; compile '", source.source,
        "' first (tpullm compile SOURCE -o FILE.bundle)");
  check_bundle_open_options(source.open);
  mpi = std::make_unique<mpi::MpiSession>();
  rank = mpi->rank();
  ranks = mpi->ranks();
  check(ranks >= 2, ErrorKind::invalid_input, "--parallel " + p.mode,
        "runs on 2 ranks or more: start it with mpirun -np N (this is 1 process)");
  link = std::make_unique<mpi::MpiLink>(*mpi);
  // Every rank opens the bundle, cuts the layers and checks its own weights and budget; then
  // they compare what they did.
  std::string mine;
  const std::int64_t process = proc_status_bytes("VmRSS");
  std::shared_ptr<const bundle::Bundle> bundle;
  std::int64_t my_slots = 1;
  try {
    BundleArgs unchecked = source; // each rank checks the chunks of its own weights below
    unchecked.open.skip_verify = true;
    unchecked.open.verify = false;
    bundle = open_bundle_source(unchecked, rank == 0).bundle;
    const auto& b = *bundle;
    const std::int64_t split = b.model().tensor_parallel;
    if (tensor_mode) {
      check(split == ranks, ErrorKind::invalid_input, source.source,
            split == 1 ? str_cat("was not compiled for tensor parallel: compile it with "
                                 "--tensor-parallel ",
                                 ranks, " (or run it with --parallel pipeline)")
                       : str_cat("is split for ", split, " ranks (compile --tensor-parallel ",
                                 split, "): run it with mpirun -np ", split, ", not ", ranks));
      ranges.assign(static_cast<std::size_t>(ranks), runtime::LayerRange{0, b.model().layers});
    } else {
      check(split == 1, ErrorKind::invalid_input, source.source,
            "is split for tensor parallel over ", split, " ranks: run it with mpirun -np ", split,
            " ... --parallel tensor");
      ranges = p.layer_split.empty()
                   ? runtime::split_layers(runtime::layer_weight_bytes(b), ranks,
                                           runtime::shared_weight_bytes(b))
                   : runtime::parse_layer_split(p.layer_split, b.model().layers, ranks);
    }
    const auto mine_range = ranges[static_cast<std::size_t>(rank)];
    if (!source.open.skip_verify)
      (void)b.verify_weights(source.threads, [&](const ir::Weight& w) {
        return runtime::rank_holds(w.name, mine_range, rank == 0, tensor_mode ? rank : -1);
      });
    my_slots = p.slots > 0 ? p.slots : p.default_slots ? p.default_slots(b) : 1;
  } catch (const Error& e) {
    mine = str_cat("error ", e.what());
  }
  // The KV slots: the fewest any rank's memory allows (every rank must hold every slot).
  slots = std::numeric_limits<std::int64_t>::max();
  for (const std::string& n : mpi->all_gather(std::to_string(my_slots)))
    slots = std::min<std::int64_t>(slots, std::max<std::int64_t>(1, std::stoll(n)));
  if (mine.empty()) {
    try {
      engine = std::make_unique<runtime::BundleSession>(bundle, source.threads, slots);
      check_budget(p.memory_budget_mib, *engine, ranges[static_cast<std::size_t>(rank)], rank == 0,
                   tensor_mode ? rank : -1, process, str_cat("rank ", rank),
                   "; split it over more ranks");
      const auto& b = engine->bundle();
      mine = str_cat("ok bundle ", std::hex, b.metadata_checksum(), std::dec, " of ",
                     b.file_bytes(), " bytes; layers ", ranges_text(ranges), "; ", slots,
                     " KV slots; options ", options);
    } catch (const Error& e) {
      mine = str_cat("error ", e.what());
    }
  }
  const auto all = mpi->all_gather(mine);
  for (int r = 0; r < ranks; ++r) {
    const std::string& s = all[static_cast<std::size_t>(r)];
    std::string problem;
    if (s.starts_with("error "))
      problem = s.substr(6);
    else if (s != all[0] && !all[0].starts_with("error "))
      problem = str_cat("does not run what rank 0 runs: rank 0 has ", all[0].substr(3), "; rank ",
                        r, " has ", s.substr(3));
    if (problem.empty())
      continue;
    failed = true;
    if (rank == 0)
      throw Error(ErrorKind::invalid_input, str_cat("--parallel ", p.mode, ": rank ", r), problem);
    return;
  }
  if (rank == 0 && tensor_mode) {
    const auto& m = engine->bundle().model();
    tensor = std::make_unique<runtime::TensorParallelLayers>(*link, engine->session().stages(),
                                                             runtime::session_dims(m), m.params);
    engine->session().set_remote_layers(tensor.get());
  } else if (rank == 0) {
    pipe = std::make_unique<runtime::LayerPipeline>(
        *link, ranges, engine->bundle().model().hidden,
        runtime::pipeline_max_rows(engine->bundle().model().params));
    engine->session().set_remote_layers(pipe.get());
  }
#endif
}

CommandEngine::CommandEngine(const ParallelArgs& p, const BundleArgs& source,
                             const std::vector<std::string>& args, bool verbose,
                             std::string* checked)
    : args_(p) {
  check(p.layer_split.empty() || p.mode == "pipeline", ErrorKind::invalid_input, "--layer-split",
        "applies only with --parallel pipeline");
  check(p.memory_budget_mib >= 0 && p.memory_budget_mib <= (std::int64_t{1} << 30),
        ErrorKind::invalid_input, "--memory-budget", "must be in [0, 2^30] MiB, got ",
        p.memory_budget_mib);
  if (!p.mode.empty()) {
    pipeline_ = std::make_unique<PipelineRun>(p, source, command_line(args));
    if (checked != nullptr && !pipeline_->failed)
      *checked = describe_ranks();
    return;
  }
  const std::int64_t process = proc_status_bytes("VmRSS");
  const OpenedBundle opened = open_bundle_source(source, verbose, checked);
  own_ =
      std::make_unique<runtime::BundleSession>(opened.bundle, source.threads,
                                               p.slots > 0       ? p.slots
                                               : p.default_slots ? p.default_slots(*opened.bundle)
                                                                 : 1);
  check(own_->bundle().model().tensor_parallel == 1, ErrorKind::invalid_input, source.source,
        "is split for tensor parallel over ", own_->bundle().model().tensor_parallel,
        " ranks: run it with mpirun -np ", own_->bundle().model().tensor_parallel,
        " tpullm ... --parallel tensor");
  check_budget(p.memory_budget_mib, *own_, {0, own_->bundle().model().layers}, true, -1, process,
               "this process",
               "; run it over several processes: mpirun -np N tpullm ... --parallel pipeline "
               "with a bundle file");
}

CommandEngine::~CommandEngine() {
  // The layer ranks wait to hand in their reports: a command that ended early still takes them.
  try {
    (void)rank_reports();
  } catch (...) { // a broken link: the ranks learn it from MPI
  }
}

bool CommandEngine::layer_rank() const {
  return pipeline_ && pipeline_->rank != 0;
}

#ifdef TPULLM_HAVE_MPI
namespace {

/// One rank's report for rank_reports(): a JSON object on one line. Rank 0 (`st` null) runs
/// the command itself: its calls are its round trips, its busy time is not split out.
std::string rank_report(int rank, runtime::LayerRange range, std::int64_t calls,
                        const runtime::PipelineRankStats* st) {
  nlohmann::ordered_json j = {
      {"rank", rank},
      {"layers", {range.begin, range.end}},
      {"calls", calls},
      {"busy_seconds", st ? nlohmann::ordered_json(st->busy_seconds) : nlohmann::ordered_json()},
      {"total_seconds", st ? nlohmann::ordered_json(st->total_seconds) : nlohmann::ordered_json()},
      {"peak_rss_bytes", proc_status_bytes("VmHWM")}};
  return j.dump();
}

/// A tensor-parallel rank's report: every rank runs every layer's share of every call.
std::string tensor_report(int rank, std::int64_t layers, const runtime::TensorParallelStats& st) {
  nlohmann::ordered_json j = {{"rank", rank},
                              {"layers", {0, layers}},
                              {"calls", st.calls},
                              {"busy_seconds", st.seconds - st.reduce_seconds},
                              {"all_reduces", st.all_reduces},
                              {"all_reduce_bytes", st.reduced_bytes},
                              {"all_reduce_seconds", st.reduce_seconds},
                              {"peak_rss_bytes", proc_status_bytes("VmHWM")}};
  if (rank != 0)
    j["total_seconds"] = st.total_seconds;
  return j.dump();
}

} // namespace
#endif

int CommandEngine::serve_layers() {
#ifdef TPULLM_HAVE_MPI
  PipelineRun& m = *pipeline_;
  // The ranks disagreed: rank 0 names the problem and exits non-zero, which is mpirun's status.
  // A layer rank that exited non-zero first would make mpirun end rank 0 before it printed.
  if (m.failed)
    return kOk;
  runtime::PipelineRankStats st;
  runtime::TensorParallelStats ts;
  const auto range = m.ranges[static_cast<std::size_t>(m.rank)];
  try {
    const auto& b = m.engine->bundle();
    if (m.tensor_mode)
      ts = runtime::serve_tensor_rank(*m.link, m.engine->session().stages(),
                                      runtime::session_dims(b.model()), b.model().params);
    else
      st = runtime::serve_pipeline_rank(*m.link, m.engine->session().stages(), range,
                                        b.model().hidden, b.model().params);
  } catch (const Error& e) {
    // The link broke: the run cannot go on, and the others may be waiting on this rank.
    std::cerr << "tpullm: " << (m.tensor_mode ? "tensor-parallel" : "pipeline") << " rank "
              << m.rank << ": " << e.what() << "\n";
    m.mpi->abort(kCheckFailed);
  }
  if (args_.rank_reports)
    (void)m.mpi->all_gather(m.tensor_mode ? tensor_report(m.rank, range.end, ts)
                                          : rank_report(m.rank, range, st.calls, &st));
  return peak_within_budget(std::cerr) ? kOk : kCheckFailed;
#else
  return kCheckFailed;
#endif
}

std::vector<std::string> CommandEngine::rank_reports() {
#ifdef TPULLM_HAVE_MPI
  if (!pipeline_ || !(pipeline_->pipe || pipeline_->tensor) || !args_.rank_reports ||
      pipeline_->reported)
    return {};
  PipelineRun& m = *pipeline_;
  m.reported = true;
  if (m.tensor) {
    m.tensor->stop();
    return m.mpi->all_gather(tensor_report(0, m.ranges.front().end, m.tensor->stats()));
  }
  m.pipe->stop();
  return m.mpi->all_gather(rank_report(0, m.ranges.front(), m.pipe->stats().round_trips, nullptr));
#else
  return {};
#endif
}

runtime::RemoteLayers* CommandEngine::pipeline() {
  if (!pipeline_)
    return nullptr;
  if (pipeline_->tensor)
    return pipeline_->tensor.get();
  return pipeline_->pipe.get();
}

bool CommandEngine::tensor_parallel() const {
  return pipeline_ && pipeline_->tensor_mode;
}

const runtime::TensorParallelStats* CommandEngine::tensor_stats() const {
  return pipeline_ && pipeline_->tensor ? &pipeline_->tensor->stats() : nullptr;
}

std::int64_t CommandEngine::slots() const {
  return pipeline_ ? pipeline_->slots : own_->executor().kv_geometry().slots;
}

const runtime::PipelineStats* CommandEngine::pipeline_stats() const {
  return pipeline_ && pipeline_->pipe ? &pipeline_->pipe->stats() : nullptr;
}

runtime::BundleSession& CommandEngine::engine() {
  if (own_)
    return *own_;
  check(pipeline_ && pipeline_->engine && !pipeline_->failed && pipeline_->rank == 0,
        ErrorKind::internal, "pipeline", "engine() on a layer rank");
  return *pipeline_->engine;
}

std::string CommandEngine::describe_ranks() const {
  if (!pipeline_)
    return {};
  if (pipeline_->tensor_mode)
    return str_cat("tensor parallel over ", pipeline_->ranks, " ranks, every rank its share of ",
                   pipeline_->ranges.front().end, " layers");
  return str_cat("pipeline over ", pipeline_->ranks, " ranks, layers ",
                 ranges_text(pipeline_->ranges));
}

std::string CommandEngine::describe() const {
  if (pipeline_ && pipeline_->tensor) {
    const auto& st = pipeline_->tensor->stats();
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(3);
    s << "tensor parallel: " << pipeline_->ranks << " ranks; " << st.calls << " calls, "
      << st.all_reduces << " all-reduces of " << st.reduced_bytes << " bytes on rank 0, "
      << st.reduce_seconds << " s in them (of " << st.seconds << " s in calls); " << st.bytes_sent
      << " bytes of calls sent by rank 0";
    return s.str();
  }
  if (!pipeline_ || !pipeline_->pipe)
    return {};
  const auto& st = pipeline_->pipe->stats();
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(3);
  s << "pipeline: " << pipeline_->ranks << " ranks, layers " << ranges_text(pipeline_->ranges)
    << "; " << st.round_trips << " round trips (" << st.bytes_sent << " bytes sent by rank 0), "
    << st.seconds << " s in the other ranks' layers and the hops";
  if (st.most_in_flight > 1)
    s << "; up to " << st.most_in_flight << " calls in flight";
  return s.str();
}

bool CommandEngine::peak_within_budget(std::ostream& err) const {
  if (args_.memory_budget_mib <= 0)
    return true;
  const std::int64_t peak = proc_status_bytes("VmHWM");
  if (peak <= args_.memory_budget_mib * kMiB)
    return true;
  err << "tpullm: --memory-budget: "
      << (pipeline_ ? str_cat("rank ", pipeline_->rank) : std::string("this process"))
      << " peaked at " << peak / kMiB << " MiB resident, more than the budget of "
      << args_.memory_budget_mib << " MiB\n";
  return false;
}

} // namespace tpullm::cli
