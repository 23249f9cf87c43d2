// Measures the machine ceilings of bench/roofline.hpp.
//  - read bandwidth: sum of a 1 GiB buffer (4x the 260 MiB L3 this machine reports), widest
//    vector loads available, software prefetch at 0/4/8/16 KiB ahead, best of 3 passes each;
//    2 threads each read their own contiguous half.
//  - f32 FMA peak: 16 independent vfmadd231ps chains per thread (zmm on AVX-512, ymm on AVX2),
//    enough to cover the FMA latency times two FMA ports; best of 5.
//  - bf16 / int8: the same with vdpbf16ps (32 MACs = 64 flops per zmm instruction) and vpdpbusd
//    (64 MACs = 128 ops per zmm instruction).
#include "roofline.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <immintrin.h>
#include <omp.h>

#include "tpullm/kernels/cpu_features.hpp"

// GCC 12 flags _mm512_undefined_* inside AVX-512 intrinsics as uninitialized (false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tpullm::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// `pf`: software prefetch distance in floats (0 = none). This VM's hardware prefetcher leaves
// bandwidth on the table that the kernels' own prefetching reaches, so the ceiling is the best
// over several distances.
__attribute__((target("avx512f"))) float sum_avx512(const float* p, std::size_t n, std::size_t pf) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i + 64 <= n; i += 64) {
    if (pf)
      _mm_prefetch(reinterpret_cast<const char*>(p + i + pf), _MM_HINT_T0);
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, std::size_t n, std::size_t pf) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i + 32 <= n; i += 32) {
    if (pf && i % 64 == 0)
      _mm_prefetch(reinterpret_cast<const char*>(p + i + pf), _MM_HINT_T0);
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float t[8];
  _mm256_storeu_ps(t, s);
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

float sum_portable(const float* p, std::size_t n) {
  float s[8] = {};
  for (std::size_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      s[j] += p[i + j];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

float sum_best(const float* p, std::size_t n, std::size_t pf) {
  const auto& f = kernels::cpu_features();
  if (f.avx512)
    return sum_avx512(p, n, pf);
  if (f.avx2)
    return sum_avx2(p, n, pf);
  return sum_portable(p, n);
}

double read_bandwidth_gbs(int threads) {
  const std::size_t bytes = std::size_t{1} << 30, n = bytes / sizeof(float);
  float* buf = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!buf)
    return 0;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::size_t i = 0; i < n; ++i)
    buf[i] = 1.0f;
  double best = 0;
  volatile float sink = 0;
  for (std::size_t pf : {std::size_t{0}, std::size_t{1024}, std::size_t{2048}, std::size_t{4096}})
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
      {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        const std::size_t chunk = n / T / 64 * 64;
        const std::size_t len = t == T - 1 ? n - t * chunk : chunk;
        // Prefetch stays inside this thread's part (the last 64 KiB are read unprefetched).
        total += sum_best(buf + t * chunk, len > pf + 16384 ? len - pf : len, pf);
        if (len > pf + 16384)
          total += sum_best(buf + t * chunk + len - pf, pf, 0);
      }
      const double s = seconds_since(t0);
      sink = sink + total;
      best = std::max(best, bytes / s / 1e9);
    }
  std::free(buf);
  return best;
}

// Each function returns the flops (or ops) it performed; 16 independent accumulator chains.
__attribute__((target("avx512f,fma"))) double fma_loop_avx512(std::int64_t iters, float* out) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i)
    acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i)
    s = _mm512_add_ps(s, acc[i]);
  *out = _mm512_reduce_add_ps(s);
  return static_cast<double>(iters) * 16 * 16 * 2;
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(std::int64_t iters, float* out) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i)
    acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i)
      acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  float t[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i)
    s = _mm256_add_ps(s, acc[i]);
  _mm256_storeu_ps(t, s);
  *out = t[0];
  return static_cast<double>(iters) * 12 * 8 * 2;
}

__attribute__((target("avx512f,avx512bf16,avx512bw"))) double bf16_loop(std::int64_t iters,
                                                                        float* out) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i)
    acc[i] = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3300);
  for (std::int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i)
    s = _mm512_add_ps(s, acc[i]);
  *out = _mm512_reduce_add_ps(s);
  return static_cast<double>(iters) * 16 * 32 * 2;
}

