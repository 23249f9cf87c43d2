// The Google Benchmark counters of bench/roofline.hpp: a figure and the ceiling it is a fraction
// of.
#include "roofline.hpp"

#include <cstdio>

namespace tpullm::bench {

void report(benchmark::State& state, double amount_per_iter, int threads, Ceiling which) {
  const double start = ceiling_value(which, threads);
  // Read rows: against the read sweep taken right after the row, not the start-up one (a VM's
  // bandwidth moves within minutes); the start-up figure stays in the label. Google Benchmark
  // calls this after each of its runs of the row, so the sweep (~12 x
  // machine::read_now_min_bytes() read) repeats.
  double ceil = start;
  if (which == Ceiling::read && start > 0) {
    const double now = machine::read_ceiling_now(threads >= 2 ? 2 : 1).gbs * 1e9;
    if (now > 0)
      ceil = now;
  }
  const char* name = "read";
  const char* unit = "GB/s";
  switch (which) {
  case Ceiling::read:
    break;
  case Ceiling::f32_fma:
    name = "f32-FMA";
    unit = "GFLOP/s";
    break;
  case Ceiling::bf16_dot:
    name = "bf16-vdpbf16ps";
    unit = "GFLOP/s";
    break;
  case Ceiling::amx_bf16:
    name = "AMX-bf16";
    unit = "GFLOP/s";
    break;
  case Ceiling::amx_int8:
    name = "AMX-int8";
    unit = "GOP/s";
    break;
  case Ceiling::int8_vnni:
    name = "int8-VNNI512";
    unit = "GOP/s";
    break;
  case Ceiling::int8_avx_vnni:
    name = "int8-AVX-VNNI";
    unit = "GOP/s";
    break;
  case Ceiling::int8_avx2:
    name = "int8-AVX2-vpmaddwd";
    unit = "GOP/s";
    break;
  }
  state.counters[which == Ceiling::read ? "bytes_per_second" : "flops"] =
      benchmark::Counter(amount_per_iter, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["roofline_frac"] = benchmark::Counter(
      ceil > 0 ? amount_per_iter / ceil : 0, benchmark::Counter::kIsIterationInvariantRate);
  char label[128];
  if (which == Ceiling::read && ceil != start)
    std::snprintf(label, sizeof label, "of read %dt now %.1f GB/s (start %.1f)",
                  threads >= 2 ? 2 : 1, ceil / 1e9, start / 1e9);
  else
    std::snprintf(label, sizeof label, "of %s %dt %.1f %s", name, threads >= 2 ? 2 : 1, ceil / 1e9,
                  unit);
  state.SetLabel(label);
}

void report_bandwidth(benchmark::State& state, double bytes_per_iter, int threads) {
  report(state, bytes_per_iter, threads, Ceiling::read);
}

void report_compute(benchmark::State& state, double flops_per_iter, int threads) {
  report(state, flops_per_iter, threads, Ceiling::f32_fma);
}

} // namespace tpullm::bench
