// The AMX paths: the tile emulator's semantics, the emulator against the real tile unit (only
// where the CPU and OS grant AMX; elsewhere the case says "skipped: CPU lacks AMX" and asserts
// nothing), and the AMX linear / MLP on the emulator (any machine) and on the hardware (AMX
// machines) against a double reference with derived bounds (docs/kernels.md):
//
//   bf16 weights (x rounded to bf16, RNE: |x^ - x| <= 2^-8 |x|; products exact; f32 sums):
//     |y - y_ref| <= (2^-8 + 1.01 tol(K)) sum_k |x_k| |w_kn| + tol(K) |b_n|
//   int8 / int4 weights (exact x: three digits, x = s1 (h + l/256 + t/65536) + r per group,
//   |r| <= 1.5 s1/65536, s1 = max|x_g| / 127; exact int32 tile sums; f32 scaling per group):
//     |y - y_ref| <= sum_k (1.5 s1_g(k) / 65536) |w_kn| + tol(K) (sum_k |x_k| A_kn + |b_n|)
//   with A = |scale| (|q| + |zero|) (scale and min: |scale| u + |min|) and tol(K) = 3e-6 sqrt(K)
//   + 1e-6 as in test_matmul.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tpullm/kernels/amx_tiles.hpp"
#include "tpullm/kernels/flash_attention.hpp"
#include "tpullm/kernels/matmul.hpp"
#include "tpullm/kernels/mlp.hpp"

#include "kernel_test_util.hpp"

using namespace tpullm;
using namespace tpullm::kernels;
using namespace tpullm_test;

namespace {

using amx::Emu;
using amx::TileConfig;

float f32_of_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

TileConfig full_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t)
    c.set(t, 16, 64);
  return c;
}

} // namespace

TEST_CASE("AMX emulator: loads and stores move rows x colsb bytes and zero the rest", "[amx]") {
  TileConfig c = full_config();
  c.set(2, 5, 12);
  Emu::configure(c);
  std::vector<std::uint8_t> src(16 * 100), dst(16 * 100, 0xAB);
  for (std::size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<std::uint8_t>(i * 7 + 1);
  Emu::load<2>(src.data(), 100);
  Emu::store<2>(dst.data(), 100);
  int wrong = 0;
  for (int r = 0; r < 16; ++r)
    for (int b = 0; b < 100; ++b) {
      const std::uint8_t want = (r < 5 && b < 12) ? src[r * 100 + b] : 0xAB; // untouched outside
      wrong += dst[r * 100 + b] != want;
    }
  CHECK(wrong == 0);
  // the tile itself holds zeros past colsb and rows (a full-size view of it shows them)
  const auto& t = Emu::st().t[2];
  CHECK(t[0][11] == src[11]);
  CHECK(t[0][12] == 0);
  CHECK(t[5][0] == 0);
  Emu::zero<2>();
  CHECK(t[0][0] == 0);
  Emu::release();
  CHECK_THROWS_KIND(Emu::zero<0>(), internal); // after release: #UD
}

TEST_CASE("AMX emulator: TDPBF16PS sums even and odd pairs with DAZ/FTZ", "[amx]") {
  Emu::configure(full_config());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<std::uint16_t> a(16 * 32), b(16 * 32);
  for (auto& v : a)
    v = f32_to_bf16(u(rng));
  for (auto& v : b)
    v = f32_to_bf16(u(rng));
  a[5] = 0x0001;  // a bf16 denormal: read as zero
  b[40] = 0x8003; // negative denormal
  std::vector<float> c0(16 * 16), c(16 * 16);
  for (std::size_t i = 0; i < c0.size(); ++i)
    c0[i] = u(rng);
  Emu::load<0>(c0.data(), 64);
  Emu::load<4>(a.data(), 64);
  Emu::load<6>(b.data(), 64);
  Emu::dpbf16ps<0, 4, 6>();
  Emu::store<0>(c.data(), 64);
  int bad = 0;
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float even = 0.f, odd = 0.f;
      for (int k = 0; k < 16; ++k) {
        auto val = [](std::uint16_t h) { return (h & 0x7F80) ? f32_of_bf16(h) : 0.0f; };
        even = std::fma(val(a[m * 32 + 2 * k]), val(b[k * 32 + 2 * n]), even);
        odd = std::fma(val(a[m * 32 + 2 * k + 1]), val(b[k * 32 + 2 * n + 1]), odd);
      }
      const float want = c0[m * 16 + n] + (even + odd);
      bad += c[m * 16 + n] != want;
    }
  CHECK(bad == 0);
  // shape rules: A's dwords per row must equal B's rows
  TileConfig wrong = full_config();
  wrong.set(6, 8, 64);
  Emu::configure(wrong);
  CHECK_THROWS_KIND((Emu::dpbf16ps<0, 4, 6>()), internal);
  Emu::release();
}

