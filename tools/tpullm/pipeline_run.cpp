// --parallel pipeline: MPI, the ranks' agreement, and each rank's part (pipeline_run.hpp).
#include "pipeline_run.hpp"

#include <iostream>
#include <sstream>

#include "tpullm/runtime/layer_pipeline.hpp"
#include "tpullm/runtime/layer_split.hpp"
#ifdef TPULLM_HAVE_MPI
#include "tpullm/mpi/mpi_link.hpp"
#endif

namespace tpullm::cli {

namespace po = boost::program_options;

po::options_description parallel_options(ParallelArgs& a) {
  po::options_description o("multi-process runs (start with mpirun -np N; docs/distributed.md)");
  o.add_options()("parallel", po::value(&a.mode),
                  "'pipeline': each MPI rank runs a contiguous range of the layers, rank 0 "
                  "also the embedding, the lm_head and the text side (BUNDLE must be a bundle "
                  "file)")("layer-split", po::value(&a.layer_split),
                           "with --parallel pipeline: layers per rank, comma-separated, in rank "
                           "order (default: balanced by weight bytes, rank 0's embedding and "
                           "lm_head counted)");
  return o;
}

struct PipelineRun::Impl {
#ifdef TPULLM_HAVE_MPI
  std::unique_ptr<mpi::MpiSession> mpi;
  std::unique_ptr<mpi::MpiLink> link;
#endif
  std::unique_ptr<runtime::BundleSession> engine;
  std::vector<runtime::LayerRange> ranges;
  std::unique_ptr<runtime::LayerPipeline> pipe; // last: stops the other ranks first
  int rank = 0, ranks = 1;
  bool failed = false;
};

namespace {

std::string ranges_text(const std::vector<runtime::LayerRange>& ranges) {
  std::ostringstream s;
  for (std::size_t r = 0; r < ranges.size(); ++r)
    s << (r ? " " : "") << "[" << ranges[r].begin << ", " << ranges[r].end << ")";
  return s.str();
}

} // namespace

PipelineRun::PipelineRun(const ParallelArgs& p, const BundleArgs& source,
                         const std::string& options)
    : impl_(std::make_unique<Impl>()) {
  check(p.mode == "pipeline", ErrorKind::invalid_input, "--parallel",
        "takes 'pipeline' (tensor parallel is not built yet), not '", p.mode, "'");
#ifndef TPULLM_HAVE_MPI
  (void)source;
  (void)options;
  throw Error(ErrorKind::unsupported, "--parallel",
              "this tpullm was built without MPI (install libopenmpi-dev and rebuild)");
#else
  Impl& m = *impl_;
  // Refused before MPI starts, alike on every rank (the same command line).
  check(classify_source(source.source) == SourceKind::bundle, ErrorKind::invalid_input,
        "--parallel", "runs a compiled bundle file; compile '", source.source,
        "' first (tpullm compile SOURCE -o FILE.bundle)");
  m.mpi = std::make_unique<mpi::MpiSession>();
  m.rank = m.mpi->rank();
  m.ranks = m.mpi->ranks();
  check(m.ranks >= 2, ErrorKind::invalid_input, "--parallel pipeline",
        "runs on 2 ranks or more: start it with mpirun -np N (this is 1 process)");
  m.link = std::make_unique<mpi::MpiLink>(*m.mpi);
  // Every rank opens the bundle and cuts the layers; then they compare what they did.
  std::string mine;
  try {
    const OpenedBundle opened = open_bundle_source(source, m.rank == 0);
    m.engine = std::make_unique<runtime::BundleSession>(opened.bundle, source.threads);
    const auto& b = m.engine->bundle();
    const std::int64_t layers = b.model().layers;
    m.ranges = p.layer_split.empty()
                   ? runtime::split_layers(runtime::layer_weight_bytes(b), m.ranks,
                                           runtime::shared_weight_bytes(b))
                   : runtime::parse_layer_split(p.layer_split, layers, m.ranks);
    mine = str_cat("ok bundle ", std::hex, b.metadata_checksum(), std::dec, " of ", b.file_bytes(),
                   " bytes; layers ", ranges_text(m.ranges), "; options ", options);
  } catch (const Error& e) {
    mine = str_cat("error ", e.what());
  }
  const auto all = m.mpi->all_gather(mine);
  for (int r = 0; r < m.ranks; ++r) {
    const std::string& s = all[static_cast<std::size_t>(r)];
    std::string problem;
    if (s.starts_with("error "))
      problem = s.substr(6);
    else if (s != all[0] && !all[0].starts_with("error "))
      problem = str_cat("does not run what rank 0 runs: rank 0 has ", all[0].substr(3), "; rank ",
                        r, " has ", s.substr(3));
    if (problem.empty())
      continue;
    m.failed = true;
    if (m.rank == 0)
      throw Error(ErrorKind::invalid_input, str_cat("--parallel pipeline: rank ", r), problem);
    return;
  }
  if (m.rank == 0) {
    m.pipe = std::make_unique<runtime::LayerPipeline>(
        *m.link, m.ranges, m.engine->bundle().model().hidden,
        m.engine->bundle().model().params.max_input_length);
    m.engine->session().set_remote_layers(m.pipe.get());
  }
#endif
}

PipelineRun::~PipelineRun() = default;

bool PipelineRun::layer_rank() const {
  return impl_->rank != 0;
}
bool PipelineRun::failed() const {
  return impl_->failed;
}

int PipelineRun::serve_layers() {
#ifdef TPULLM_HAVE_MPI
  Impl& m = *impl_;
  if (m.failed)
    return kCheckFailed;
  try {
    const auto& b = m.engine->bundle();
    (void)runtime::serve_pipeline_rank(*m.link, m.engine->session().stages(),
                                       m.ranges[static_cast<std::size_t>(m.rank)], b.model().hidden,
                                       b.model().params);
  } catch (const Error& e) {
    // The link broke: the run cannot go on, and the others may be waiting on this rank.
    std::cerr << "tpullm: pipeline rank " << m.rank << ": " << e.what() << "\n";
    m.mpi->abort(kCheckFailed);
  }
  return kOk;
#else
  return kCheckFailed;
#endif
}

runtime::BundleSession& PipelineRun::engine() {
  check(impl_->engine && !impl_->failed && impl_->rank == 0, ErrorKind::internal, "pipeline",
        "engine() on a layer rank");
  return *impl_->engine;
}

std::string PipelineRun::describe_ranks() const {
  return str_cat("pipeline over ", impl_->ranks, " ranks, layers ", ranges_text(impl_->ranges));
}

std::string PipelineRun::describe() const {
  const Impl& m = *impl_;
  if (!m.pipe)
    return {};
  const auto& st = m.pipe->stats();
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(3);
  s << "pipeline: " << m.ranks << " ranks, layers " << ranges_text(m.ranges) << "; "
    << st.round_trips << " round trips (" << st.bytes_sent << " bytes sent by rank 0), "
    << st.seconds << " s in the other ranks' layers and the hops";
  return s.str();
}

} // namespace tpullm::cli
