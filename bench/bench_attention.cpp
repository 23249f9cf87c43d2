// kernels::flash_attention at the attention shapes of Qwen2.5-0.5B (14 q / 2 kv heads, d 64:
// GQA 7:1), Llama-3-8B (32 / 8, d 128: GQA 4:1), Llama-2-7B (32 / 32, d 128: MHA) and Gemma-2B
// (8 / 1, d 256: MQA), f32 cache; decode also with f16 / bf16 caches (--kv-dtype), whose bytes
// read are 2*S*kv*d*2.
//   decode  (L = 1 at position S-1 of an S-slot cache, S = 512/4096/8192; flash-decoding):
//           bandwidth-bound, reported against the read ceiling with bytes = K and V actually read
//           (2*S*kv*d*4). The caches rotate over >= dram_rotation_bytes() of copies so every
//           iteration reads DRAM, not the last-level cache.
//   prefill (L = 128/512, S = L, positions 0..L-1): compute-bound, reported against the f32 FMA
//           peak with flops = 4 * d * q_heads * (visible pairs) = 4*d*qh*L(L+1)/2 (the causal
//           half is not counted as work).
// Names: attention/<model>/<decode|prefill>/L:<L>/S:<S>/threads:<T>; the 16-bit caches
// attention_<f16|bf16>/<model>/decode/L:1/S:<S>/threads:<T>.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "roofline.hpp"
#include "tpullm/kernels/flash_attention.hpp"
#include "tpullm/kernels/packed_weights.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::bench {
namespace {

/// x in cache storage type KV (float, bf16_t or f16_t), rounded to nearest even.
template <class KV>
KV to_kv(float x) {
  if constexpr (std::is_same_v<KV, float>)
    return x;
  else if constexpr (std::is_same_v<KV, bf16_t>)
    return bf16_t{f32_to_bf16(x)};
  else
    return f16_t{f32_to_f16(x)};
}

struct AttnModel {
  const char* name;
  std::int64_t q_heads, kv_heads, head_dim;
};

template <class KV = float>
void bm_attention(benchmark::State& state, AttnModel m, std::int64_t L, std::int64_t S,
                  int threads);

/// Prefill forced onto the AMX path, with the bf16 cache the tile unit takes (an f32 or f16
/// cache keeps the vector path there); "AMX: not available on this CPU" where absent.
void bm_attention_amx(benchmark::State& state, AttnModel m, std::int64_t L, int threads) {
  if (!kernels::cpu_features().amx) {
    state.SkipWithError("AMX: not available on this CPU");
    return;
  }
  kernels::ScopedIsa isa(kernels::Isa::amx);
  bm_attention<bf16_t>(state, m, L, L, threads);
}

template <class KV>
void bm_attention(benchmark::State& state, AttnModel m, std::int64_t L, std::int64_t S,
                  int threads) {
  const std::int64_t d = m.head_dim;
  std::vector<float> q(static_cast<std::size_t>(L * m.q_heads * d));
  for (std::size_t i = 0; i < q.size(); ++i)
    q[i] = static_cast<float>(i % 17) * 0.01f;
  // elements of the cache: S * kv_heads * d, or for an int8 cache its bytes (codes and scales)
  const auto kv_elems = static_cast<std::size_t>(S * m.kv_heads * kernels::kv_row_elems<KV>(d));
  const long long set_bytes = 2LL * static_cast<long long>(kv_elems * sizeof(KV));
  const int copies =
      L == 1 ? static_cast<int>(std::max<long long>(1, dram_rotation_bytes() / set_bytes + 1)) : 1;
  // 64-byte aligned caches, as the runtime allocates them (rows of d floats then never straddle
  // cache lines for d % 16 == 0)
  std::vector<kernels::AlignedArray<KV>> ks(static_cast<std::size_t>(copies)), vs(ks.size());
  for (int c = 0; c < copies; ++c) {
    auto& k = ks[static_cast<std::size_t>(c)];
    auto& v = vs[static_cast<std::size_t>(c)];
    k = kernels::AlignedArray<KV>(kv_elems);
    v = kernels::AlignedArray<KV>(kv_elems);
    if constexpr (std::is_same_v<KV, kernels::kv8_t>) {
      std::vector<float> kr(static_cast<std::size_t>(d)), vr(kr.size());
      const std::int64_t row = kernels::kv_row_elems<KV>(d);
      for (std::int64_t r = 0; r < S * m.kv_heads; ++r) {
        for (std::int64_t x = 0; x < d; ++x) {
          kr[static_cast<std::size_t>(x)] = static_cast<float>((r * d + x) % 13) * 0.01f;
          vr[static_cast<std::size_t>(x)] = static_cast<float>((r * d + x) % 11) * 0.01f;
        }
        kernels::kv8_quantize_row(kr.data(), k.data() + r * row, d);
        kernels::kv8_quantize_row(vr.data(), v.data() + r * row, d);
      }
    } else {
      for (std::size_t i = 0; i < kv_elems; ++i) {
        k[i] = to_kv<KV>(static_cast<float>(i % 13) * 0.01f);
        v[i] = to_kv<KV>(static_cast<float>(i % 11) * 0.01f);
      }
    }
  }
  std::vector<float> out(q.size());
  std::vector<std::int32_t> pos(static_cast<std::size_t>(L));
  for (std::int64_t i = 0; i < L; ++i)
    pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(S - L + i);
  const kernels::AttentionShape shape{
      L, L, S, S, m.q_heads, m.kv_heads, d, 1.0f / std::sqrt(static_cast<float>(d)), true};
  const kernels::CoreSplit split{L == 1 ? kernels::SplitDim::heads : kernels::SplitDim::rows,
                                 threads};
  std::size_t ci = 0;
  const std::int64_t stalls0 = kernels::current_pool().stalls();
  for (auto _ : state) {
    kernels::flash_attention<KV>(q, ks[ci].span(), vs[ci].span(), pos, out, shape, split);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    ci = (ci + 1) % ks.size();
  }
  state.counters["copies"] = copies;
  // dispatches that left a late worker out (worker_pool.hpp): a row with some ran partly on
  // fewer threads than it names
  state.counters["pool_stalls"] = static_cast<double>(kernels::current_pool().stalls() - stalls0);
  if (L == 1) {
    report_bandwidth(state, 2.0 * double(kv_elems) * sizeof(KV), threads);
  } else {
    double pairs = 0;
    for (std::int64_t i = 0; i < L; ++i)
      pairs += double(std::min<std::int64_t>(S, pos[static_cast<std::size_t>(i)] + 1));
    report(state, 4.0 * double(d * m.q_heads) * pairs, threads,
           kernels::active_isa() == kernels::Isa::amx ? Ceiling::amx_bf16 : Ceiling::f32_fma);
  }
}

const bool registered = [] {
  for (const AttnModel& m :
       {AttnModel{"qwen2.5-0.5b", 14, 2, 64}, AttnModel{"llama3-8b", 32, 8, 128}})
    for (std::int64_t L : {512, 2048}) {
      const std::string name = std::string("attention_amx/") + m.name +
                               "/prefill/L:" + std::to_string(L) + "/S:" + std::to_string(L) +
                               "/threads:2";
      benchmark::RegisterBenchmark(name.c_str(), bm_attention_amx, m, L, 2)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.2);
    }
  const AttnModel models[] = {{"qwen2.5-0.5b", 14, 2, 64},
                              {"llama3-8b", 32, 8, 128},
                              {"llama2-7b-mha", 32, 32, 128},
                              {"gemma-2b-mqa", 8, 1, 256}};
  for (const AttnModel& m : models)
    for (int threads : {1, 2}) {
      for (std::int64_t S : {512, 4096, 8192}) {
        const std::string name = std::string("attention/") + m.name +
                                 "/decode/L:1/S:" + std::to_string(S) +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), bm_attention<float>, m, 1, S, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.2);
      }
      const bool base = std::string(m.name) == "qwen2.5-0.5b" || std::string(m.name) == "llama3-8b";
      for (std::int64_t L : {128, 512}) {
        if (!base)
          continue;
        const std::string name = std::string("attention/") + m.name +
                                 "/prefill/L:" + std::to_string(L) + "/S:" + std::to_string(L) +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), bm_attention<float>, m, L, L, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
      }
    }
  // 16-bit and int8 caches (--kv-dtype f16 / bf16 / int8): the decode shapes of the two base
  // models (an int8 cache's bytes count its scales).
  for (const AttnModel& m : {models[0], models[1]})
    for (int threads : {1, 2})
      for (std::int64_t S : {4096, 8192, 32768})
        for (const std::string kv : {"f16", "bf16", "int8"}) {
          const std::string name = "attention_" + kv + "/" + m.name +
                                   "/decode/L:1/S:" + std::to_string(S) +
                                   "/threads:" + std::to_string(threads);
          auto* b = kv == "f16" ? benchmark::RegisterBenchmark(name.c_str(), bm_attention<f16_t>, m,
                                                               1, S, threads)
                    : kv == "bf16"
                        ? benchmark::RegisterBenchmark(name.c_str(), bm_attention<bf16_t>, m, 1, S,
                                                       threads)
                        : benchmark::RegisterBenchmark(name.c_str(), bm_attention<kernels::kv8_t>,
                                                       m, 1, S, threads);
          b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
        }
  return true;
}();

} // namespace
} // namespace tpullm::bench
