// kernels::linear on the projections of Qwen2.5-0.5B and Llama-3-8B, every weight format,
// M = 1 (decode, memory-bound: bytes_per_second and roofline_frac vs read bandwidth) and
// M = 128 / 512 (prefill, compute-bound: flops and roofline_frac vs the f32 FMA peak).
//
// Names: linear/<model>/<proj>/<format>/M:<M>/threads:<T>. Quantized formats use group 128
// (int4) and per-channel scales (int8). M = 1 benchmarks rotate over enough copies of the weight
// (>= 1 GiB in total) that every iteration reads it from DRAM, not from the 260 MiB L3.
// Default set: every projection except lm_head at M = 1 for every format and 1 / 2 threads (the
// Qwen lm_head at M = 1 on 2 threads for f32 / bf16 / f16); on Qwen, every projection at M = 4,
// 8 and 16 (speculative verify calls of 1 + 3, 7 and 15 drafts, rotated like M = 1 and reported
// as bytes read) on 2 threads, lm_head for the float formats;
// M = 128 / 512 for f32, bf16 and int4_sym (2 threads; f32 also 1 thread) on Qwen, M = 128 on
// Llama q / gate / down. --tpullm_full adds the rest (all formats at every M, lm_head, Llama at
// M = 512), which takes tens of minutes and ~6 GB of memory.
// linear_act/...: weight-only int4_sym / int8 (group 32) with x exact or rounded to int8
// (XPrecision::int8), forced onto the AVX2 path (exact, AVX-VNNI, VPMADDUBSW) or AVX-512 VNNI.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "roofline.hpp"
#include "tpullm/kernels/detail/w4a8_gemv_avx512.hpp"
#include "tpullm/kernels/int8_linear.hpp"
#include "tpullm/kernels/matmul.hpp"

