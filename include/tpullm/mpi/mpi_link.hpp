#pragma once
/// MPI under a pipeline run (runtime/layer_pipeline.hpp, docs/distributed.md): the process-wide
/// MPI session and a PipelineLink over MPI_COMM_WORLD. Built into `tpullm_mpi` only when CMake
/// finds an MPI implementation (Open MPI or MPICH); this header does not include <mpi.h>.

#include <memory>
#include <string>
#include <vector>

#include "tpullm/runtime/layer_pipeline.hpp"

namespace tpullm::mpi {

/// MPI_Init_thread (serialized: any thread may call MPI, one at a time) for the process's life of
/// this object; MPI_Finalize when it ends. One at a time per process. Throws Error(io) when MPI
/// cannot start.
class MpiSession {
public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }   ///< in MPI_COMM_WORLD
  int ranks() const { return ranks_; } ///< size of MPI_COMM_WORLD
  /// Every rank's `mine`, in rank order (a collective: every rank must call it).
  std::vector<std::string> all_gather(const std::string& mine) const;
  /// MPI_Abort(MPI_COMM_WORLD, code): ends every rank of the run.
  [[noreturn]] void abort(int code) const;

private:
  int rank_ = 0, ranks_ = 1;
};

/// A PipelineLink over MPI_COMM_WORLD. A send copies the message and returns (MPI_Isend of the
/// copy, freed once MPI completes it), so that ranks sending to each other with several calls
/// in flight never wait on each other's receives (blocking sends of messages past MPI's eager
/// size would deadlock there). A receive polls (MPI_Iprobe) and sleeps between polls once a
/// message is late, so that a rank waiting for its turn leaves its core to the ranks computing
/// (a busy-waiting MPI receive on an oversubscribed host halves their speed).
class MpiLink : public runtime::PipelineLink {
public:
  explicit MpiLink(const MpiSession& s);
  /// Waits up to 10 s for the sends still in progress (a peer gone by then is left).
  ~MpiLink() override;
  MpiLink(const MpiLink&) = delete;
  MpiLink& operator=(const MpiLink&) = delete;
  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  void send(int to, std::span<const std::byte> bytes) override;
  std::size_t recv(int from, std::span<std::byte> buffer) override;
  /// MPI_Allreduce (MPI_SUM of MPI_FLOAT, in place) over MPI_COMM_WORLD.
  void all_reduce_sum(std::span<float> values) override;
  /// Sends not yet completed by MPI.
  std::size_t sends_in_progress() const { return pending_.size(); }

private:
  struct Send; ///< a copied message and its MPI request
  /// Frees the sends MPI has completed.
  void progress();

  int rank_, ranks_;
  std::vector<std::unique_ptr<Send>> pending_;
};

} // namespace tpullm::mpi
