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
///   tpullm::bench::report(state, amount, threads, Ceiling::amx_bf16);           // any ceiling
/// Each sets a rate counter (`bytes_per_second` or `flops`), `roofline_frac` = achieved rate /
/// the ceiling for that thread count (threads >= 2 compare against the 2-thread ceiling), and a
/// label naming the ceiling and its value, so every printed figure states what it is a fraction
/// of. The read ceiling of a row is measured again right after it (machine::read_ceiling_now:
/// a VM's memory bandwidth moves within minutes); the label shows that and the start-up figure.

#include <string>

#include <benchmark/benchmark.h>

#include "tpullm/devtools/ceilings.hpp"

namespace tpullm::bench {

using machine::Ceiling;
using machine::ceiling_value;
using machine::Ceilings;
using machine::ceilings;
using machine::disable_ceilings;
using machine::dram_rotation_bytes;
using machine::measure_ceilings;
using machine::print_ceilings;

/// Sets the rate counter, `roofline_frac` against `which` for `threads`, and a label such as
/// "of read 2t 38.7 GB/s". `amount` is bytes (read) or flops / ops (compute ceilings).
void report(benchmark::State& state, double amount_per_iter, int threads, Ceiling which);

/// report(state, bytes, threads, Ceiling::read).
void report_bandwidth(benchmark::State& state, double bytes_per_iter, int threads);

/// report(state, flops, threads, Ceiling::f32_fma).
void report_compute(benchmark::State& state, double flops_per_iter, int threads);

} // namespace tpullm::bench