TEST_CASE("AMX emulator: TDPB{SS,SU,US,UU}D quad dot products wrap in int32", "[amx]") {
  TileConfig cfg = full_config();
  cfg.set(0, 3, 8).set(4, 3, 20).set(6, 5, 8); // C 3x2 dwords, A 3x5 quads, B 5 rows x 2 dwords
  Emu::configure(cfg);
  std::vector<std::uint8_t> a(3 * 20), b(5 * 8);
  std::mt19937 rng(9);
  for (auto& v : a)
    v = static_cast<std::uint8_t>(rng());
  for (auto& v : b)
    v = static_cast<std::uint8_t>(rng());
  std::vector<std::int32_t> c0{2147483000, -5, 7, -2147483000, 0, 1}, c(6);
  auto run = [&](auto op, bool as, bool bs) {
    Emu::load<0>(c0.data(), 8);
    Emu::load<4>(a.data(), 20);
    Emu::load<6>(b.data(), 8);
    op();
    Emu::store<0>(c.data(), 8);
    int bad = 0;
    for (int m = 0; m < 3; ++m)
      for (int n = 0; n < 2; ++n) {
        std::int64_t acc = c0[m * 2 + n];
        for (int k = 0; k < 5; ++k)
          for (int j = 0; j < 4; ++j) {
            const std::int64_t x = as ? std::int8_t(a[m * 20 + 4 * k + j]) : a[m * 20 + 4 * k + j];
            const std::int64_t y = bs ? std::int8_t(b[k * 8 + 4 * n + j]) : b[k * 8 + 4 * n + j];
            acc += x * y;
          }
        bad += c[m * 2 + n] != static_cast<std::int32_t>(static_cast<std::uint32_t>(acc));
      }
    return bad;
  };
  CHECK(run([] { Emu::dpbssd<0, 4, 6>(); }, true, true) == 0);
  CHECK(run([] { Emu::dpbsud<0, 4, 6>(); }, true, false) == 0);
  CHECK(run([] { Emu::dpbusd<0, 4, 6>(); }, false, true) == 0);
  CHECK(run([] { Emu::dpbuud<0, 4, 6>(); }, false, false) == 0);
  Emu::release();
  CHECK_THROWS_KIND(TileConfig().set(0, 17, 64), internal);
  CHECK_THROWS_KIND(TileConfig().set(0, 16, 66), internal);
}

#if TPULLM_X86
namespace {
/// Runs one of each tile operation through T and returns C (int and float parts).
template <class T>
TPULLM_TARGET_AMX void tile_program(const std::uint16_t* a16, const std::uint16_t* b16,
                                    const std::int8_t* a8, const std::int8_t* b8, float* cf,
                                    std::int32_t* ci) {
  TileConfig c;
  for (int t = 0; t < 8; ++t)
    c.set(t, 16, 64);
  T::configure(c);
  T::template zero<0>();
  T::template load<4>(a16, 64);
  T::template load<6>(b16, 64);
  T::template dpbf16ps<0, 4, 6>();
  T::template dpbf16ps<0, 4, 6>();
  T::template store<0>(cf, 64);
  T::template zero<1>();
  T::template load<5>(a8, 64);
  T::template load<7>(b8, 64);
  T::template dpbssd<1, 5, 7>();
  T::template dpbsud<1, 5, 7>();
  T::template dpbusd<1, 5, 7>();
  T::template dpbuud<1, 5, 7>();
  T::template store<1>(ci, 64);
  T::release();
}
} // namespace

