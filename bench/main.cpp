// Custom main of tpullm-bench-kernels: measures this machine's ceilings (bench/roofline.hpp),
// prints them, then runs the benchmarks. Flags of our own (removed before Google Benchmark sees
// argv):
//   --tpullm_full     also register the large configurations (Llama-3-8B at M = 512, 1 thread
//                     GEMMs, every format at every M, and the lm_head projections: the Llama-3-8B
//                     lm_head is 4096 x 128256, 2.1 GB in f32, and needs ~5 GB while packing)
//   --tpullm_no_ceilings  skip the ceiling measurement (roofline_frac is then 0)
// Everything else is Google Benchmark's: --benchmark_filter=<regex>, --benchmark_min_time=<s>,
// --benchmark_format=json, ... (see --help).
#include <cstring>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "roofline.hpp"

namespace tpullm::bench {
void register_matmul_benchmarks(bool full); // bench_matmul.cpp
void register_mlp_benchmarks(bool full);    // bench_mlp.cpp
} // namespace tpullm::bench

int main(int argc, char** argv) {
  bool full = false, ceilings = true;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tpullm_full") == 0)
      full = true;
    else if (std::strcmp(argv[i], "--tpullm_no_ceilings") == 0)
      ceilings = false;
    else
      args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data()))
    return 1;
  if (ceilings)
    tpullm::bench::print_ceilings(tpullm::bench::measure_ceilings());
  else
    tpullm::bench::disable_ceilings();
  tpullm::bench::register_matmul_benchmarks(full);
  tpullm::bench::register_mlp_benchmarks(full);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