namespace tpullm::bench {

using kernels::PackedWeights;
using kernels::WeightFormat;

/// One linear projection of a model: W [K, N].
struct Proj {
  const char* model;
  const char* name;
  std::int64_t K, N;
};

inline const std::vector<Proj>& projections() {
  static const std::vector<Proj> p = {
      // Qwen2.5-0.5B: hidden 896, 14 q / 2 kv heads of 64, intermediate 4864, vocab 151936
      {"qwen2.5-0.5b", "q_proj", 896, 896},
      {"qwen2.5-0.5b", "k_proj", 896, 128},
      {"qwen2.5-0.5b", "v_proj", 896, 128},
      {"qwen2.5-0.5b", "o_proj", 896, 896},
      {"qwen2.5-0.5b", "gate_proj", 896, 4864},
      {"qwen2.5-0.5b", "up_proj", 896, 4864},
      {"qwen2.5-0.5b", "down_proj", 4864, 896},
      {"qwen2.5-0.5b", "lm_head", 896, 151936},
      // Llama-3-8B: hidden 4096, 32 q / 8 kv heads of 128, intermediate 14336, vocab 128256
      {"llama3-8b", "q_proj", 4096, 4096},
      {"llama3-8b", "k_proj", 4096, 1024},
      {"llama3-8b", "v_proj", 4096, 1024},
      {"llama3-8b", "o_proj", 4096, 4096},
      {"llama3-8b", "gate_proj", 4096, 14336},
      {"llama3-8b", "up_proj", 4096, 14336},
      {"llama3-8b", "down_proj", 14336, 4096},
      {"llama3-8b", "lm_head", 4096, 128256},
  };
  return p;
}

/// Group size the benchmarks use for a format (K = per-channel).
inline std::int64_t bench_group(WeightFormat f, std::int64_t K) {
  switch (f) {
  case WeightFormat::f32:
  case WeightFormat::bf16:
  case WeightFormat::f16:
  case WeightFormat::int8:
    return K;
  case WeightFormat::int8_asym: // w8a16's default group
    return K % 64 == 0 ? 64 : K;
  case WeightFormat::int4_sym:
  case WeightFormat::int4_asym:
    return K % 128 == 0 ? 128 : K;
  case WeightFormat::int4_min: // ggml's Q4_K / Q5_K sub-blocks
  case WeightFormat::int8_min:
    return K % 32 == 0 ? 32 : K;
  case WeightFormat::int6_sym: // ggml's Q6_K sub-blocks
    return K % 16 == 0 ? 16 : K;
  case WeightFormat::int6_min: // ggml's Q5_K sub-blocks
    return K % 32 == 0 ? 32 : K;
  }
  return K;
}

/// Random packed weights, written straight into the packed buffers (the layout does not matter
/// for speed; values are finite and small).
/// `group` 0: bench_group. `super_rows` > 0: two-level scales (an f32 per super_rows rows, an
/// int8 code per group; kernels/two_level_scales.hpp).
inline PackedWeights random_packed_group(WeightFormat f, std::int64_t K, std::int64_t N,
                                         std::uint32_t seed, std::int64_t group,
                                         std::int64_t super_rows = 0) {
  PackedWeights w = kernels::detail::make_packed(f, K, N, group > 0 ? group : bench_group(f, K));
  std::mt19937 rng(seed);
  std::uint8_t* d = w.data.data();
  const std::size_t n = w.data.size();
  switch (f) {
  case WeightFormat::f32:
    for (std::size_t i = 0; i + 4 <= n; i += 4) {
      const float v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f;
      std::memcpy(d + i, &v, 4);
    }
    break;
  case WeightFormat::bf16:
  case WeightFormat::f16:
    for (std::size_t i = 0; i + 2 <= n; i += 2) {
      // exponent well inside the normal range of both formats, random mantissa and sign
      const std::uint16_t v = static_cast<std::uint16_t>(
          f == WeightFormat::bf16 ? (0x3c00u | (rng() & 0x80ffu)) : (0x3000u | (rng() & 0x83ffu)));
      std::memcpy(d + i, &v, 2);
    }
    break;
  case WeightFormat::int8:
  case WeightFormat::int8_asym:
  case WeightFormat::int4_sym:
  case WeightFormat::int4_asym:
  case WeightFormat::int4_min:
  case WeightFormat::int8_min:
  case WeightFormat::int6_sym:
  case WeightFormat::int6_min:
    for (std::size_t i = 0; i < n; i += 4) {
      const std::uint32_t r = rng();
      std::memcpy(d + i, &r, std::min<std::size_t>(4, n - i));
    }
    break;
  }
  for (std::size_t i = 0; i < w.scales.size(); ++i)
    w.scales[i] = 0.01f + 1e-5f * static_cast<float>(rng() % 1000);
  for (std::size_t i = 0; i < w.zeros.size(); ++i)
    w.zeros[i] = static_cast<std::uint8_t>(rng() % (f == WeightFormat::int8_asym ? 256 : 16));
  for (std::size_t i = 0; i < w.mins.size(); ++i)
    w.mins[i] = 1e-4f * static_cast<float>(static_cast<int>(rng() % 2001) - 1000);
  if (super_rows > 0) { // the super-block values and codes: what a K-quant file holds
    PackedWeights two = kernels::detail::make_packed(f, K, N, w.group_size, super_rows);
    two.data = std::move(w.data);
    for (std::size_t i = 0; i < two.scales.size(); ++i)
      two.scales[i] = 1e-3f + 1e-6f * static_cast<float>(rng() % 1000);
    for (std::size_t i = 0; i < two.scale_codes.size(); ++i)
      two.scale_codes[i] = static_cast<std::int8_t>(1 + rng() % 63);
    for (std::size_t i = 0; i < two.mins.size(); ++i)
      two.mins[i] = 1e-4f * static_cast<float>(rng() % 1000);
    for (std::size_t i = 0; i < two.min_codes.size(); ++i)
      two.min_codes[i] = static_cast<std::int8_t>(rng() % 64);
    return two;
  }
  return w;
}

/// random_packed_group with the format's bench_group (not inline: bench_mlp.cpp calls it).
PackedWeights random_packed(WeightFormat f, std::int64_t K, std::int64_t N, std::uint32_t seed) {
  return random_packed_group(f, K, N, seed, 0);
}

/// The weights of the benchmark that is running: `copies` independent copies, kept until a
/// benchmark asks for a different (K, N, format, group) so consecutive thread counts share them.
/// `group` 0: bench_group; `super_rows` as random_packed_group.
inline const std::vector<PackedWeights>& bench_weights(WeightFormat f, std::int64_t K,
                                                       std::int64_t N, int copies,
                                                       std::int64_t group = 0,
                                                       std::int64_t super_rows = 0) {
  struct Cache {
    WeightFormat f = WeightFormat::f32;
    std::int64_t K = 0, N = 0, group = 0, super_rows = 0;
    std::vector<PackedWeights> w;
  };
  static Cache c;
  if (c.f != f || c.K != K || c.N != N || c.group != group || c.super_rows != super_rows ||
      static_cast<int>(c.w.size()) < copies) {
    c.w.clear(); // free the previous set first
    c.f = f;
    c.K = K;
    c.N = N;
    c.group = group;
    c.super_rows = super_rows;
    c.w.push_back(random_packed_group(f, K, N, 1234u, group, super_rows));
    for (int i = 1; i < copies; ++i) // same values at other addresses: only DRAM can serve them
      c.w.push_back(kernels::detail::copy_packed(c.w.front()));
  }
  return c.w;
}

/// Copies of a weight needed so a rotation over them is >= 1 GiB (4x the 260 MiB L3).
inline int rotation_copies(std::int64_t bytes) {
  const std::int64_t target = dram_rotation_bytes();
  return static_cast<int>(std::clamp<std::int64_t>((target + bytes - 1) / bytes, 1, 8192));
}

inline std::int64_t packed_bytes(WeightFormat f, std::int64_t K, std::int64_t N,
                                 std::int64_t group = 0) {
  const std::int64_t P = (N + 31) / 32, G = K / (group > 0 ? group : bench_group(f, K));
  const std::int64_t rg = kernels::row_group(f), Kp = (K + rg - 1) / rg * rg;
  std::int64_t b = P * Kp * kernels::row_bytes(f);
  if (kernels::is_quantized(f))
    b += P * G * 32 * 4;
  if (f == WeightFormat::int4_asym)
    b += P * G * 32;
  if (kernels::has_mins(f))
    b += P * G * 32 * 4;
  return b;
}

/// Split used by the benchmarks: panels (cols) unless there are too few of them for M > 4.
inline kernels::CoreSplit bench_split(std::int64_t M, std::int64_t N, int threads) {
  const std::int64_t P = (N + 31) / 32;
  if (M > 4 && P < 4 * threads)
    return {kernels::SplitDim::rows, threads};
  return {kernels::SplitDim::cols, threads};
}

Ceiling compute_ceiling(WeightFormat f, std::int64_t M);

void bm_linear(benchmark::State& state, Proj p, WeightFormat f, std::int64_t M, int threads) {
  const int copies = M <= 16 ? rotation_copies(packed_bytes(f, p.K, p.N)) : 1;
  const auto& ws = bench_weights(f, p.K, p.N, copies);
  std::vector<float> x(static_cast<std::size_t>(M * p.K), 0.5f);
  std::vector<float> y(static_cast<std::size_t>(M * p.N));
  const kernels::CoreSplit split = bench_split(M, p.N, threads);
  std::size_t i = 0;
  for (auto _ : state) {
    kernels::linear(x, ws[i], {}, y, {M, p.K, p.N}, split);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    i = (i + 1) % ws.size();
  }
  if (M <= 16)
    report_bandwidth(state, static_cast<double>(ws[0].total_bytes()), threads);
  else
    report(state, 2.0 * static_cast<double>(M * p.K * p.N), threads, compute_ceiling(f, M));
  state.counters["copies"] = static_cast<double>(ws.size());
}

/// The ceiling a GEMM of format f with M rows is judged against: the AMX peak when it runs on
/// the tile unit (bf16: AMX-bf16; int8 / int4: AMX-int8, counting 2 M K N useful ops although
/// the two-digit scheme issues twice as many), the vdpbf16ps peak when bf16 runs on AVX512_BF16,
/// else the f32 FMA peak.
Ceiling compute_ceiling(WeightFormat f, std::int64_t M) {
  if (f == WeightFormat::bf16 && kernels::detail::bf16_dot_applies(M))
    return Ceiling::bf16_dot;
  if (kernels::active_isa() != kernels::Isa::amx || !kernels::detail::amx_format(f) ||
      M < kernels::detail::kAmxMinRows)
    return Ceiling::f32_fma;
  return f == WeightFormat::bf16 ? Ceiling::amx_bf16 : Ceiling::amx_int8;
}

/// A GEMM forced onto the AMX path (Isa::amx); reports "AMX: not available on this CPU" and
/// skips where the CPU or OS lacks it.
void bm_linear_amx(benchmark::State& state, Proj p, WeightFormat f, std::int64_t M, int threads) {
  if (!kernels::cpu_features().amx) {
    state.SkipWithError("AMX: not available on this CPU");
    return;
  }
  kernels::ScopedIsa isa(kernels::Isa::amx);
  bm_linear(state, p, f, M, threads);
}

/// One layer's q, k and v projections at M = 1 from one prepared x (LinearInput: the digit
/// decomposition of the int GEMVs is built once for the three), as the executor calls them;
/// bytes = the three weights, rotated over copies so they come from DRAM.
void bm_linear_qkv(benchmark::State& state, std::string model, WeightFormat f, int threads) {
  std::vector<Proj> ps;
  for (const Proj& p : projections())
    if (model == p.model && (std::string(p.name) == "q_proj" || std::string(p.name) == "k_proj" ||
                             std::string(p.name) == "v_proj"))
      ps.push_back(p);
  std::int64_t set_bytes = 0;
  for (const Proj& p : ps)
    set_bytes += packed_bytes(f, p.K, p.N);
  const int copies = rotation_copies(set_bytes);
  std::vector<std::vector<PackedWeights>> ws(static_cast<std::size_t>(copies));
  for (int c = 0; c < copies; ++c)
    for (const Proj& p : ps)
      ws[static_cast<std::size_t>(c)].push_back(
          random_packed(f, p.K, p.N, 77u + static_cast<std::uint32_t>(p.N)));
  const std::int64_t K = ps[0].K;
  std::vector<float> x(static_cast<std::size_t>(K));
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int>(i % 19) - 9) * 0.05f;
  std::vector<float> y(static_cast<std::size_t>(ps[0].N));
  const kernels::CoreSplit split{kernels::SplitDim::cols, threads};
  std::size_t c = 0;
  for (auto _ : state) {
    const kernels::LinearInput in(x, 1, K);
    for (std::size_t j = 0; j < ps.size(); ++j)
      kernels::linear(in, ws[c][j], {},
                      std::span<float>(y.data(), static_cast<std::size_t>(ps[j].N)),
                      {1, K, ps[j].N}, split);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    c = (c + 1) % ws.size();
  }
  double bytes = 0;
  for (const auto& w : ws[0])
    bytes += static_cast<double>(w.total_bytes());
  report_bandwidth(state, bytes, threads);
  state.counters["copies"] = copies;
}

