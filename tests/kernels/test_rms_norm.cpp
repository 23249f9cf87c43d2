// RMSNorm (and the fused residual add) against a double reference.
// Error bound: |y - ref| <= 1e-5 * max(1, |ref|) for f32 math (gamma widened exactly from
// bf16/f16, so the bound is the same for every gamma dtype); h = x + r must be exact.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tpullm/kernels/rms_norm.hpp"

#include "kernel_test_util.hpp"

namespace {

using namespace tpullm;
using namespace tpullm::kernels;
using namespace tpullm_test;

struct RmsCase {
  std::int64_t M, H;
  bool fused;
  CoreSplit split;
};

template <class G>
void run(const RmsCase& c) {
  const float nan = kNaN;
  std::mt19937 rng(static_cast<unsigned>(c.M * 1000 + c.H));
  std::normal_distribution<float> nd(0.f, 3.f);
  const auto n = static_cast<std::size_t>(c.M * c.H);
  std::vector<float> x(n), r(n);
  std::vector<G> g(static_cast<std::size_t>(c.H));
  for (auto& e : x)
    e = nd(rng);
  for (auto& e : r)
    e = nd(rng);
  for (auto& e : g)
    e = from_f32<G>(1.0f + 0.3f * nd(rng));
  const float eps = 1e-6f;
  std::vector<double> ref(n);
  for (std::int64_t m = 0; m < c.M; ++m) {
    double ss = 0;
    for (std::int64_t i = 0; i < c.H; ++i) {
      const auto e = static_cast<std::size_t>(m * c.H + i);
      const double h = c.fused ? static_cast<double>(x[e] + r[e]) : x[e];
      ss += h * h;
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c.H) + eps);
    for (std::int64_t i = 0; i < c.H; ++i) {
      const auto e = static_cast<std::size_t>(m * c.H + i);
      const double h = c.fused ? static_cast<double>(x[e] + r[e]) : x[e];
      ref[e] = h * inv * detail::to_f32(g[static_cast<std::size_t>(i)]);
    }
  }
  for (Isa isa : isas_to_test()) {
    ScopedIsa guard(isa);
    std::vector<float> y(n, nan), h(n, nan);
    RmsNormShape s{c.M, c.H};
    if (c.fused)
      add_rms_norm<G>(x, r, h, g, y, s, eps, c.split);
    else
      rms_norm<G>(x, g, y, s, eps, c.split);
    double worst = 0;
    std::size_t bad_h = 0;
    for (std::size_t e = 0; e < n; ++e) {
      worst = std::max(worst, rel_err(y[e], ref[e]));
      if (c.fused)
        bad_h += h[e] != x[e] + r[e];
      if (std::isnan(y[e]))
        worst = 1e9;
    }
    INFO("M=" << c.M << " H=" << c.H << " fused=" << c.fused << " gamma=" << storage_name<G>()
              << " isa=" << isa_name(isa) << " worst=" << worst);
    CHECK(worst <= 1e-5);
    CHECK(bad_h == 0);
  }
}

} // namespace

TEST_CASE("rms_norm matches double reference", "[kernels][rms_norm]") {
  const CoreSplit rows2{SplitDim::rows, 2};
  for (RmsCase c : {RmsCase{1, 896, false, {}}, RmsCase{5, 4096, false, rows2},
                    RmsCase{7, 64, false, {}}, RmsCase{3, 13, false, {}}, RmsCase{1, 896, true, {}},
                    RmsCase{9, 80, true, rows2}, RmsCase{2, 1, true, {}}}) {
    run<float>(c);
    run<bf16_t>(c);
    run<f16_t>(c);
  }
}

TEST_CASE("rms_norm in place and errors", "[kernels][rms_norm]") {
  std::vector<float> x{3.f, 4.f}, g{1.f, 2.f};
  rms_norm<float>(x, g, x, {1, 2}, 0.f);
  const double inv = 1.0 / std::sqrt(12.5);
  CHECK(x[0] == Approx(3 * inv).epsilon(1e-6));
  CHECK(x[1] == Approx(8 * inv).epsilon(1e-6));
  // fused, h aliasing x (the residual stream updated in place)
  std::vector<float> a{1.f, 2.f}, r{2.f, 2.f}, y(2);
  add_rms_norm<float>(a, r, a, g, y, {1, 2}, 0.f);
  CHECK(a[0] == 3.f);
  CHECK(a[1] == 4.f);
  CHECK(y[1] == Approx(8 * inv).epsilon(1e-6));
  std::vector<float> small(3);
  CHECK_THROWS_KIND(rms_norm<float>(small, g, small, {2, 2}, 0.f), internal);
  CHECK_THROWS_KIND(rms_norm<float>(x, std::span<const float>(g).first(1), x, {1, 2}, 0.f),
                    internal);
  CHECK_THROWS_KIND(add_rms_norm<float>(a, r, y, g, y, {1, 2}, 0.f), internal);
}