TEST_CASE("AMX hardware: the tile unit agrees with the emulator", "[amx][amx-hw]") {
  if (!cpu_features().amx) {
    WARN("skipped: CPU lacks AMX (or the OS did not grant tile data): no real-hardware check "
         "ran");
    return;
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<std::uint16_t> a16(512), b16(512);
  std::vector<std::int8_t> a8(1024), b8(1024);
  for (auto& v : a16)
    v = f32_to_bf16(u(rng));
  for (auto& v : b16)
    v = f32_to_bf16(u(rng));
  for (auto& v : a8)
    v = static_cast<std::int8_t>(rng());
  for (auto& v : b8)
    v = static_cast<std::int8_t>(rng());
  std::vector<float> fh(256), fe(256);
  std::vector<std::int32_t> ih(256), ie(256);
  tile_program<amx::Hw>(a16.data(), b16.data(), a8.data(), b8.data(), fh.data(), ih.data());
  tile_program<amx::Emu>(a16.data(), b16.data(), a8.data(), b8.data(), fe.data(), ie.data());
  CHECK(std::memcmp(ih.data(), ie.data(), ih.size() * 4) == 0);
  double worst = 0; // the hardware may order the f32 additions differently
  for (int i = 0; i < 256; ++i)
    worst = std::max(worst, double(std::abs(fh[i] - fe[i])));
  CHECK(worst <= 1e-5);
}
#endif

namespace {

struct AmxCase {
  std::int64_t M, K, N, group;
  WeightFormat f;
  bool bias, act_order;
  CoreSplit split;
};

/// Runs linear on the AMX path (`hw` selects the tile unit, else the emulator) and checks the
/// derived bound; returns the worst error / bound.
double run_amx_linear(const AmxCase& c, std::uint32_t seed, bool hw) {
  const auto tw = make_weights(c.f, c.K, c.N, c.group, seed, c.act_order);
  auto x = random_vec(static_cast<std::size_t>(c.M * c.K), seed + 1);
  x[3] = 0.f; // a few exact zeros and a larger value per row keep the digit split honest
  for (std::int64_t m = 0; m < c.M; ++m)
    x[static_cast<std::size_t>(m * c.K + (m * 7) % c.K)] *= 9.0f;
  const auto bias =
      c.bias ? random_vec(static_cast<std::size_t>(c.N), seed + 2) : std::vector<float>{};
  const double tol = matmul_tol(c.K);
  const bool is_bf16 = c.f == WeightFormat::bf16;
  // max |x| per weight group, in packed row order (the digits are formed per packed group)
  const std::int64_t gr = tw.packed.group_rows();
  std::vector<float> out = nan_vec(static_cast<std::size_t>(c.M * c.N));
  {
    std::optional<amx::ScopedEmulation> emu;
    std::optional<ScopedIsa> isa;
    if (hw)
      isa.emplace(Isa::amx);
    else
      emu.emplace();
    detail::amx_int_forced() = hw; // the tile unit takes int weights only when asked
    linear(x, tw.packed, bias, out, {c.M, c.K, c.N}, c.split);
    detail::amx_int_forced() = false;
  }
  double worst = 0;
  for (std::int64_t m = 0; m < c.M; ++m) {
    std::vector<double> gmax(static_cast<std::size_t>((c.K + gr - 1) / gr + 1), 0.0);
    for (std::int64_t j = 0; j < c.K; ++j) {
      const std::int64_t k = tw.packed.k_perm.empty() ? j : tw.packed.k_perm[j];
      auto& g = gmax[static_cast<std::size_t>(j / gr)];
      g = std::max(g, std::abs(double(x[m * c.K + k])));
    }
    for (std::int64_t n = 0; n < c.N; ++n) {
      double ref = c.bias ? bias[n] : 0.0, sxw = 0, sxa = 0, sdig = 0;
      for (std::int64_t j = 0; j < c.K; ++j) {
        const std::int64_t k = tw.packed.k_perm.empty() ? j : tw.packed.k_perm[j];
        const double xv = x[m * c.K + k], wv = tw.deq[k * c.N + n];
        ref += xv * wv;
        sxw += std::abs(xv * wv);
        sxa += std::abs(xv) * tw.absw[k * c.N + n];
        sdig += 1.5 * gmax[static_cast<std::size_t>(j / gr)] / (127.0 * 65536.0) * std::abs(wv);
      }
      const double b = c.bias ? std::abs(bias[n]) : 0.0;
      const double bound =
          is_bf16 ? (std::ldexp(1.0, -8) + 1.01 * tol) * sxw + tol * b : sdig + tol * (sxa + b);
      const double err = std::abs(double(out[m * c.N + n]) - ref);
      worst = std::max(worst, std::isfinite(err) ? err / (bound + 1e-30) : 1e30);
    }
  }
  return worst;
}

std::vector<AmxCase> amx_cases() {
  const CoreSplit none{}, rows2{SplitDim::rows, 2}, cols2{SplitDim::cols, 2};
  std::vector<AmxCase> v;
  for (WeightFormat f : {WeightFormat::bf16, WeightFormat::int8, WeightFormat::int4_sym,
                         WeightFormat::int4_asym, WeightFormat::int8_asym, WeightFormat::int4_min,
                         WeightFormat::int8_min, WeightFormat::int6_sym}) {
    const bool i8 = is_byte_format(f);
    v.push_back({32, 64, 32, 32, f, false, false, none});              // two row tiles exactly
    v.push_back({17, 40, 33, i8 ? 20 : 40, f, true, false, rows2});    // row / column / k tails
    v.push_back({70, 136, 70, i8 ? 68 : 136, f, false, false, cols2}); // per-channel, K % 64 != 0
    v.push_back({33, 256, 40, 128, f, true, false, rows2});            // groups of 128 (2 k steps)
  }
  v.push_back({20, 96, 40, 48, WeightFormat::int4_asym, true, true, none});  // act-order
  v.push_back({24, 120, 20, 40, WeightFormat::int8, false, false, cols2});   // 40-row groups
  v.push_back({20, 96, 40, 32, WeightFormat::int8_asym, true, true, none});  // act-order
  v.push_back({20, 64, 40, 16, WeightFormat::int6_sym, true, false, rows2}); // Q6_K's groups
  v.push_back({18, 96, 40, 32, WeightFormat::int6_sym, false, true, none});  // act-order
  // scale and min with ggml's groups of 16 and 32 (one k step of 16 / 32 rows per group)
  for (WeightFormat f : {WeightFormat::int4_min, WeightFormat::int8_min, WeightFormat::int6_min}) {
    v.push_back({20, 64, 40, 16, f, true, false, rows2});
    v.push_back({33, 96, 71, 32, f, false, false, cols2});
    v.push_back({20, 96, 40, 16, f, true, true, none}); // act-order
  }
  return v;
}

} // namespace

TEST_CASE("AMX linear on the emulator meets the derived bounds", "[amx]") {
  const auto cases = amx_cases();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const AmxCase& c = cases[i];
    const double worst = run_amx_linear(c, 300 + static_cast<std::uint32_t>(i), false);
    INFO("case " << i << " M=" << c.M << " K=" << c.K << " N=" << c.N << " g=" << c.group << " "
                 << format_name(c.f) << " worst err/bound=" << worst);
    CHECK(worst <= 1.0);
    CHECK(worst > 0.0);
  }
}

