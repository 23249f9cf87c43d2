// The cost of one pipeline hop (docs/distributed.md): run under `mpirun -np N`, rank 0 sends a
// message of each size round the ranks (0 -> 1 -> ... -> N-1 -> 0) through the MpiLink a
// pipeline run uses (its polling receive included), and prints the time per hop beside this
// run's ceiling for it, one in-process memcpy of the same bytes (a hop between processes on one
// host copies at least once). Sizes: a decode token of the 0.5B and 1B shapes, a token of a
// 70B shape (hidden 8192), a 128-row prompt segment of the 0.5B shape (40-byte header, and per
// row its hidden state, position and KV slot), and one row of logits of a 151936-token
// vocabulary: what the last rank would send back per token if it ran the lm_head.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tpullm/mpi/mpi_link.hpp"

using namespace tpullm;
using clock_type = std::chrono::steady_clock;

int main() {
  mpi::MpiSession session;
  mpi::MpiLink link(session);
  const int rank = session.rank(), ranks = session.ranks();
  if (ranks < 2) {
    std::fprintf(stderr, "run it under mpirun -np N with N >= 2\n");
    return 2;
  }
  struct Case {
    const char* what;
    std::size_t bytes;
    int rounds;
  };
  const Case cases[] = {
      {"decode token, hidden 896 (0.5B)", 40 + 896 * 4 + 8, 2000},
      {"decode token, hidden 2048 (1B)", 40 + 2048 * 4 + 8, 2000},
      {"decode token, hidden 8192 (70B)", 40 + 8192 * 4 + 8, 1000},
      {"prompt segment 128 x 896 (0.5B)", 40 + 128 * (896 * 4 + 8), 200},
      {"logits row, vocab 151936", 40 + 151936 * 4, 500},
  };
  std::vector<std::byte> buf(
      std::max_element(std::begin(cases), std::end(cases), [](const Case& a, const Case& b) {
        return a.bytes < b.bytes;
      })->bytes);
  std::vector<std::byte> copy(buf.size());
  if (rank == 0)
    std::printf("%-34s %10s %14s %14s %16s\n", "message", "bytes", "us per hop", "min us/hop",
                "memcpy us (ceil)");
  for (const Case& c : cases) {
    const std::span<std::byte> msg(buf.data(), c.bytes);
    std::vector<double> trips;
    for (int i = 0; i < c.rounds + 20; ++i) { // the first 20 warm up
      if (rank == 0) {
        const auto t0 = clock_type::now();
        link.send(1, msg);
        (void)link.recv(ranks - 1, msg);
        if (i >= 20)
          trips.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
      } else {
        const std::size_t n = link.recv(rank - 1, msg);
        link.send(rank + 1 == ranks ? 0 : rank + 1, std::span<const std::byte>(buf.data(), n));
      }
    }
    if (rank != 0)
      continue;
    // The ceiling of this run: the best of many in-process copies of the same bytes.
    double best_copy = 1e9;
    for (int i = 0; i < 200; ++i) {
      const auto t0 = clock_type::now();
      std::memcpy(copy.data(), buf.data(), c.bytes);
      const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
      best_copy = std::min(best_copy, s);
      buf[static_cast<std::size_t>(i) % c.bytes] = copy[0]; // keep the copy observable
    }
    std::sort(trips.begin(), trips.end());
    const double median = trips[trips.size() / 2] / ranks * 1e6;
    const double fastest = trips.front() / ranks * 1e6;
    std::printf("%-34s %10zu %14.1f %14.1f %16.2f\n", c.what, c.bytes, median, fastest,
                best_copy * 1e6);
  }
  if (rank == 0)
    std::printf("(%d ranks; median and fastest round trip divided by its %d hops)\n", ranks, ranks);
  return 0;
}
