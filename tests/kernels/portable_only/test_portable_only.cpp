// The kernel library compiled with TPULLM_PORTABLE_ONLY: what a non-x86 build gets (no
// intrinsics headers, no CPUID, no target attributes; only the xsimd portable path). This file
// is its own small test binary (never linked with the x86 build of the same inline functions)
// and checks that every public kernel header compiles that way and that the main kernels still
// compute the right thing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/elementwise.hpp"
#include "tpullm/kernels/embedding_gather.hpp"
#include "tpullm/kernels/flash_attention.hpp"
#include "tpullm/kernels/matmul.hpp"
#include "tpullm/kernels/mlp.hpp"
#include "tpullm/kernels/packed_weights.hpp"
#include "tpullm/kernels/rms_norm.hpp"
#include "tpullm/kernels/rope_gather.hpp"
#include "tpullm/kernels/sampling.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/conversion/quant_repack.hpp"

#include "error_kind.hpp"

#if TPULLM_X86
#error "TPULLM_PORTABLE_ONLY must switch the x86 paths off"
#endif
#ifdef _IMMINTRIN_H_INCLUDED
#error "a kernel header included <immintrin.h> in a portable-only build"
#endif
#ifdef _CPUID_H_INCLUDED
#error "a kernel header included <cpuid.h> in a portable-only build"
#endif

using namespace tpullm;
using namespace tpullm::kernels;

namespace {

std::vector<float> rnd(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& e : v)
    e = u(rng);
  return v;
}

} // namespace

TEST_CASE("portable-only build: only the portable path exists", "[portable-only]") {
  CHECK(cpu_features().best() == Isa::portable);
  CHECK(active_isa() == Isa::portable);
  CHECK_THROWS_KIND(set_isa_override(Isa::avx2), unsupported);
  CHECK(detail::kPortableSimd == (detail::kPW > 1));
}

TEST_CASE("portable-only build: linear and MLP match a double reference", "[portable-only]") {
  const std::int64_t K = 72, N = 40;
  for (std::int64_t M : {1, 3, 9}) {
    const auto x = rnd(static_cast<std::size_t>(M * K), 1);
    const auto wf = rnd(static_cast<std::size_t>(K * N), 2);
    std::vector<std::int8_t> q(wf.size());
    std::vector<float> sc(static_cast<std::size_t>(K / 24 * N), 0.01f);
    for (std::size_t i = 0; i < q.size(); ++i)
      q[i] = static_cast<std::int8_t>(std::lround(wf[i] * 7));
    std::vector<std::uint8_t> u(q.size());
    for (std::size_t i = 0; i < q.size(); ++i)
      u[i] = static_cast<std::uint8_t>(q[i] + 8);
    const std::vector<float> mins(sc.size(), 0.005f);
    for (const PackedWeights& w :
         {pack_f32(wf, K, N), pack_int8(q, sc, K, N, 24), pack_int4_sym(q, sc, K, N, 24),
          pack_int4_min(u, sc, mins, K, N, 24), pack_int8_min(u, sc, mins, K, N, 24)}) {
      const auto deq = dequantize(w);
      std::vector<float> y(static_cast<std::size_t>(M * N));
      linear(x, w, {}, y, {M, K, N}, {SplitDim::cols, 2});
      double worst = 0;
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = 0; n < N; ++n) {
          double ref = 0, mag = 0;
          for (std::int64_t k = 0; k < K; ++k) {
            ref += double(x[m * K + k]) * deq[k * N + n];
            mag += std::abs(double(x[m * K + k]) * deq[k * N + n]);
          }
          worst = std::max(worst, std::abs(y[m * N + n] - ref) / (mag + 1e-30));
        }
      INFO("M=" << M << " format " << format_name(w.format));
      CHECK(worst < 1e-5);
    }
  }
  // the MLP runs through the same machinery plus the xsimd silu
  const std::int64_t H = 32, I = 64;
  const auto x = rnd(2 * H, 3);
  const auto g = pack_f32(rnd(H * I, 4), H, I), u = pack_f32(rnd(H * I, 5), H, I),
             d = pack_f32(rnd(I * H, 6), I, H);
  std::vector<float> out(2 * H);
  swiglu_mlp(x, g, u, d, out, {2, H, I}, 1 << 20);
  const auto gd = dequantize(g), ud = dequantize(u), dd = dequantize(d);
  double worst = 0;
  for (int m = 0; m < 2; ++m)
    for (std::int64_t n = 0; n < H; ++n) {
      double ref = 0;
      for (std::int64_t i = 0; i < I; ++i) {
        double a = 0, b = 0;
        for (std::int64_t k = 0; k < H; ++k) {
          a += double(x[m * H + k]) * gd[k * I + i];
          b += double(x[m * H + k]) * ud[k * I + i];
        }
        ref += a / (1 + std::exp(-a)) * b * dd[i * H + n];
      }
      worst = std::max(worst, std::abs(out[m * H + n] - ref));
    }
  CHECK(worst < 1e-4);
}