TEST_CASE("AMX linear on the hardware meets the derived bounds", "[amx][amx-hw]") {
  if (!cpu_features().amx) {
    WARN("skipped: CPU lacks AMX (or the OS did not grant tile data): no real-hardware check "
         "ran");
    return;
  }
  const auto cases = amx_cases();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const AmxCase& c = cases[i];
    const double worst = run_amx_linear(c, 300 + static_cast<std::uint32_t>(i), true);
    INFO("case " << i << " " << format_name(c.f) << " worst err/bound=" << worst);
    CHECK(worst <= 1.0);
  }
}

TEST_CASE("AMX linear: the path really runs (the tile emulator is configured, bf16's rounding is "
          "visible, 16 rows stay off it)",
          "[amx]") {
  // a dispatch that silently ran another kernel would pass the bound test, not this one: the
  // emulator counts its configurations, and against the exact f32 GEMM bf16's rounding of x
  // shows (the int paths' three digits are exact to f32 rounding, so only the count tells)
  for (WeightFormat f : {WeightFormat::bf16, WeightFormat::int8, WeightFormat::int4_sym,
                         WeightFormat::int6_sym, WeightFormat::int6_min}) {
    const auto tw = make_weights(f, 64, 32, 64, 5);
    for (std::int64_t M : {detail::kAmxMinRows - 1, detail::kAmxMinRows}) {
      const auto x = random_vec(static_cast<std::size_t>(M * 64), 6);
      std::vector<float> y1(static_cast<std::size_t>(M * 32)), y2(y1.size());
      {
        // y1 is the f32 GEMM: on a CPU with AMX the default path would be the tile unit itself
        // (which agrees with the emulator bit for bit), so force the AVX-512 level there
        std::optional<ScopedIsa> no_tiles;
        if (active_isa() == Isa::amx)
          no_tiles.emplace(Isa::avx512);
        linear(x, tw.packed, {}, y1, {M, 64, 32});
      }
      const std::uint64_t configured = amx::Emu::configures().load();
      {
        amx::ScopedEmulation emu;
        linear(x, tw.packed, {}, y2, {M, 64, 32});
      }
      const bool ran = amx::Emu::configures().load() > configured;
      double diff = 0;
      for (std::size_t i = 0; i < y1.size(); ++i)
        diff = std::max(diff, double(std::abs(y1[i] - y2[i])));
      INFO(format_name(f) << " M=" << M << " max |amx - f32 gemm| = " << diff);
      if (M < detail::kAmxMinRows) {
        CHECK(!ran);
        CHECK(diff == 0.0);
      } else {
        CHECK(ran);
        if (f == WeightFormat::bf16)
          CHECK(diff > 1e-7);
      }
    }
  }
}

