#pragma once
// `--parallel pipeline` of the commands that run a bundle (docs/distributed.md): started under
// `mpirun -np N`, rank 0 runs the command as usual with its later layers on ranks 1..N-1, which
// run their layers until rank 0 is done.
#include <memory>
#include <string>

#include <boost/program_options.hpp>

#include "bundle_source.hpp"
#include "tpullm/runtime/bundle_session.hpp"

namespace tpullm::cli {

/// --parallel and --layer-split as given.
struct ParallelArgs {
  std::string mode;        ///< --parallel: empty (one process) or "pipeline"
  std::string layer_split; ///< --layer-split: layer counts per rank (empty: by weight bytes)
};

/// The options --parallel and --layer-split, writing into `a`.
boost::program_options::options_description parallel_options(ParallelArgs& a);

/// One process's part of a pipeline run. Every rank opens the same bundle file and they agree
/// before any layer runs (same content, same options, each opened it); then rank 0 runs the
/// command with session() and the other ranks serve their layers (serve_layers()).
class PipelineRun {
public:
  /// Starts MPI and opens `source` (a bundle file; a checkpoint or GGUF is refused) on `threads`
  /// per rank. `options` (the command line) must be the same on every rank. Throws
  /// Error(unsupported) in a build without MPI, Error(invalid_input) for fewer than 2 ranks, a
  /// layer split that does not fit, a rank that could not open the bundle or opened another one
  /// (on rank 0; the other ranks then return failed()).
  PipelineRun(const ParallelArgs& p, const BundleArgs& source, const std::string& options);
  ~PipelineRun();
  PipelineRun(const PipelineRun&) = delete;
  PipelineRun& operator=(const PipelineRun&) = delete;

  /// True on ranks 1..N-1: the caller returns serve_layers() and does nothing else.
  bool layer_rank() const;
  /// On a layer rank whose agreement failed (rank 0 reports it): exit 1 quietly.
  bool failed() const;
  /// A layer rank's work: runs its layers until rank 0 stops; the exit status.
  int serve_layers();
  /// Rank 0's engine, its session already sending the later layers down the pipeline.
  runtime::BundleSession& engine();
  /// Rank 0's summary: ranks, their layers, round trips and the time in them.
  std::string describe() const;
  /// "pipeline over N ranks, layers [0, a) [a, b) ...".
  std::string describe_ranks() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace tpullm::cli