// ---- W8A8 (--mode int8): int8 activations x int8 weights, int32 sums -------------------------

/// A W8A8 path the benchmarks force, and the int8 ceiling its GEMM is judged against.
struct W8A8BenchPath {
  const char* name;
  kernels::Isa isa;
  bool no_avx_vnni, available;
  Ceiling ceiling;
};

inline std::vector<W8A8BenchPath> w8a8_bench_paths() {
  const auto& f = kernels::cpu_features();
  return {{"avx512-vnni", kernels::Isa::avx512, false, f.avx512_vnni, Ceiling::int8_vnni},
          {"avx-vnni", kernels::Isa::avx2, false, f.avx_vnni, Ceiling::int8_avx_vnni},
          {"avx2", kernels::Isa::avx2, true, f.avx2, Ceiling::int8_avx2}};
}

/// linear_w8a8 (dynamic per-row activations) forced onto one path: M <= 4 reports bytes read
/// (weights + scales, rotated over copies so they come from DRAM) against the read ceiling, M > 4
/// reports 2 M K N ops against the int8 peak of the path's instruction.
void bm_linear_w8a8(benchmark::State& state, Proj p, W8A8BenchPath path, std::int64_t M,
                    int threads) {
  if (!path.available) {
    state.SkipWithError("W8A8 path not available on this CPU");
    return;
  }
  kernels::ScopedIsa isa(path.isa);
#if TPULLM_X86
  const bool saved = kernels::detail::w8a8_avx_vnni_disabled();
  kernels::detail::w8a8_avx_vnni_disabled() = path.no_avx_vnni;
#endif
  const WeightFormat f = WeightFormat::int8;
  const int copies = M <= 4 ? rotation_copies(packed_bytes(f, p.K, p.N)) : 1;
  const auto& ws = bench_weights(f, p.K, p.N, copies);
  std::vector<float> x(static_cast<std::size_t>(M * p.K));
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int>(i % 19) - 9) * 0.05f;
  std::vector<float> y(static_cast<std::size_t>(M * p.N));
  const kernels::CoreSplit split = bench_split(M, p.N, threads);
  std::size_t i = 0;
  for (auto _ : state) {
    kernels::linear_w8a8(x, ws[i], {}, y, {M, p.K, p.N}, kernels::ActQuant{}, split);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    i = (i + 1) % ws.size();
  }
