// Measures the machine ceilings of devtools/ceilings.hpp.
//  - read bandwidth: the best over access patterns of a buffer of dram_rotation_bytes()
//    (max(1 GiB, 2 x the last-level cache)): S = 1, 2, 4 or 8 interleaved streams per thread (the
//    thread's part cut into S pieces read 256 bytes from each in turn), software prefetch 0, 1 or 4
//    KiB ahead in every stream, the widest vector loads the kernels use at the active ISA
//    (vector_width_now: TPULLM_ISA=avx2 reads with ymm on an AVX-512 CPU), best of 3 passes each; 2
//    threads each read their own half. The one-stream figure is kept too (what a kernel reading one
//    sequential stream per thread can hope for). read_bandwidth_now sweeps the same patterns once
//    each over a caller's region: the ceiling next to a figure.
//  - f32 FMA peak: 16 independent vfmadd231ps chains per thread (zmm at AVX-512, ymm at AVX2: the
//    active ISA's width),
//    enough to cover the FMA latency times two FMA ports; best of 5.
//  - bf16 / int8: the same with vdpbf16ps (32 MACs = 64 flops per zmm instruction) and vpdpbusd
//    (64 MACs = 128 ops per zmm instruction).
//  - int8 of the W8A8 paths: vpdpbusd zmm (above), VEX vpdpbusd ymm (AVX-VNNI: 32 MACs = 64
//    ops) and vpmaddwd ymm (AVX2: 16 MACs = 32 ops), 1 and 2 threads.
//  - AMX (only where cpu_features().amx): tdpbf16ps / tdpbssd on 4 accumulator tiles from 2 + 2
//    register-resident source tiles (16 x 16 x 32 bf16 = 16384 flops, 16 x 16 x 64 int8 = 32768
//    ops per instruction), best of 5. Elsewhere the AMX ceilings are 0 and printed as absent.
#include "tpullm/devtools/ceilings.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <omp.h>
#include <unistd.h>

#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/int8_linear.hpp"

#if TPULLM_X86
#include <immintrin.h>
#endif

// GCC 12 flags _mm512_undefined_* inside AVX-512 intrinsics as uninitialized (false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tpullm::machine {

int vector_width_now() {
#if TPULLM_X86
  const auto& f = kernels::cpu_features();
  const kernels::Isa isa = kernels::active_isa();
  if (f.avx512 && (isa == kernels::Isa::avx512 || isa == kernels::Isa::amx))
    return 512;
  if (f.avx2 && isa != kernels::Isa::portable)
    return 256;
#endif
  return 0;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

#if TPULLM_X86
// S interleaved streams over [p, p + n): stream s reads [s * len, (s + 1) * len), 64 floats
// (256 bytes) from each stream in turn; `pf`: software prefetch distance in floats (0 = none).
template <int S>
__attribute__((target("avx512f"))) float sum_avx512(const float* p, std::size_t n, std::size_t pf) {
  const std::size_t len = n / S / 64 * 64;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i < len; i += 64)
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const float* q = p + s * len + i;
      if (pf)
        for (int c = 0; c < 64; c += 16)
          _mm_prefetch(reinterpret_cast<const char*>(q + pf + c), _MM_HINT_T0);
      a0 = _mm512_add_ps(a0, _mm512_load_ps(q));
      a1 = _mm512_add_ps(a1, _mm512_load_ps(q + 16));
      a2 = _mm512_add_ps(a2, _mm512_load_ps(q + 32));
      a3 = _mm512_add_ps(a3, _mm512_load_ps(q + 48));
    }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

template <int S>
__attribute__((target("avx2"))) float sum_avx2(const float* p, std::size_t n, std::size_t pf) {
  const std::size_t len = n / S / 64 * 64;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i < len; i += 64)
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const float* q = p + s * len + i;
      if (pf)
        for (int c = 0; c < 64; c += 16)
          _mm_prefetch(reinterpret_cast<const char*>(q + pf + c), _MM_HINT_T0);
      for (int c = 0; c < 64; c += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(q + c));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(q + c + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(q + c + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(q + c + 24));
      }
    }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float t[8];
  _mm256_storeu_ps(t, s);
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#endif