__attribute__((target("avx512f,avx512vnni,avx512bw"))) double vnni_loop(std::int64_t iters,
                                                                        float* out) {
  __m512i acc[16];
  for (int i = 0; i < 16; ++i)
    acc[i] = _mm512_setzero_si512();
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
  for (std::int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  __m512i s = acc[0];
  for (int i = 1; i < 16; ++i)
    s = _mm512_add_epi32(s, acc[i]);
  *out = static_cast<float>(_mm512_reduce_add_epi32(s));
  return static_cast<double>(iters) * 16 * 64 * 2;
}
using Loop = double (*)(std::int64_t, float*);

double peak_g(Loop loop, int threads) {
  const std::int64_t iters = 20'000'000;
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    double flops = 0;
    float outs[64] = {};
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += loop(iters, &outs[omp_get_thread_num() % 64]);
    const double s = seconds_since(t0);
    sink = sink + outs[0];
    best = std::max(best, flops / s / 1e9);
  }
  return best;
}

Ceilings& storage() {
  static Ceilings c;
  return c;
}
bool& measured() {
  static bool m = false;
  return m;
}

} // namespace

const Ceilings& measure_ceilings() {
  Ceilings& c = storage();
  const auto& f = kernels::cpu_features();
  c.read_gbs_1t = read_bandwidth_gbs(1);
  c.read_gbs_2t = read_bandwidth_gbs(2);
  const Loop fma = f.avx512 ? fma_loop_avx512 : f.avx2 ? fma_loop_avx2 : nullptr;
  if (fma) {
    c.f32_gflops_1t = peak_g(fma, 1);
    c.f32_gflops_2t = peak_g(fma, 2);
  }
  if (f.avx512_bf16)
    c.bf16_gflops_2t = peak_g(bf16_loop, 2);
  if (f.avx512_vnni)
    c.int8_gops_2t = peak_g(vnni_loop, 2);
  measured() = true;
  return c;
}

const Ceilings& ceilings() {
  if (!measured())
    measure_ceilings();
  return storage();
}

void disable_ceilings() {
  storage() = Ceilings{};
  measured() = true;
}

void print_ceilings(const Ceilings& c) {
  std::printf("tpullm machine ceilings (isa %s)\n",
              std::string(kernels::isa_name(kernels::cpu_features().best())).c_str());
  std::printf("  read bandwidth   1 thread %8.1f GB/s    2 threads %8.1f GB/s\n", c.read_gbs_1t,
              c.read_gbs_2t);
  std::printf("  f32 FMA peak     1 thread %8.1f GFLOP/s 2 threads %8.1f GFLOP/s\n",
              c.f32_gflops_1t, c.f32_gflops_2t);
  std::printf("  bf16 vdpbf16ps                              2 threads %8.1f GFLOP/s\n",
              c.bf16_gflops_2t);
  std::printf("  int8 vpdpbusd                               2 threads %8.1f GOP/s\n",
              c.int8_gops_2t);
  std::fflush(stdout);
}

void report_bandwidth(benchmark::State& state, double bytes_per_iter, int threads) {
  const Ceilings& c = ceilings();
  const double ceil_bps = (threads >= 2 ? c.read_gbs_2t : c.read_gbs_1t) * 1e9;
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytes_per_iter, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["roofline_frac"] = benchmark::Counter(
      ceil_bps > 0 ? bytes_per_iter / ceil_bps : 0, benchmark::Counter::kIsIterationInvariantRate);
}

void report_compute(benchmark::State& state, double flops_per_iter, int threads) {
  const Ceilings& c = ceilings();
  const double ceil_fps = (threads >= 2 ? c.f32_gflops_2t : c.f32_gflops_1t) * 1e9;
  state.counters["flops"] =
      benchmark::Counter(flops_per_iter, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["roofline_frac"] = benchmark::Counter(
      ceil_fps > 0 ? flops_per_iter / ceil_fps : 0, benchmark::Counter::kIsIterationInvariantRate);
}

} // namespace tpullm::bench