#if TPULLM_X86
  kernels::detail::w8a8_avx_vnni_disabled() = saved;
#endif
  if (M <= 4)
    report_bandwidth(state, static_cast<double>(ws[0].total_bytes()), threads);
  else
    report(state, 2.0 * static_cast<double>(M * p.K * p.N), threads, path.ceiling);
  state.counters["copies"] = static_cast<double>(ws.size());
}

/// The W4A8 GEMV experiment (issue 17; detail/w4a8_gemv_avx512.hpp) on int4_sym weights (group
/// 128) at M = 1, bytes read against the read ceiling; compare with the digit path's
/// linear/<model>/<proj>/int4_sym/M:1 rows. Skipped without AVX-512 VNNI.
void bm_w4a8_experiment(benchmark::State& state, Proj p, int threads) {
  if (!kernels::cpu_features().avx512_vnni) {
    state.SkipWithError("W4A8 experiment needs AVX-512 VNNI");
    return;
  }
  const WeightFormat f = WeightFormat::int4_sym;
  const auto& ws = bench_weights(f, p.K, p.N, rotation_copies(packed_bytes(f, p.K, p.N)));
  std::vector<float> x(static_cast<std::size_t>(p.K));
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int>(i % 19) - 9) * 0.05f;
  std::vector<float> y(static_cast<std::size_t>(p.N));
  kernels::detail::W4A8Row r;
  std::size_t i = 0;
  for (auto _ : state) {
    kernels::detail::w4a8_gemv_experimental(x.data(), ws[i], nullptr, y.data(),
                                            {kernels::SplitDim::cols, threads}, r);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    i = (i + 1) % ws.size();
  }
  report_bandwidth(state, static_cast<double>(ws[0].total_bytes()), threads);
  state.counters["copies"] = static_cast<double>(ws.size());
}