template <int S>
float sum_portable(const float* p, std::size_t n) {
  const std::size_t len = n / S / 64 * 64;
  float acc[16] = {};
  for (std::size_t i = 0; i < len; i += 64)
    for (int s = 0; s < S; ++s)
      for (int c = 0; c < 64; c += 16)
        for (int j = 0; j < 16; ++j)
          acc[j] += p[s * len + i + c + j];
  float t = 0;
  for (float v : acc)
    t += v;
  return t;
}

/// `width`: vector_width_now(), read by the caller before its parallel region (active_isa may
/// throw, and an exception must not leave an OpenMP thread).
template <int S>
float sum_best(const float* p, std::size_t n, std::size_t pf, int width) {
#if TPULLM_X86
  switch (width) {
  case 512:
    return sum_avx512<S>(p, n, pf);
  case 256:
    return sum_avx2<S>(p, n, pf);
  default:
    break;
  }
#endif
  (void)pf;
  (void)width;
  return sum_portable<S>(p, n);
}

float sum_streams(int S, const float* p, std::size_t n, std::size_t pf, int width) {
  switch (S) {
  case 1:
    return sum_best<1>(p, n, pf, width);
  case 2:
    return sum_best<2>(p, n, pf, width);
  case 4:
    return sum_best<4>(p, n, pf, width);
  default:
    return sum_best<8>(p, n, pf, width);
  }
}

struct ReadResult {
  double best = 0, one_stream = 0;
  std::string pattern;
};

ReadResult read_bandwidth_gbs(const float* buf, std::size_t bytes, int threads, int passes = 3) {
  const std::size_t n = bytes / sizeof(float);
  const int width = vector_width_now();
  ReadResult r;
  volatile float sink = 0;
  for (int S : {1, 2, 4, 8})
    for (std::size_t pf : {std::size_t{0}, std::size_t{256}, std::size_t{1024}})
      for (int rep = 0; rep < passes; ++rep) {
        const auto t0 = Clock::now();
        float total = 0;
        std::size_t read = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total, read)
        {
          const int t = omp_get_thread_num(), T = omp_get_num_threads();
          const std::size_t chunk = n / T / (64 * 8) * (64 * 8);
          total += sum_streams(S, buf + t * chunk, chunk, pf, width);
          read += chunk / S / 64 * 64 * S * sizeof(float);
        }
        const double s = seconds_since(t0);
        sink = sink + total;
        const double gbs = static_cast<double>(read) / s / 1e9;
        if (S == 1)
          r.one_stream = std::max(r.one_stream, gbs);
        if (gbs > r.best) {
          r.best = gbs;
          r.pattern = std::to_string(S) + (S == 1 ? " stream" : " streams") + "/thread, pf " +
                      std::to_string(pf * sizeof(float) / 1024) + " KiB";
        }
      }
  return r;
}

// Each function returns the flops (or ops) it performed; 16 independent accumulator chains.
#if TPULLM_X86
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
  // Summed in 64 bits: the lanes are large enough that an int32 reduction would overflow (UB).
  alignas(64) std::int32_t lanes[16];
  _mm512_store_si512(lanes, s);
  std::int64_t total = 0;
  for (std::int32_t x : lanes)
    total += x;
  *out = static_cast<float>(total);
  return static_cast<double>(iters) * 16 * 64 * 2;
}

/// The 12 ymm int32 accumulators of the int8 loops, summed in 64 bits into *out.
__attribute__((target("avx2"))) void sum_lanes_avx2(const __m256i* acc, float* out) {
  std::int64_t total = 0;
  for (int i = 0; i < 12; ++i) {
    alignas(32) std::int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[i]);
    for (std::int32_t x : lanes)
      total += x;
  }
  *out = static_cast<float>(total);
}