namespace {

double silu_d(double v) {
  return v / (1.0 + std::exp(-v));
}

} // namespace

TEST_CASE("AMX SwiGLU MLP on the emulator meets the propagated bound", "[amx]") {
  // out = down(silu(x gate) * (x up)); the gate / up errors propagate through silu * u
  // (|silu'| <= 1.1) and add to the down projection's own bound (with 20% margin for the
  // second-order terms)
  struct C {
    std::int64_t M, H, I, group;
    WeightFormat f;
    std::size_t budget;
  };
  const C cases[] = {{20, 64, 96, 32, WeightFormat::bf16, 1 << 20},
                     {33, 64, 160, 32, WeightFormat::int4_sym, 33 * 8 * 64}, // tiles of 64
                     {18, 96, 64, 32, WeightFormat::int8, 1 << 20},
                     {24, 64, 96, 32, WeightFormat::int4_asym, 1 << 20},
                     {24, 64, 96, 16, WeightFormat::int4_min, 1 << 20},
                     {18, 96, 64, 32, WeightFormat::int8_min, 1 << 20}};
  for (const C& c : cases) {
    const auto tg = make_weights(c.f, c.H, c.I, c.group, 71),
               tu = make_weights(c.f, c.H, c.I, c.group, 72);
    const auto td = make_weights(c.f, c.I, c.H, c.group, 73);
    const auto x = random_vec(static_cast<std::size_t>(c.M * c.H), 74);
    std::vector<double> xd(x.begin(), x.end()), g(static_cast<std::size_t>(c.M * c.I)), u(g.size()),
        h(g.size());
    for (std::int64_t m = 0; m < c.M; ++m)
      for (std::int64_t i = 0; i < c.I; ++i) {
        double a = 0, b = 0;
        for (std::int64_t k = 0; k < c.H; ++k) {
          a += xd[m * c.H + k] * tg.deq[k * c.I + i];
          b += xd[m * c.H + k] * tu.deq[k * c.I + i];
        }
        g[m * c.I + i] = a;
        u[m * c.I + i] = b;
        h[m * c.I + i] = silu_d(a) * b;
      }
    const auto bg = amx_linear_bound(tg, xd, c.M, c.H, c.I);
    const auto bu = amx_linear_bound(tu, xd, c.M, c.H, c.I);
    std::vector<double> dh(h.size()), habs(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      dh[i] = 1.1 * std::abs(u[i]) * bg[i] + std::abs(silu_d(g[i])) * bu[i];
      habs[i] = (std::abs(h[i]) + dh[i]) * 1.01;
    }
    const auto bd = amx_linear_bound(td, habs, c.M, c.I, c.H);
    std::vector<float> out = nan_vec(static_cast<std::size_t>(c.M * c.H));
    {
      amx::ScopedEmulation emu;
      swiglu_mlp(x, tg.packed, tu.packed, td.packed, out, {c.M, c.H, c.I}, c.budget,
                 {SplitDim::rows, 2});
    }
    double worst = 0;
    for (std::int64_t m = 0; m < c.M; ++m)
      for (std::int64_t n = 0; n < c.H; ++n) {
        double ref = 0, prop = 0;
        for (std::int64_t i = 0; i < c.I; ++i) {
          ref += h[m * c.I + i] * td.deq[i * c.H + n];
          prop += std::abs(td.deq[i * c.H + n]) * dh[m * c.I + i];
        }
        const double bound = 1.2 * (prop + bd[m * c.H + n]);
        const double err = std::abs(double(out[m * c.H + n]) - ref);
        worst = std::max(worst, std::isfinite(err) ? err / bound : 1e30);
      }
    INFO(format_name(c.f) << " M=" << c.M << " worst err/bound=" << worst);
    CHECK(worst <= 1.0);
    CHECK(worst > 0.0);
  }
}