// ---- x in int8 for weight-only integer formats (XPrecision::int8) --------------------------

/// A path of the weight-only integer linear the benchmarks force: ISA, x's precision, the
/// AVX2 integer-dot variant, and the ceiling its M > 4 rows are judged against (f32_fma is the
/// widest FMA the CPU has: zmm on AVX-512 machines, so an AVX2 figure reads against up to twice
/// its own ymm peak there).
struct ActBenchPath {
  const char* name;
  kernels::Isa isa;
  kernels::XPrecision precision;
  bool no_avx_vnni, available;
  Ceiling ceiling;
};

inline std::vector<ActBenchPath> act_bench_paths() {
  const auto& f = kernels::cpu_features();
  using kernels::Isa;
  using kernels::XPrecision;
  return {
      {"avx2-exact", Isa::avx2, XPrecision::exact, false, f.avx2, Ceiling::f32_fma},
      {"avx2-int8-avx-vnni", Isa::avx2, XPrecision::int8, false, f.avx_vnni,
       Ceiling::int8_avx_vnni},
      {"avx2-int8-maddubs", Isa::avx2, XPrecision::int8, true, f.avx2, Ceiling::int8_avx2},
      {"avx512-int8-vnni", Isa::avx512, XPrecision::int8, false, f.avx512_vnni, Ceiling::int8_vnni},
      {"amx-int8", Isa::amx, XPrecision::int8, false, f.amx, Ceiling::amx_int8}};
}