__attribute__((target("avx2,avxvnni"))) double avx_vnni_loop(std::int64_t iters, float* out) {
  __m256i acc[12];
  for (int i = 0; i < 12; ++i)
    acc[i] = _mm256_setzero_si256();
  const __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8(1);
  for (std::int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i)
      __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc[i]) : "x"(a), "x"(b));
  sum_lanes_avx2(acc, out);
  return static_cast<double>(iters) * 12 * 32 * 2;
}

__attribute__((target("avx2"))) double madd16_loop(std::int64_t iters, float* out) {
  __m256i acc[12];
  for (int i = 0; i < 12; ++i)
    acc[i] = _mm256_setzero_si256();
  const __m256i a = _mm256_set1_epi16(1), b = _mm256_set1_epi16(1);
  for (std::int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) { // the AVX2 path's pair: vpmaddwd, then vpaddd into the sum
      __m256i t; // volatile: a product of loop-invariant operands must not be hoisted
      __asm__ volatile("vpmaddwd %2, %1, %0" : "=x"(t) : "x"(a), "x"(b));
      acc[i] = _mm256_add_epi32(acc[i], t);
    }
  sum_lanes_avx2(acc, out);
  return static_cast<double>(iters) * 12 * 16 * 2;
}

/// The 64-byte LDTILECFG operand: palette 1, tiles 0-7 all 16 rows x 64 bytes.
struct alignas(64) AmxConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

/// What both AMX loops do before their tile products: configure the tiles, zero the accumulator
/// tiles 0-3 and load the source tiles 4-7 (16 rows of 64 bytes each) from `src`.
__attribute__((target("amx-tile"), always_inline)) inline void amx_begin(const void* src) {
  const AmxConfig cfg;
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, src, 64);
  _tile_loadd(5, src, 64);
  _tile_loadd(6, src, 64);
  _tile_loadd(7, src, 64);
}

/// And after them: tile 0 into `dst` (16 rows of 64 bytes), tiles released.
__attribute__((target("amx-tile"), always_inline)) inline void amx_end(void* dst) {
  _tile_stored(0, dst, 64);
  _tile_release();
}