TEST_CASE("portable-only build: attention prefill and decode", "[portable-only]") {
  for (std::int64_t L : {1, 20}) {
    const std::int64_t S = L == 1 ? 600 : 20, QH = 4, KH = 2, d = 24;
    const auto q = rnd(static_cast<std::size_t>(L * QH * d), 7);
    const auto k = rnd(static_cast<std::size_t>(S * KH * d), 8);
    const auto v = rnd(static_cast<std::size_t>(S * KH * d), 9);
    std::vector<std::int32_t> pos(static_cast<std::size_t>(L));
    for (std::int64_t i = 0; i < L; ++i)
      pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(S - L + i);
    std::vector<float> out(q.size());
    const float scale = 0.2f;
    flash_attention<float>(q, k, v, pos, out, {L, L, S, S, QH, KH, d, scale, true},
                           {SplitDim::rows, 2});
    double worst = 0;
    for (std::int64_t i = 0; i < L; ++i)
      for (std::int64_t h = 0; h < QH; ++h) {
        const std::int64_t kh = h / (QH / KH), end = pos[static_cast<std::size_t>(i)] + 1;
        std::vector<double> p(static_cast<std::size_t>(end));
        double mx = -1e300, den = 0;
        for (std::int64_t j = 0; j < end; ++j) {
          double s = 0;
          for (std::int64_t x = 0; x < d; ++x)
            s += double(q[(i * QH + h) * d + x]) * k[(j * KH + kh) * d + x];
          p[static_cast<std::size_t>(j)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        for (auto& e : p)
          den += (e = std::exp(e - mx));
        for (std::int64_t x = 0; x < d; ++x) {
          double o = 0;
          for (std::int64_t j = 0; j < end; ++j)
            o += p[static_cast<std::size_t>(j)] * v[(j * KH + kh) * d + x];
          worst = std::max(worst, std::abs(out[(i * QH + h) * d + x] - o / den));
        }
      }
    INFO("L=" << L);
    CHECK(worst < 2e-5);
  }
}

TEST_CASE("portable-only build: norms, softmax, RoPE, sampling", "[portable-only]") {
  const std::int64_t M = 3, H = 37;
  const auto x = rnd(static_cast<std::size_t>(M * H), 10), g = rnd(static_cast<std::size_t>(H), 11);
  std::vector<float> y(x.size()), sm(x.size());
  rms_norm<float>(x, g, y, {M, H}, 1e-6f);
  softmax_rows(x, sm, {M, H});
  for (std::int64_t m = 0; m < M; ++m) {
    double ss = 0, mx = -1e300, den = 0;
    for (std::int64_t i = 0; i < H; ++i) {
      ss += double(x[m * H + i]) * x[m * H + i];
      mx = std::max(mx, double(x[m * H + i]));
    }
    for (std::int64_t i = 0; i < H; ++i)
      den += std::exp(x[m * H + i] - mx);
    for (std::int64_t i = 0; i < H; ++i) {
      CHECK(std::abs(y[m * H + i] - x[m * H + i] / std::sqrt(ss / H + 1e-6) * g[i]) < 1e-5);
      CHECK(std::abs(sm[m * H + i] - std::exp(x[m * H + i] - mx) / den) < 1e-6);
    }
  }
  const RopeTables t = build_rope_tables(8, 4, 10000.0);
  std::vector<float> r{1, 2, 3, 4}, ro(4);
  std::vector<std::int32_t> pos{5};
  rope_apply(r, ro, pos, t, {1, 1, 4}, RopeMode::halves);
  CHECK(std::abs(ro[0] - (1 * t.cos[10] - 3 * t.sin[10])) < 1e-6);
  std::vector<float> logits{0.5f, 3.f, -1.f, 3.f};
  CHECK(argmax(logits) == 1);
}

TEST_CASE("portable-only build: the AMX kernels run on the tile emulator", "[portable-only]") {
  // the AMX path is plain C++ around the emulated tiles, so a non-x86 build can test it too
  const std::int64_t M = 20, K = 64, N = 40;
  const auto x = rnd(static_cast<std::size_t>(M * K), 12);
  const auto wf = rnd(static_cast<std::size_t>(K * N), 13);
  std::vector<std::uint16_t> wb(wf.size());
  for (std::size_t i = 0; i < wf.size(); ++i)
    wb[i] = f32_to_bf16(wf[i]);
  const auto w = pack_bf16(wb, K, N);
  const auto deq = dequantize(w);
  std::vector<float> y(static_cast<std::size_t>(M * N));
  {
    amx::ScopedEmulation emu;
    linear(x, w, {}, y, {M, K, N});
  }
  double worst = 0;
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        ref += double(x[m * K + k]) * deq[k * N + n];
        mag += std::abs(double(x[m * K + k]) * deq[k * N + n]);
      }
      worst = std::max(worst, std::abs(y[m * N + n] - ref) / (mag + 1e-30));
    }
  CHECK(worst <= 1.0 / 256 + 1e-4); // x rounded to bf16 (docs/kernels.md)
  CHECK(worst > 1e-7);              // and the path really rounded it
}