namespace {

/// Prefill attention on the AMX path against a double reference computed from the values the
/// kernel sees (q * scale * log2 e, k and v rounded to bf16). Remaining error: P rounded to bf16
/// before P V (|dp| <= 2^-8 p, the denominator uses the f32 p) and f32 sums / exp2:
///   |out - ref| <= (2^-8 + 1e-4) max|v| over the head's visible keys.
/// Also reports the error against the unrounded f32 reference (not bounded by the test).
/// `k_growth` scales key j by 1 + k_growth j / S, so that a row's max score keeps rising along
/// the keys (the resident-O item's reference max then moves mid-row); `window` > 0 is a sliding
/// window.
template <class KV>
double run_amx_attention(std::int64_t L, std::int64_t S, std::int64_t pos0, std::int64_t qh,
                         std::int64_t kh, std::int64_t d, CoreSplit split, bool hw,
                         double& vs_exact, float k_growth = 0.f, std::int64_t window = 0) {
  std::mt19937 rng(static_cast<unsigned>(L * 131 + S + d));
  std::normal_distribution<float> nd(0.f, 1.f);
  const std::int64_t G = qh / kh, Lv = L - 1; // the last row is padding (L_valid < L)
  std::vector<float> q(static_cast<std::size_t>(L * qh * d));
  for (auto& e : q)
    e = nd(rng);
  std::vector<KV> k(static_cast<std::size_t>(S * kh * d)), v(k.size());
  const std::int64_t Sv = std::min(S, pos0 + Lv); // keys past the last position are NaN
  for (std::int64_t j = 0; j < S; ++j)
    for (std::int64_t e = 0; e < kh * d; ++e) {
      k[static_cast<std::size_t>(j * kh * d + e)] =
          from_f32<KV>(j < Sv ? 2.f * (1.f + k_growth * float(j) / float(S)) * nd(rng) : kNaN);
      v[static_cast<std::size_t>(j * kh * d + e)] = from_f32<KV>(j < Sv ? nd(rng) : kNaN);
    }
  std::vector<std::int32_t> pos(static_cast<std::size_t>(L));
  for (std::int64_t i = 0; i < L; ++i)
    pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(pos0 + i);
  const float scale = 1.0f / std::sqrt(float(d)), qs = scale * 1.4426950408889634f;
  std::vector<float> out = nan_vec(q.size());
  {
    std::optional<amx::ScopedEmulation> emu;
    std::optional<ScopedIsa> isa;
    if (hw)
      isa.emplace(Isa::amx);
    else
      emu.emplace();
    flash_attention<KV>(q, k, v, pos, out, {L, Lv, S, Sv, qh, kh, d, scale, true, window}, split);
  }
  auto bf = [](double x) { return double(f32_of_bf16(detail::amx_bf16_rne(float(x)))); };
  double worst = 0;
  vs_exact = 0;
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t h = 0; h < qh; ++h) {
      const std::int64_t kv = h / G, kend = std::min<std::int64_t>(Sv, pos[i] + 1);
      const std::int64_t kbeg = window > 0 ? std::max<std::int64_t>(0, pos[i] - window + 1) : 0;
      if (i >= Lv) { // padding row: untouched
        CHECK(std::isnan(out[(i * qh + h) * d]));
        continue;
      }
      std::vector<double> sr(static_cast<std::size_t>(kend)), se(sr.size());
      double mr = -1e300, me = -1e300, vmax = 0;
      for (std::int64_t j = kbeg; j < kend; ++j) {
        double a = 0, e = 0;
        for (std::int64_t x = 0; x < d; ++x) {
          const double qv = q[(i * qh + h) * d + x];
          const double kv_ = detail::to_f32(k[(j * kh + kv) * d + x]);
          a += bf(qv * qs) * bf(kv_);
          e += qv * scale * kv_;
          vmax = std::max(vmax, std::abs(double(detail::to_f32(v[(j * kh + kv) * d + x]))));
        }
        sr[j] = a; // log2 domain
        se[j] = e;
        mr = std::max(mr, a);
        me = std::max(me, e);
      }
      double dr = 0, de = 0;
      for (std::int64_t j = kbeg; j < kend; ++j) {
        dr += (sr[j] = std::exp2(sr[j] - mr));
        de += (se[j] = std::exp(se[j] - me));
      }
      for (std::int64_t x = 0; x < d; ++x) {
        double orr = 0, oe = 0;
        for (std::int64_t j = kbeg; j < kend; ++j) {
          const double vv = detail::to_f32(v[(j * kh + kv) * d + x]);
          orr += sr[j] * bf(vv);
          oe += se[j] * vv;
        }
        const double got = out[(i * qh + h) * d + x];
        const double err = std::abs(got - orr / dr);
        worst = std::max(worst,
                         std::isfinite(err) ? err / ((std::ldexp(1.0, -8) + 1e-4) * vmax) : 1e30);
        vs_exact = std::max(vs_exact, std::abs(got - oe / de) / vmax);
      }
    }
  return worst;
}

} // namespace