__attribute__((target("amx-tile,amx-bf16"))) double amx_bf16_loop(std::int64_t iters, float* out) {
  alignas(64) static thread_local std::uint16_t src[16 * 32];
  alignas(64) static thread_local float dst[16 * 16];
  for (auto& v : src)
    v = 0x3c00; // bf16 2^-7: sums stay finite and normal
  amx_begin(src);
  for (std::int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  amx_end(dst);
  *out = dst[0];
  return static_cast<double>(iters) * 4 * 16 * 16 * 32 * 2;
}

__attribute__((target("amx-tile,amx-int8"))) double amx_int8_loop(std::int64_t iters, float* out) {
  alignas(64) static thread_local std::int8_t src[16 * 64];
  alignas(64) static thread_local std::int32_t dst[16 * 16];
  for (auto& v : src)
    v = 1;
  amx_begin(src);
  for (std::int64_t it = 0; it < iters; ++it) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  amx_end(dst);
  *out = static_cast<float>(dst[0]);
  return static_cast<double>(iters) * 4 * 16 * 16 * 64 * 2;
}
#endif

using Loop = double (*)(std::int64_t, float*);

double peak_g(Loop loop, int threads, std::int64_t iters = 20'000'000) {
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

/// The start-up loop of a compute ceiling on this CPU and its iterations per pass: {} for the
/// read ceiling and for an instruction the CPU lacks.
struct PeakLoop {
  Loop loop = nullptr;
  std::int64_t iters = 0;
};

PeakLoop peak_loop(Ceiling which) {
#if TPULLM_X86
  const auto& f = kernels::cpu_features();
  const int width = vector_width_now();
  Loop loop = nullptr;
  switch (which) {
  case Ceiling::read:
    return {};
  case Ceiling::f32_fma:
    loop = width == 512 ? fma_loop_avx512 : width == 256 ? fma_loop_avx2 : nullptr;
    break;
  case Ceiling::bf16_dot:
    loop = f.avx512_bf16 ? bf16_loop : nullptr;
    break;
  case Ceiling::int8_vnni:
    loop = f.avx512_vnni ? vnni_loop : nullptr;
    break;
  case Ceiling::int8_avx_vnni:
    loop = f.avx_vnni ? avx_vnni_loop : nullptr;
    break;
  case Ceiling::int8_avx2:
    loop = f.avx2 ? madd16_loop : nullptr;
    break;
  case Ceiling::amx_bf16:
    loop = f.amx ? amx_bf16_loop : nullptr;
    break;
  case Ceiling::amx_int8:
    loop = f.amx ? amx_int8_loop : nullptr;
    break;
  }
  // a tile instruction does 16-64x the work of a vector one: a tenth of the passes
  const bool tiles = which == Ceiling::amx_bf16 || which == Ceiling::amx_int8;
  return {loop, tiles ? 2'000'000 : 20'000'000};
#else
  (void)which;
  return {};
#endif
}

/// The peak of `which` in G per second on `threads` threads over passes of 1 / `shorten` of
/// the start-up length; 0 where peak_loop has no loop.
double peak_of(Ceiling which, int threads, std::int64_t shorten = 1) {
  const PeakLoop p = peak_loop(which);
  return p.loop ? peak_g(p.loop, std::max(1, threads), p.iters / shorten) : 0;
}

Ceilings& storage() {
  static Ceilings c;
  return c;
}
bool& measured() {
  static bool m = false;
  return m;
}

/// last_level_cache_bytes() read from the machine (sysfs, else sysconf).
long long read_last_level_cache_bytes() {
  // sysfs first: glibc's sysconf answers from CPUID, which in a VM can describe the host (seen:
  // 384 MiB on a 2-core Zen 5 VM whose sysfs and lscpu say 32 MiB).
  long long best = 0;
  int best_level = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), size(dir + "size");
    int lv = 0;
    std::string text;
    if (!(level >> lv) || !(size >> text) || text.empty())
      continue;
    long long bytes = 0;
    try {
      bytes = std::stoll(text);
    } catch (const std::exception&) {
      continue;
    }
    const char unit = text.back();
    bytes *= unit == 'K' ? 1024LL : unit == 'M' ? 1LL << 20 : unit == 'G' ? 1LL << 30 : 1LL;
    if (lv > best_level || (lv == best_level && bytes > best)) {
      best_level = lv;
      best = bytes;
    }
  }
  if (best > 0)
    return best;
  const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max(0L, l3 > 0 ? l3 : ::sysconf(_SC_LEVEL2_CACHE_SIZE));
}

} // namespace

ReadNow read_bandwidth_now(const void* p, std::size_t bytes, int threads) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t b = (a + 4095) / 4096 * 4096, e = (a + bytes) / 4096 * 4096;
  if (p == nullptr || e <= b || e - b < read_now_min_bytes() || threads < 1)
    return {};
  const ReadResult r = read_bandwidth_gbs(reinterpret_cast<const float*>(b), e - b, threads, 1);
  return {r.best, r.pattern};
}

std::size_t read_now_min_bytes() {
  return std::max<std::size_t>(std::size_t{256} << 20,
                               4 * static_cast<std::size_t>(last_level_cache_bytes()));
}

long long last_level_cache_bytes() {
  static const long long bytes = read_last_level_cache_bytes(); // read once: every sweep asks
  return bytes;
}