/// kernels::linear over integer weights (group `group`) forced onto `path`: M <= 4 reports bytes
/// read (rotated over copies so they come from DRAM) against the read ceiling, M > 4 2 M K N
/// ops against the path's ceiling.
void bm_linear_act(benchmark::State& state, Proj p, WeightFormat f, std::int64_t group,
                   ActBenchPath path, std::int64_t M, int threads, std::int64_t super_rows = 0) {
  if (!path.available) {
    state.SkipWithError("path not available on this CPU");
    return;
  }
  kernels::ScopedIsa isa(path.isa);
  const bool saved = kernels::detail::avx_vnni_gemv_disabled();
  kernels::detail::avx_vnni_gemv_disabled() = path.no_avx_vnni;
  const int copies = M <= 4 ? rotation_copies(packed_bytes(f, p.K, p.N, group)) : 1;
  const auto& ws = bench_weights(f, p.K, p.N, copies, group, super_rows);
  std::vector<float> x(static_cast<std::size_t>(M * p.K));
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int>(i % 19) - 9) * 0.05f;
  std::vector<float> y(static_cast<std::size_t>(M * p.N));
  const kernels::CoreSplit split = bench_split(M, p.N, threads);
  std::size_t i = 0;
  for (auto _ : state) {
    kernels::linear(x, ws[i], {}, y, {M, p.K, p.N}, split, path.precision);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    i = (i + 1) % ws.size();
  }
  kernels::detail::avx_vnni_gemv_disabled() = saved;
  if (M <= 4)
    report_bandwidth(state, static_cast<double>(ws[0].total_bytes()), threads);
  else
    report(state, 2.0 * static_cast<double>(M * p.K * p.N), threads, path.ceiling);
  state.counters["copies"] = static_cast<double>(ws.size());
}