TEST_CASE("AMX prefill attention on the emulator meets the bound", "[amx][attention]") {
  struct C {
    std::int64_t L, S, pos0, qh, kh, d;
    CoreSplit split;
  };
  const C cases[] = {{40, 40, 0, 4, 2, 64, {SplitDim::rows, 2}},      // GQA 2, tails of 32
                     {33, 100, 60, 7, 1, 80, {}},                     // history, d % 32 != 0
                     {70, 70, 0, 2, 2, 128, {SplitDim::heads, 2}},    // MHA, several q tiles
                     {20, 300, 270, 14, 2, 64, {SplitDim::rows, 2}}}; // GQA 7, long history
  for (const C& c : cases) {
    double exact = 0;
    const double worst =
        run_amx_attention<float>(c.L, c.S, c.pos0, c.qh, c.kh, c.d, c.split, false, exact);
    INFO("L=" << c.L << " S=" << c.S << " d=" << c.d << " worst err/bound=" << worst
              << " max err vs f32 reference / max|v| = " << exact);
    CHECK(worst <= 1.0);
    CHECK(worst > 0.0);
  }
  double exact = 0;
  CHECK(run_amx_attention<bf16_t>(36, 50, 14, 4, 1, 64, {}, false, exact) <= 1.0);
  CHECK(run_amx_attention<f16_t>(36, 36, 0, 2, 2, 32, {SplitDim::rows, 2}, false, exact) <= 1.0);
}