ReadNow read_ceiling_now(int threads) {
  // exactly the least region (a 1 GiB cap made it refuse every sweep where 4 x the cache is
  // more: 1040 MiB on a Xeon VM with 260 MiB of L3)
  static const std::size_t bytes = read_now_min_bytes();
  static float* buf = [] {
    auto* q = static_cast<float*>(std::aligned_alloc(4096, bytes));
    if (q)
      std::fill(q, q + bytes / sizeof(float), 1.0f);
    return q;
  }();
  return read_bandwidth_now(buf, buf ? bytes : 0, threads);
}

long long dram_rotation_bytes() {
  const long long gib = 1LL << 30;
  return std::clamp<long long>(2LL * last_level_cache_bytes(), gib, 4 * gib);
}

const Ceilings& measure_ceilings() {
  Ceilings& c = storage();
  const auto& f = kernels::cpu_features();
  const auto bytes = static_cast<std::size_t>(dram_rotation_bytes());
  float* buf = static_cast<float*>(std::aligned_alloc(4096, bytes));
  if (buf) {
#pragma omp parallel for num_threads(2) schedule(static)
    for (std::size_t i = 0; i < bytes / sizeof(float); ++i)
      buf[i] = 1.0f;
    const ReadResult r1 = read_bandwidth_gbs(buf, bytes, 1);
    const ReadResult r2 = read_bandwidth_gbs(buf, bytes, 2);
    c.read_gbs_1t = r1.best;
    c.read_best_1t = r1.pattern;
    c.read1_gbs_1t = r1.one_stream;
    c.read_gbs_2t = r2.best;
    c.read_best_2t = r2.pattern;
    c.read1_gbs_2t = r2.one_stream;
    std::free(buf);
  }
  // every compute ceiling at 1 and 2 threads (0 where the CPU lacks the instruction)
  const struct {
    Ceiling which;
    double Ceilings::*one, Ceilings::*two;
  } peaks[] = {
      {Ceiling::f32_fma, &Ceilings::f32_gflops_1t, &Ceilings::f32_gflops_2t},
      {Ceiling::bf16_dot, &Ceilings::bf16_gflops_1t, &Ceilings::bf16_gflops_2t},
      {Ceiling::int8_vnni, &Ceilings::int8_gops_1t, &Ceilings::int8_gops_2t},
      {Ceiling::int8_avx_vnni, &Ceilings::int8_avx_vnni_gops_1t, &Ceilings::int8_avx_vnni_gops_2t},
      {Ceiling::int8_avx2, &Ceilings::int8_avx2_gops_1t, &Ceilings::int8_avx2_gops_2t},
      {Ceiling::amx_bf16, &Ceilings::amx_bf16_gflops_1t, &Ceilings::amx_bf16_gflops_2t},
      {Ceiling::amx_int8, &Ceilings::amx_int8_gops_1t, &Ceilings::amx_int8_gops_2t},
  };
  for (const auto& p : peaks) {
    c.*p.one = peak_of(p.which, 1);
    c.*p.two = peak_of(p.which, 2);
  }
  c.amx = f.amx;
  measured() = true;
  return c;
}