/// linear_act/qwen2.5-0.5b/{gate_proj,down_proj}/{int4_sym_g32,int8_g32,int8_g16,int6_sym_g16,
/// int8_min_g32,int6_min_g32}/<path>/M:{1,16,64,512}/threads:{1,2}: the AVX2 int8-activation
/// kernels against the AVX2 exact path (and the AVX-512 VNNI ones, and `amx-int8`: the tile unit's
/// dispatch, the x8 kernel from 16 rows and the VNNI kernels below) on Q4_0 / Q8_0-like
/// weights, Q6_K's old (int8) and new (int6) containers, and Q5_K's (int8_min, int6_min).
void register_act_benchmarks() {
  for (const Proj& p : projections()) {
    const std::string pn = p.name;
    if (std::string(p.model) != "qwen2.5-0.5b" || (pn != "gate_proj" && pn != "down_proj"))
      continue;
    const std::pair<WeightFormat, std::int64_t> fgs[] = {
        {WeightFormat::int4_sym, 32}, {WeightFormat::int8, 32},     {WeightFormat::int8, 16},
        {WeightFormat::int6_sym, 16}, {WeightFormat::int8_min, 32}, {WeightFormat::int6_min, 32}};
    for (const auto& [f, g] : fgs)
      for (const ActBenchPath& path : act_bench_paths())
        for (std::int64_t M : {1, 16, 64, 512})
          for (int threads : {1, 2}) {
            if (path.isa == kernels::Isa::amx && M < kernels::detail::kAmxX8MinRows)
              continue; // below its rows the tile unit's dispatch is the VNNI path above
            const std::string name =
                std::string("linear_act/") + p.model + "/" + p.name + "/" +
                std::string(kernels::format_name(f)) + "_g" + std::to_string(g) + "/" + path.name +
                "/M:" + std::to_string(M) + "/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), bm_linear_act, p, f, g, path, M, threads,
                                         std::int64_t{0})
                ->UseRealTime()
                ->Unit(benchmark::kMicrosecond)
                ->MinTime(M == 1 ? 0.2 : 0.3);
          }
  }
}

/// linear_two_level/llama3-8b/{gate_proj,down_proj}/{int4_min_g32,int6_sym_g16,int6_min_g32}/
/// {one_level,s256}/<path>/M:1/threads:{1,2}: the K-quants' containers (Q4_K, Q6_K, Q5_K) with
/// an f32 scale (and min) per group against two-level scales (an int8 code per group, an f32 per
/// 256 rows), on the decode GEMV paths, bytes against the read ceiling.
void register_two_level_benchmarks() {
  for (const Proj& p : projections()) {
    const std::string pn = p.name;
    if (std::string(p.model) != "llama3-8b" || (pn != "gate_proj" && pn != "down_proj"))
      continue;
    const std::pair<WeightFormat, std::int64_t> fgs[] = {
        {WeightFormat::int4_min, 32}, {WeightFormat::int6_sym, 16}, {WeightFormat::int6_min, 32}};
    for (const auto& [f, g] : fgs)
      for (std::int64_t super_rows : {0, 256})
        for (const ActBenchPath& path : act_bench_paths())
          for (int threads : {1, 2}) {
            if (path.isa == kernels::Isa::amx)
              continue; // one row: the tile unit's dispatch is the VNNI path
            const std::string name = std::string("linear_two_level/") + p.model + "/" + p.name +
                                     "/" + std::string(kernels::format_name(f)) + "_g" +
                                     std::to_string(g) + "/" + (super_rows ? "s256" : "one_level") +
                                     "/" + path.name + "/M:1/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), bm_linear_act, p, f, g, path,
                                         std::int64_t{1}, threads, super_rows)
                ->UseRealTime()
                ->Unit(benchmark::kMicrosecond)
                ->MinTime(0.2);
          }
  }
}

/// linear_w8a8/qwen2.5-0.5b/{gate_proj,down_proj}/<path>/M:{1,512}/threads:{1,2}, and the W4A8
/// experiment's w4a8_experiment/qwen2.5-0.5b/<proj>/int4_sym/M:1/threads:{1,2}.
void register_w8a8_benchmarks() {
  for (const Proj& p : projections()) {
    const std::string pn = p.name;
    if (std::string(p.model) != "qwen2.5-0.5b" || (pn != "gate_proj" && pn != "down_proj"))
      continue;
    for (const W8A8BenchPath& path : w8a8_bench_paths())
      for (std::int64_t M : {1, 512})
        for (int threads : {1, 2}) {
          const std::string name = std::string("linear_w8a8/") + p.model + "/" + p.name + "/" +
                                   path.name + "/M:" + std::to_string(M) +
                                   "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), bm_linear_w8a8, p, path, M, threads)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond)
              ->MinTime(M == 1 ? 0.2 : 0.3);
        }
    for (int threads : {1, 2}) {
      const std::string name = std::string("w4a8_experiment/") + p.model + "/" + p.name +
                               "/int4_sym/M:1/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), bm_w4a8_experiment, p, threads)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.2);
    }
  }
}

