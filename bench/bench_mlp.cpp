// kernels::swiglu_mlp on the MLP blocks of Qwen2.5-0.5B (896 -> 4864 -> 896) and Llama-3-8B
// (4096 -> 14336 -> 4096) with a 2 MiB local-memory budget (this machine's L2 per core).
// M = 1 reports bandwidth (bytes of the three weights, rotated over >= 1 GiB of copies so they
// stream from DRAM), M >= 128 reports f32 flops
// (6 * M * hidden * intermediate). Names: mlp/<model>/<format>/M:<M>/threads:<T>.
#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "roofline.hpp"
#include "tpullm/kernels/mlp.hpp"

namespace tpullm::bench {

using kernels::PackedWeights;
using kernels::WeightFormat;

PackedWeights random_packed(WeightFormat f, std::int64_t K, std::int64_t N, std::uint32_t seed);

namespace {

struct MlpModel {
  const char* name;
  std::int64_t hidden, intermediate;
};

void bm_mlp(benchmark::State& state, MlpModel m, WeightFormat f, std::int64_t M, int threads) {
  // M = 1 rotates over enough weight sets (>= 1 GiB) that they come from DRAM, not L3
  std::vector<PackedWeights> ws;
  std::int64_t bytes = 0;
  do {
    const auto seed = static_cast<std::uint32_t>(ws.size());
    ws.push_back(random_packed(f, m.hidden, m.intermediate, 3 * seed + 1));
    ws.push_back(random_packed(f, m.hidden, m.intermediate, 3 * seed + 2));
    ws.push_back(random_packed(f, m.intermediate, m.hidden, 3 * seed + 3));
    for (std::size_t i = ws.size() - 3; i < ws.size(); ++i)
      bytes += ws[i].total_bytes();
  } while (M == 1 && bytes < dram_rotation_bytes());
  std::vector<float> x(static_cast<std::size_t>(M * m.hidden), 0.1f);
  std::vector<float> out(x.size());
  const std::size_t budget = std::size_t{2} << 20;
  const kernels::CoreSplit split{
      M > 4 && m.hidden / 32 < 8 ? kernels::SplitDim::rows : kernels::SplitDim::cols, threads};
  std::size_t i = 0;
  for (auto _ : state) {
    kernels::swiglu_mlp(x, ws[i], ws[i + 1], ws[i + 2], out, {M, m.hidden, m.intermediate}, budget,
                        split);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    i = (i + 3) % ws.size();
  }
  if (M <= 4) {
    report_bandwidth(state, double(ws[0].total_bytes() + ws[1].total_bytes() + ws[2].total_bytes()),
                     threads);
  } else {
    const bool amx = kernels::active_isa() == kernels::Isa::amx && kernels::detail::amx_format(f) &&
                     M >= kernels::detail::kAmxMinRows;
    const bool dot = f == WeightFormat::bf16 && kernels::detail::bf16_dot_applies(M);
    report(state, 6.0 * double(M * m.hidden * m.intermediate), threads,
           dot                       ? Ceiling::bf16_dot
           : !amx                    ? Ceiling::f32_fma
           : f == WeightFormat::bf16 ? Ceiling::amx_bf16
                                     : Ceiling::amx_int8);
  }
}

/// The MLP forced onto the AMX path; "AMX: not available on this CPU" where absent.
void bm_mlp_amx(benchmark::State& state, MlpModel m, WeightFormat f, std::int64_t M, int threads) {
  if (!kernels::cpu_features().amx) {
    state.SkipWithError("AMX: not available on this CPU");
    return;
  }
  kernels::ScopedIsa isa(kernels::Isa::amx);
  bm_mlp(state, m, f, M, threads);
}

} // namespace

void register_mlp_benchmarks(bool full) {
  const MlpModel models[] = {{"qwen2.5-0.5b", 896, 4864}, {"llama3-8b", 4096, 14336}};
  const WeightFormat fs[] = {WeightFormat::f32,  WeightFormat::bf16,     WeightFormat::f16,
                             WeightFormat::int8, WeightFormat::int4_sym, WeightFormat::int4_asym};
  for (const MlpModel& m : models)
    for (WeightFormat f : {WeightFormat::bf16, WeightFormat::int8, WeightFormat::int4_sym}) {
      const std::string name = std::string("mlp_amx/") + m.name + "/" +
                               std::string(kernels::format_name(f)) + "/M:512/threads:2";
      benchmark::RegisterBenchmark(name.c_str(), bm_mlp_amx, m, f, std::int64_t{512}, 2)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3);
    }
  for (const MlpModel& m : models)
    for (WeightFormat f : fs)
      for (std::int64_t M : {1, 128, 512})
        for (int threads : {1, 2}) {
          const bool llama = m.hidden == 4096;
          const bool basic =
              f == WeightFormat::f32 || f == WeightFormat::bf16 || f == WeightFormat::int4_sym;
          const bool on =
              full || (threads == 2 && basic && (M == 1 || (M == 128) || (M == 512 && !llama)));
          if (!on)
            continue;
          const std::string name =
              std::string("mlp/") + m.name + "/" + std::string(kernels::format_name(f)) +
              "/M:" + std::to_string(M) + "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), bm_mlp, m, f, M, threads)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond)
              ->MinTime(0.3);
        }
}

} // namespace tpullm::bench
