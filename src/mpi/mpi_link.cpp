// Out-of-line definitions of tpullm/mpi/mpi_link.hpp (the tpullm_mpi library, built with MPI).
#include "tpullm/mpi/mpi_link.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

#include "tpullm/support/error.hpp"

namespace tpullm::mpi {
namespace {

constexpr int kTag = 7001;

void ok(int rc, const char* what) {
  if (rc == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw Error(ErrorKind::io, "MPI",
              str_cat(what, ": ", std::string(text, static_cast<std::size_t>(n))));
}

} // namespace

MpiSession::MpiSession() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  check(!initialized, ErrorKind::internal, "MPI", "started twice in one process");
  int provided = 0;
  // Serialized: `serve` makes its calls on its scheduler thread, the others on the main thread,
  // never two at once.
  ok(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  // Errors come back as codes (thrown as Error) instead of ending the process unexplained.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
}

MpiSession::~MpiSession() {
  MPI_Finalize();
}

std::vector<std::string> MpiSession::all_gather(const std::string& mine) const {
  check(mine.size() < INT_MAX, ErrorKind::internal, "MPI", "a gathered string is too long");
  int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<std::size_t>(ranks_)), offsets(sizes.size());
  ok(MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  long long total = 0;
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    offsets[r] = static_cast<int>(total);
    total += sizes[r];
    check(total < INT_MAX, ErrorKind::internal, "MPI", "gathered strings too long");
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  ok(MPI_Allgatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR,
                    MPI_COMM_WORLD),
     "MPI_Allgatherv");
  std::vector<std::string> out;
  for (std::size_t r = 0; r < sizes.size(); ++r)
    out.push_back(
        all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(sizes[r])));
  return out;
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code); // MPI_Abort does not return; this keeps [[noreturn]] honest
}

struct MpiLink::Send {
  std::vector<std::byte> bytes;
  MPI_Request request = MPI_REQUEST_NULL;
};

MpiLink::MpiLink(const MpiSession& s) : rank_(s.rank()), ranks_(s.ranks()) {}

MpiLink::~MpiLink() {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    while (!pending_.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
      progress();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  } catch (...) { // a broken link: nothing more to deliver
  }
}

void MpiLink::progress() {
  std::erase_if(pending_, [](const std::unique_ptr<Send>& s) {
    int done = 0;
    ok(MPI_Test(&s->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  });
}

void MpiLink::send(int to, std::span<const std::byte> bytes) {
  check(bytes.size() < INT_MAX, ErrorKind::internal, "MPI", "a message of ", bytes.size(),
        " bytes is too long");
  progress();
  auto s = std::make_unique<Send>();
  s->bytes.assign(bytes.begin(), bytes.end());
  ok(MPI_Isend(s->bytes.data(), static_cast<int>(s->bytes.size()), MPI_BYTE, to, kTag,
               MPI_COMM_WORLD, &s->request),
     "MPI_Isend");
  pending_.push_back(std::move(s));
}

std::size_t MpiLink::recv(int from, std::span<std::byte> buffer) {
  // Spin on the probe for a short while (a hop of a decode step takes microseconds), then poll
  // with growing sleeps up to 200 us.
  MPI_Status st;
  int flag = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(10);
  while (true) {
    progress();
    ok(MPI_Iprobe(from, kTag, MPI_COMM_WORLD, &flag, &st), "MPI_Iprobe");
    if (flag)
      break;
    if (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(50))
      continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  check(count >= 0 && static_cast<std::size_t>(count) <= buffer.size(), ErrorKind::io, "MPI",
        "a message of ", count, " bytes from rank ", from, " exceeds the ", buffer.size(),
        " bytes expected");
  ok(MPI_Recv(buffer.data(), count, MPI_BYTE, from, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
     "MPI_Recv");
  return static_cast<std::size_t>(count);
}

void MpiLink::all_reduce_sum(std::span<float> values) {
  check(values.size() < INT_MAX, ErrorKind::internal, "MPI", "an all-reduce of ", values.size(),
        " values is too long");
  progress();
  ok(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_FLOAT, MPI_SUM,
                   MPI_COMM_WORLD),
     "MPI_Allreduce");
}

} // namespace tpullm::mpi