TEST_CASE("AMX prefill attention on the hardware meets the bound", "[amx][amx-hw][attention]") {
  if (!cpu_features().amx) {
    WARN("skipped: CPU lacks AMX (or the OS did not grant tile data): no real-hardware check "
         "ran");
    return;
  }
  // the tile unit takes a bf16 cache only (staged in AVX-512: flash_attention_amx_hw.hpp)
  struct C {
    std::int64_t L, S, pos0, qh, kh, d;
    CoreSplit split;
  };
  const C cases[] = {{40, 40, 0, 4, 2, 64, {SplitDim::rows, 2}},      // GQA 2, tails of 32
                     {33, 100, 60, 7, 1, 80, {}},                     // history, d % 32 != 0
                     {70, 70, 0, 4, 2, 128, {SplitDim::rows, 2}},     // several q tiles
                     {70, 70, 0, 2, 2, 128, {SplitDim::heads, 2}},    // MHA
                     {20, 300, 270, 14, 2, 64, {SplitDim::rows, 2}},  // GQA 7, long history
                     {300, 333, 33, 14, 2, 64, {SplitDim::rows, 2}}}; // items of 8 q tiles
  double exact = 0;
  for (const C& c : cases) {
    const double worst =
        run_amx_attention<bf16_t>(c.L, c.S, c.pos0, c.qh, c.kh, c.d, c.split, true, exact);
    INFO("L=" << c.L << " S=" << c.S << " d=" << c.d << " worst err/bound=" << worst);
    CHECK(worst <= 1.0);
    CHECK(worst > 0.0);
  }
  // head dims up to 64 keep O in tiles (flash_attention_amx_resident.hpp): d 32 and 48 (padded
  // to 64), several key chunks of 128, rising scores (the reference max moves mid-row and O
  // leaves the tiles to be rescaled), a sliding window, and items of several q tiles
  struct R {
    std::int64_t L, S, pos0, qh, kh, d;
    float growth;
    std::int64_t window;
  };
  const R resident[] = {{50, 50, 0, 4, 2, 32, 0.f, 0},
                        {90, 400, 310, 4, 1, 48, 0.f, 0},
                        {64, 600, 536, 7, 1, 64, 6.f, 0},
                        {200, 200, 0, 2, 2, 64, 6.f, 0},
                        {120, 700, 580, 4, 2, 64, 0.f, 100}};
  for (const R& c : resident) {
    const double worst = run_amx_attention<bf16_t>(
        c.L, c.S, c.pos0, c.qh, c.kh, c.d, {SplitDim::rows, 2}, true, exact, c.growth, c.window);
    INFO("resident: L=" << c.L << " S=" << c.S << " d=" << c.d << " growth=" << c.growth
                        << " window=" << c.window << " worst err/bound=" << worst);
    CHECK(worst <= 1.0);
    CHECK(worst > 0.0);
  }
  // kv heads across the cores, and one core alone, on the resident path
  CHECK(run_amx_attention<bf16_t>(80, 300, 220, 8, 4, 64, {SplitDim::heads, 2}, true, exact, 3.f) <=
        1.0);
  CHECK(run_amx_attention<bf16_t>(80, 300, 220, 6, 3, 64, {}, true, exact, 3.f) <= 1.0);
  // an f16 cache with d <= 64 takes the resident item with every operand split into two exact
  // bf16 terms: the bf16 rounding of q, k and p (0.2-0.4% of max|v|) must not show
  for (const R& c : resident) {
    run_amx_attention<f16_t>(c.L, c.S, c.pos0, c.qh, c.kh, c.d, {SplitDim::rows, 2}, true, exact,
                             c.growth, c.window);
    INFO("f16 resident: L=" << c.L << " S=" << c.S << " d=" << c.d << " growth=" << c.growth
                            << " window=" << c.window
                            << " max err vs f32 reference / max|v| = " << exact);
    CHECK(exact <= 2e-5);
  }
  // an f32 cache, and an f16 one past d 64, keep the exact vector path on an AMX CPU: the bf16
  // rounding of q, k and p (0.2-0.4% of max|v| on these shapes) must not show
  for (bool f16 : {false, true}) {
    exact = 1;
    if (f16)
      run_amx_attention<f16_t>(70, 70, 0, 4, 2, 128, {SplitDim::rows, 2}, true, exact);
    else
      run_amx_attention<float>(70, 70, 0, 4, 2, 128, {SplitDim::rows, 2}, true, exact);
    INFO((f16 ? "f16" : "f32") << " cache: max err vs f32 reference / max|v| = " << exact);
    CHECK(exact <= 2e-5);
  }
}
