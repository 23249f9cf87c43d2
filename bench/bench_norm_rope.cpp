// The small memory-bound kernels at Qwen2.5-0.5B (hidden 896, 14/2 heads, d 64, vocab 151936)
// and Llama-3-8B (hidden 4096, 32/8 heads, d 128) shapes, reported against read bandwidth with
// bytes = everything read + written once:
//   norm/<model>/{rms,add_rms}/M:<M>      rms_norm / fused residual add + rms_norm, f32 gamma
//   rope/<model>/qk/L:<L>                 rope_apply on q and k (halves), in place
//   rope/<model>/kv_cache/L:<L>           rope_to_kv_cache (k rotated into its cache slots)
//   embedding/<model>/bf16/L:<L>          embedding_gather from a bf16 table
//   sampling/vocab:151936/{argmax,softmax,top_k50,sample_topk_topp} (the last: runtime::Sampler)
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "roofline.hpp"
#include "tpullm/kernels/elementwise.hpp"
#include "tpullm/kernels/embedding_gather.hpp"
#include "tpullm/kernels/rms_norm.hpp"
#include "tpullm/kernels/rope_gather.hpp"
#include "tpullm/kernels/sampling.hpp"
#include "tpullm/runtime/sampler.hpp"

namespace tpullm::bench {
namespace {

struct Model {
  const char* name;
  std::int64_t hidden, q_heads, kv_heads, head_dim;
};
const Model kModels[] = {{"qwen2.5-0.5b", 896, 14, 2, 64}, {"llama3-8b", 4096, 32, 8, 128}};
constexpr std::int64_t kVocab = 151936;

std::vector<float> filled(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& e : v)
    e = nd(rng);
  return v;
}

void bm_norm(benchmark::State& state, Model m, std::int64_t M, bool fused, int threads) {
  const auto n = static_cast<std::size_t>(M * m.hidden);
  auto x = filled(n, 1), r = filled(n, 2), g = filled(static_cast<std::size_t>(m.hidden), 3);
  std::vector<float> h(n), y(n);
  const kernels::CoreSplit split{kernels::SplitDim::rows, threads};
  for (auto _ : state) {
    if (fused)
      kernels::add_rms_norm<float>(x, r, h, g, y, {M, m.hidden}, 1e-6f, split);
    else
      kernels::rms_norm<float>(x, g, y, {M, m.hidden}, 1e-6f, split);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  report_bandwidth(state, double(n) * sizeof(float) * (fused ? 4.0 : 2.0), threads);
}

void bm_rope(benchmark::State& state, Model m, std::int64_t L, bool to_cache, int threads) {
  const std::int64_t d = m.head_dim, cap = 4096;
  const kernels::RopeTables t = kernels::build_rope_tables(cap, d, 1000000.0);
  auto qv = filled(static_cast<std::size_t>(L * m.q_heads * d), 1);
  auto kv = filled(static_cast<std::size_t>(L * m.kv_heads * d), 2);
  std::vector<float> cache(static_cast<std::size_t>(cap * m.kv_heads * d));
  std::vector<std::int32_t> pos(static_cast<std::size_t>(L));
  for (std::int64_t i = 0; i < L; ++i)
    pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(100 + i);
  const kernels::CoreSplit split{kernels::SplitDim::rows, threads};
  for (auto _ : state) {
    if (to_cache) {
      kernels::rope_to_kv_cache(kv, cache, cap, pos, {}, t, {L, m.kv_heads, d},
                                kernels::RopeMode::halves, split);
    } else {
      kernels::rope_apply(std::span<float>(qv), pos, t, {L, m.q_heads, d},
                          kernels::RopeMode::halves, split);
      kernels::rope_apply(std::span<float>(kv), pos, t, {L, m.kv_heads, d},
                          kernels::RopeMode::halves, split);
    }
    benchmark::DoNotOptimize(qv.data());
    benchmark::ClobberMemory();
  }
  const double rows = double(L) * double(to_cache ? m.kv_heads : m.q_heads + m.kv_heads);
  const double table = 2.0 * double(L) * double(d / 2) * (to_cache ? 1.0 : 2.0);
  report_bandwidth(state, (2.0 * rows * double(d) + table) * sizeof(float), threads);
}

void bm_embedding(benchmark::State& state, Model m, std::int64_t L, int threads) {
  const std::int64_t V = 32768; // a slice of the vocabulary keeps set-up cheap; rows are random
  std::vector<bf16_t> table(static_cast<std::size_t>(V * m.hidden));
  for (std::size_t i = 0; i < table.size(); ++i)
    table[i] = bf16_t{static_cast<std::uint16_t>(0x3f80u + (i % 64))};
  std::vector<std::int32_t> ids(static_cast<std::size_t>(L));
  std::mt19937 rng(5);
  for (auto& id : ids)
    id = static_cast<std::int32_t>(rng() % static_cast<unsigned>(V));
  std::vector<float> out(static_cast<std::size_t>(L * m.hidden));
  for (auto _ : state) {
    kernels::embedding_gather<bf16_t>(ids, table, out, {V, m.hidden},
                                      {kernels::SplitDim::rows, threads});
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report_bandwidth(state, double(L * m.hidden) * (2.0 + 4.0), threads);
}

enum class SampleOp { argmax, softmax, top_k50, sample };

void bm_sampling(benchmark::State& state, SampleOp op) {
  auto logits = filled(static_cast<std::size_t>(kVocab), 9);
  for (auto& l : logits)
    l *= 4.f;
  std::vector<float> probs(logits.size());
  // The sampler the runtime runs (runtime::Sampler), with HF-style options.
  runtime::SamplingOptions so;
  so.temperature = 0.7f;
  so.top_k = 50;
  so.top_p = 0.8f;
  so.repetition_penalty = 1.1f;
  so.seed = 1;
  runtime::Sampler sampler(so);
  const std::vector<std::int32_t> prev{1, 2, 3, 500, 70000};
  double bytes = double(kVocab) * sizeof(float);
  for (auto _ : state) {
    switch (op) {
    case SampleOp::argmax:
      benchmark::DoNotOptimize(kernels::argmax(logits));
      break;
    case SampleOp::softmax:
      kernels::softmax_rows(logits, probs, {1, kVocab});
      benchmark::DoNotOptimize(probs.data());
      break;
    case SampleOp::top_k50:
      benchmark::DoNotOptimize(kernels::top_k(logits, 50).indices.data());
      break;
    case SampleOp::sample:
      benchmark::DoNotOptimize(sampler.sample(logits, prev));
      break;
    }
    benchmark::ClobberMemory();
  }
  if (op == SampleOp::softmax)
    bytes *= 2.0;
  report_bandwidth(state, bytes, 1);
}

const bool registered = [] {
  for (const Model& m : kModels)
    for (int threads : {1, 2}) {
      const std::string t = "/threads:" + std::to_string(threads);
      for (std::int64_t M : {1, 128, 512})
        for (bool fused : {false, true}) {
          const std::string name = std::string("norm/") + m.name +
                                   (fused ? "/add_rms/M:" : "/rms/M:") + std::to_string(M) + t;
          benchmark::RegisterBenchmark(name.c_str(), bm_norm, m, M, fused, threads)
              ->UseRealTime()
              ->MinTime(0.1);
        }
      for (std::int64_t L : {1, 128, 512})
        for (bool to_cache : {false, true}) {
          const std::string name = std::string("rope/") + m.name +
                                   (to_cache ? "/kv_cache/L:" : "/qk/L:") + std::to_string(L) + t;
          benchmark::RegisterBenchmark(name.c_str(), bm_rope, m, L, to_cache, threads)
              ->UseRealTime()
              ->MinTime(0.1);
        }
      for (std::int64_t L : {1, 512}) {
        const std::string name =
            std::string("embedding/") + m.name + "/bf16/L:" + std::to_string(L) + t;
        benchmark::RegisterBenchmark(name.c_str(), bm_embedding, m, L, threads)
            ->UseRealTime()
            ->MinTime(0.1);
      }
    }
  const std::pair<const char*, SampleOp> ops[] = {{"argmax", SampleOp::argmax},
                                                  {"softmax", SampleOp::softmax},
                                                  {"top_k50", SampleOp::top_k50},
                                                  {"sample_topk_topp", SampleOp::sample}};
  for (const auto& [n, op] : ops)
    benchmark::RegisterBenchmark((std::string("sampling/vocab:151936/") + n).c_str(), bm_sampling,
                                 op)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.1);
  return true;
}();

} // namespace
} // namespace tpullm::bench
