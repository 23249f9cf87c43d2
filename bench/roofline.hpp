#pragma once
/// Machine ceilings for the kernel benchmarks, measured once at start-up by the bench binary's
/// main (bench/main.cpp) before any benchmark runs, and the counters that relate a benchmark to
/// them.
///
/// Use from a benchmark (register it with ->UseRealTime(): the kernels run on OpenMP threads, so
/// the main thread's CPU time is not the elapsed time):
///   for (auto _ : state) kernel(...);
///   tpullm::bench::report_bandwidth(state, bytes_read_per_iteration, threads);  // memory-bound
///   tpullm::bench::report_compute(state, flops_per_iteration, threads);         // compute-bound
/// Both set a rate counter (`bytes_per_second` or `flops`) and `roofline_frac` = achieved rate /
/// the ceiling for that thread count (threads >= 2 compare against the 2-thread ceiling).

#include <benchmark/benchmark.h>

namespace tpullm::bench {

/// Ceilings of this machine (0 when an instruction is not available).
struct Ceilings {
  double read_gbs_1t = 0;    ///< streaming read bandwidth, 1 thread, GB/s (1e9 bytes/s)
  double read_gbs_2t = 0;    ///< streaming read bandwidth, 2 threads, GB/s
  double f32_gflops_1t = 0;  ///< f32 FMA peak, 1 thread, GFLOP/s (FMA = 2 flops)
  double f32_gflops_2t = 0;  ///< f32 FMA peak, 2 threads, GFLOP/s
  double bf16_gflops_2t = 0; ///< vdpbf16ps peak, 2 threads, GFLOP/s (0 without AVX512_BF16)
  double int8_gops_2t = 0;   ///< vpdpbusd peak, 2 threads, GOP/s (0 without AVX512_VNNI)
};

/// Measures the ceilings (about 2 s; called by main before the benchmarks run).
const Ceilings& measure_ceilings();

/// The measured ceilings (measures them on first use if main has not; all zero after
/// disable_ceilings()).
const Ceilings& ceilings();

/// Skips the measurement: ceilings() stays zero and roofline_frac reports 0.
void disable_ceilings();

/// Prints the ceilings to stdout in one block.
void print_ceilings(const Ceilings& c);

/// Sets `bytes_per_second` (rate) and `roofline_frac` vs the read bandwidth of `threads`.
void report_bandwidth(benchmark::State& state, double bytes_per_iter, int threads);

/// Sets `flops` (rate) and `roofline_frac` vs the f32 FMA peak of `threads`.
void report_compute(benchmark::State& state, double flops_per_iter, int threads);

} // namespace tpullm::bench
