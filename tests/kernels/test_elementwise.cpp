// Elementwise kernels against double references. exp is a polynomial: softmax and silu are
// checked to |err| <= 1e-6 * max(1, |ref|); add/mul must be exact.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tpullm/kernels/elementwise.hpp"

#include "kernel_test_util.hpp"

namespace {

using namespace tpullm::kernels;
using namespace tpullm_test;

} // namespace

TEST_CASE("softmax_rows matches double reference", "[kernels][elementwise]") {
  for (RowsShape s : {RowsShape{1, 1}, RowsShape{3, 17}, RowsShape{4, 151}, RowsShape{2, 1000}}) {
    const auto x =
        normal_vec(static_cast<std::size_t>(s.size()), 5.f, static_cast<unsigned>(s.cols));
    std::vector<double> ref(x.size());
    for (std::int64_t m = 0; m < s.rows; ++m) {
      double mx = -1e300, sum = 0;
      for (std::int64_t j = 0; j < s.cols; ++j)
        mx = std::max(mx, static_cast<double>(x[static_cast<std::size_t>(m * s.cols + j)]));
      for (std::int64_t j = 0; j < s.cols; ++j)
        sum += std::exp(x[static_cast<std::size_t>(m * s.cols + j)] - mx);
      for (std::int64_t j = 0; j < s.cols; ++j)
        ref[static_cast<std::size_t>(m * s.cols + j)] =
            std::exp(x[static_cast<std::size_t>(m * s.cols + j)] - mx) / sum;
    }
    for (Isa isa : isas_to_test()) {
      ScopedIsa guard(isa);
      std::vector<float> y = nan_vec(x.size()), z = x;
      softmax_rows(x, y, s, {SplitDim::rows, 2});
      softmax_rows(std::span<float>(z), s);
      double worst = 0;
      for (std::size_t e = 0; e < x.size(); ++e)
        worst = std::max(worst, std::isnan(y[e]) ? 1e9 : rel_err(y[e], ref[e]));
      INFO("shape " << s.rows << "x" << s.cols << " isa=" << isa_name(isa) << " worst=" << worst);
      CHECK(worst <= 1e-6);
      CHECK(z == y);
    }
  }
  std::vector<float> ninf{-INFINITY, 0.f, -INFINITY};
  softmax_rows(std::span<float>(ninf), {1, 3});
  CHECK(ninf[0] == 0.f);
  CHECK(ninf[1] == 1.f);
}

TEST_CASE("silu and silu_mul", "[kernels][elementwise]") {
  for (std::size_t n : {1u, 15u, 16u, 100u, 4864u}) {
    const auto x = normal_vec(n, 6.f, static_cast<unsigned>(n));
    const auto u = normal_vec(n, 1.f, static_cast<unsigned>(n + 1));
    for (Isa isa : isas_to_test()) {
      ScopedIsa guard(isa);
      std::vector<float> y(n), g(n), inplace = x;
      silu(x, y, {SplitDim::rows, 2});
      silu_mul(x, u, g);
      silu(inplace, inplace);
      double worst = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double s = x[i] / (1.0 + std::exp(-static_cast<double>(x[i])));
        worst = std::max({worst, rel_err(y[i], s), rel_err(g[i], s * u[i])});
      }
      INFO("n=" << n << " isa=" << isa_name(isa) << " worst=" << worst);
      CHECK(worst <= 1e-6);
      CHECK(inplace == y);
    }
  }
  std::vector<float> a(4), b(3);
  CHECK_THROWS_KIND(silu(a, b), internal);
  CHECK_THROWS_KIND(silu_mul(a, b, a), internal);
}

TEST_CASE("add and mul with broadcasting", "[kernels][elementwise]") {
  const RowsShape s{5, 37};
  const auto a = normal_vec(static_cast<std::size_t>(s.size()), 1.f, 1);
  const auto b = normal_vec(static_cast<std::size_t>(s.size()), 1.f, 2);
  const auto vec = normal_vec(37, 1.f, 3);
  for (Isa isa : isas_to_test()) {
    ScopedIsa guard(isa);
    std::vector<float> y(a.size()), yb(a.size()), m(a.size()), mb(a.size()), inpl = a;
    add(a, b, y, s, {SplitDim::rows, 2});
    add(a, vec, yb, s);
    mul(a, b, m, s);
    mul(a, vec, mb, s);
    mul(inpl, vec, inpl, s);
    std::size_t bad = 0;
    for (std::int64_t r = 0; r < s.rows; ++r)
      for (std::int64_t c = 0; c < s.cols; ++c) {
        const auto e = static_cast<std::size_t>(r * s.cols + c);
        const auto ci = static_cast<std::size_t>(c);
        bad += y[e] != a[e] + b[e];
        bad += yb[e] != a[e] + vec[ci];
        bad += m[e] != a[e] * b[e];
        bad += mb[e] != a[e] * vec[ci];
        bad += inpl[e] != mb[e];
      }
    INFO("isa=" << isa_name(isa));
    CHECK(bad == 0);
  }
  std::vector<float> y(a.size()), wrong(36);
  CHECK_THROWS_KIND(add(a, wrong, y, s), internal);
  CHECK_THROWS_KIND(mul(std::span<const float>(a).first(10), b, y, s), internal);
}