void register_matmul_benchmarks(bool full) {
  register_w8a8_benchmarks();
  register_act_benchmarks();
  register_two_level_benchmarks();
  const WeightFormat all[] = {WeightFormat::f32,       WeightFormat::bf16,
                              WeightFormat::f16,       WeightFormat::int8,
                              WeightFormat::int8_asym, WeightFormat::int4_sym,
                              WeightFormat::int4_asym, WeightFormat::int6_sym};
  // q/k/v of one layer from one prepared x
  for (const char* model : {"qwen2.5-0.5b", "llama3-8b"})
    for (WeightFormat f : all)
      for (int threads : {1, 2}) {
        const std::string name = std::string("linear_qkv/") + model + "/" +
                                 std::string(kernels::format_name(f)) +
                                 "/M:1/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), bm_linear_qkv, std::string(model), f, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.2);
      }
  // the AMX GEMMs at M = 512 (skipped with "AMX: not available on this CPU" where absent)
  for (const Proj& p : projections()) {
    const std::string pn = p.name;
    if (std::string(p.model) != "llama3-8b" ||
        (pn != "q_proj" && pn != "k_proj" && pn != "gate_proj"))
      continue;
    for (WeightFormat f : {WeightFormat::bf16, WeightFormat::int8, WeightFormat::int4_sym}) {
      const std::string name = std::string("linear_amx/") + p.model + "/" + p.name + "/" +
                               std::string(kernels::format_name(f)) + "/M:512/threads:2";
      benchmark::RegisterBenchmark(name.c_str(), bm_linear_amx, p, f, std::int64_t{512}, 2)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.3);
    }
  }
  for (const Proj& p : projections()) {
    const bool llama = std::string(p.model) == "llama3-8b";
    const bool lm_head = std::string(p.name) == "lm_head";
    if (lm_head && !full && llama)
      continue;
    for (WeightFormat f : all) // format outermost: M and threads reuse the cached weights
      for (std::int64_t M : {1, 4, 8, 16, 128, 512})
        for (int threads : {1, 2}) {
          bool on = full;
          if (!on && lm_head) // the Qwen lm_head (272 MB in bf16): the float formats' decode row
            on = (M == 1 || M == 4) && threads == 2 && !kernels::is_quantized(f) && !llama;
          else if (!on && M == 1)
            on = true;
          else if (!on && (M == 4 || M == 8 || M == 16)) // a verify call's rows, Qwen only
            on = threads == 2 && !llama;
          if (!on && !lm_head &&
              (f == WeightFormat::f32 || f == WeightFormat::bf16 || f == WeightFormat::int4_sym)) {
            const bool proj_ok = !llama || (M == 128 && (std::string(p.name) == "q_proj" ||
                                                         std::string(p.name) == "gate_proj" ||
                                                         std::string(p.name) == "down_proj"));
            const bool thr_ok = threads == 2 || (f == WeightFormat::f32 && !llama);
            on = proj_ok && thr_ok;
          }
          if (!on)
            continue;
          const std::string name = std::string("linear/") + p.model + "/" + p.name + "/" +
                                   std::string(kernels::format_name(f)) +
                                   "/M:" + std::to_string(M) +
                                   "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), bm_linear, p, f, M, threads)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond)
              ->MinTime(M == 1 ? 0.2 : 0.3);
        }
  }
}

} // namespace tpullm::bench
