#pragma once
// The engine of the commands that run a bundle (run, chat): one process, or a rank of a
// pipeline run (`--parallel pipeline` under `mpirun -np N`, docs/distributed.md), where rank 0
// runs the command as usual with its later layers on ranks 1..N-1, which run their layers
// until rank 0 is done; or a tensor-parallel run (`--parallel tensor`), where every rank runs
// its share of every layer (runtime/tensor_parallel.hpp) and rank 0 the rest. --memory-budget
// bounds what each process holds.
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "bundle_source.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/layer_pipeline.hpp"
#include "tpullm/runtime/tensor_parallel.hpp"

namespace tpullm::cli {

/// --parallel, --layer-split and --memory-budget as given.
struct ParallelArgs {
  std::string mode;                   ///< --parallel: empty (one process), "pipeline" or "tensor"
  std::string layer_split;            ///< --layer-split: layer counts per rank (empty: by bytes)
  std::int64_t memory_budget_mib = 0; ///< --memory-budget: MiB per process (0: none)
  /// Conversations every rank's executor holds KV caches for (not an option: serve's --slots).
  /// 0: each rank asks `default_slots` of the opened bundle and the ranks take the fewest.
  std::int64_t slots = 1;
  std::function<std::int64_t(const bundle::Bundle&)> default_slots; ///< for slots 0
  /// Not an option: the layer ranks hand rank 0 their report when it stops them (rank 0 calls
  /// rank_reports(), or its engine's destructor does, so that no rank waits for it).
  bool rank_reports = false;
};

/// The options --parallel, --layer-split and --memory-budget, writing into `a`; `budget_alone`:
/// whether --memory-budget applies to one process too (serve: only with --parallel).
boost::program_options::options_description parallel_options(ParallelArgs& a,
                                                             bool budget_alone = true);

class PipelineRun;

/// What a command runs on. See the file comment.
class CommandEngine {
public:
  /// One process: opens `source` as open_bundle_source does (`verbose`, `checked` likewise).
  /// With p.mode "pipeline" or "tensor": starts MPI and opens `source` (a bundle file; a checkpoint
  /// or GGUF is refused) on every rank, each checking the weights of its own layers; the ranks
  /// agree before any layer runs (same content, same command line `args`, each opened it and fits
  /// its budget). Throws Error(invalid_input) for a bad option, a process or rank whose share
  /// exceeds --memory-budget (counting what the process holds already), a rank that could not
  /// open the bundle or opened another one (on rank 0; the other ranks then end quietly, status 0),
  /// fewer than 2 ranks; Error(unsupported) for --parallel in a build without MPI.
  CommandEngine(const ParallelArgs& p, const BundleArgs& source,
                const std::vector<std::string>& args, bool verbose, std::string* checked);
  ~CommandEngine();
  CommandEngine(const CommandEngine&) = delete;
  CommandEngine& operator=(const CommandEngine&) = delete;

  /// True on ranks 1..N-1 of a pipeline: the caller returns serve_layers() and nothing else.
  bool layer_rank() const;
  /// A layer rank's work: runs its layers until rank 0 stops, then checks its peak memory
  /// against --memory-budget; the exit status (0 when the ranks disagreed: rank 0 says why and
  /// fails). With ParallelArgs::rank_reports, it then hands rank 0 its report (rank_reports(),
  /// called there).
  int serve_layers();
  /// Rank 0 of a pipeline with ParallelArgs::rank_reports: stops the pipeline (the session can
  /// run no more layers) and returns every rank's report, rank 0's first, each a JSON object
  /// {rank, layers [begin, end), calls, busy_seconds, total_seconds, peak_rss_bytes}; once.
  /// Empty alone, without rank_reports, or called again.
  std::vector<std::string> rank_reports();
  /// Rank 0's pipeline traffic (null alone and under --parallel tensor).
  const runtime::PipelineStats* pipeline_stats() const;
  /// Rank 0's side of the pipeline or of tensor parallel (null alone and on the other ranks):
  /// what a SlotPool over engine().executor() sends its layers to.
  runtime::RemoteLayers* pipeline();
  /// True under --parallel tensor.
  bool tensor_parallel() const;
  /// Rank 0's tensor-parallel traffic (null otherwise).
  const runtime::TensorParallelStats* tensor_stats() const;
  /// The KV slots of the engine's executor (ParallelArgs::slots as the ranks agreed on it).
  std::int64_t slots() const;
  /// The engine (rank 0's in a pipeline, its session sending the later layers down).
  runtime::BundleSession& engine();
  /// The `pipeline:` summary line of rank 0 (ranks, layers, round trips, time); empty alone.
  std::string describe() const;
  /// "pipeline over N ranks, layers [0, a) [a, b) ..."; empty alone.
  std::string describe_ranks() const;
  /// --memory-budget after the work: false (and one line on `err`) when this process's peak
  /// resident set exceeded it.
  bool peak_within_budget(std::ostream& err) const;

private:
  ParallelArgs args_;
  std::unique_ptr<runtime::BundleSession> own_;
  std::unique_ptr<PipelineRun> pipeline_;
};

} // namespace tpullm::cli