double compute_ceiling_now(Ceiling which, int threads) {
  return peak_of(which, threads, 5) * 1e9;
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
  std::printf("tpullm machine ceilings (isa %s; f32 FMA and read at %d-bit vectors)\n",
              std::string(kernels::isa_name(kernels::active_isa())).c_str(), vector_width_now());
  std::printf("  read bandwidth   1 thread %8.1f GB/s    2 threads %8.1f GB/s   "
              "(best pattern: %s | %s; %.1f GiB buffer)\n",
              c.read_gbs_1t, c.read_gbs_2t, c.read_best_1t.c_str(), c.read_best_2t.c_str(),
              static_cast<double>(dram_rotation_bytes()) / (1 << 30));
  std::printf("  read, 1 stream   1 thread %8.1f GB/s    2 threads %8.1f GB/s   (not a ceiling: "
              "one sequential stream per thread)\n",
              c.read1_gbs_1t, c.read1_gbs_2t);
  std::printf("  f32 FMA peak     1 thread %8.1f GFLOP/s 2 threads %8.1f GFLOP/s\n",
              c.f32_gflops_1t, c.f32_gflops_2t);
  std::printf("  bf16 vdpbf16ps   1 thread %8.1f GFLOP/s 2 threads %8.1f GFLOP/s\n",
              c.bf16_gflops_1t, c.bf16_gflops_2t);
  std::printf("  int8 vpdpbusd    1 thread %8.1f GOP/s   2 threads %8.1f GOP/s\n", c.int8_gops_1t,
              c.int8_gops_2t);
  std::printf("  int8 AVX-VNNI    1 thread %8.1f GOP/s   2 threads %8.1f GOP/s   (vpdpbusd ymm)\n",
              c.int8_avx_vnni_gops_1t, c.int8_avx_vnni_gops_2t);
  std::printf("  int8 AVX2        1 thread %8.1f GOP/s   2 threads %8.1f GOP/s   (vpmaddwd ymm)\n",
              c.int8_avx2_gops_1t, c.int8_avx2_gops_2t);
  if (c.amx) {
    std::printf("  AMX bf16 peak    1 thread %8.1f GFLOP/s 2 threads %8.1f GFLOP/s\n",
                c.amx_bf16_gflops_1t, c.amx_bf16_gflops_2t);
    std::printf("  AMX int8 peak    1 thread %8.1f GOP/s   2 threads %8.1f GOP/s\n",
                c.amx_int8_gops_1t, c.amx_int8_gops_2t);
  } else {
    std::printf("  AMX: not available on this CPU (%s); AMX benchmarks report themselves "
                "skipped\n",
                kernels::cpu_features().amx_cpuid ? "CPUID has AMX, the OS did not grant tile data"
                                                  : "no AMX in CPUID");
  }
  std::fflush(stdout);
}

double ceiling_value(Ceiling which, int threads) {
  const Ceilings& c = ceilings();
  const bool two = threads >= 2;
  switch (which) {
  case Ceiling::read:
    return (two ? c.read_gbs_2t : c.read_gbs_1t) * 1e9;
  case Ceiling::f32_fma:
    return (two ? c.f32_gflops_2t : c.f32_gflops_1t) * 1e9;
  case Ceiling::bf16_dot:
    return (two ? c.bf16_gflops_2t : c.bf16_gflops_1t) * 1e9;
  case Ceiling::amx_bf16:
    return (two ? c.amx_bf16_gflops_2t : c.amx_bf16_gflops_1t) * 1e9;
  case Ceiling::amx_int8:
    return (two ? c.amx_int8_gops_2t : c.amx_int8_gops_1t) * 1e9;
  case Ceiling::int8_vnni:
    return (two ? c.int8_gops_2t : c.int8_gops_1t) * 1e9;
  case Ceiling::int8_avx_vnni:
    return (two ? c.int8_avx_vnni_gops_2t : c.int8_avx_vnni_gops_1t) * 1e9;
  case Ceiling::int8_avx2:
    return (two ? c.int8_avx2_gops_2t : c.int8_avx2_gops_1t) * 1e9;
  }
  return 0;
}

std::optional<Ceiling> w8a8_ceiling(std::int64_t rows, std::string& path) {
  const kernels::detail::W8A8Path p = kernels::detail::w8a8_path(rows);
  path = kernels::detail::w8a8_path_name(p);
  switch (p) {
  case kernels::detail::W8A8Path::amx:
    return Ceiling::amx_int8;
  case kernels::detail::W8A8Path::vnni512:
    return Ceiling::int8_vnni;
  case kernels::detail::W8A8Path::avx_vnni:
    return Ceiling::int8_avx_vnni;
  case kernels::detail::W8A8Path::avx2:
    return Ceiling::int8_avx2;
  case kernels::detail::W8A8Path::portable:
  case kernels::detail::W8A8Path::amx_emulated:
    break;
  }
  return std::nullopt;
}

} // namespace tpullm::machine
