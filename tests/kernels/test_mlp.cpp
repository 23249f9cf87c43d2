// Fused SwiGLU MLP against a double reference, for every weight format, several local-memory
// budgets (no tiling, intermediate tiling, row tiling) and every ISA path.
//
// Error bound: with g, u the exact gate/up products, h = silu(g) * u, and S_g[i], S_u[i] the
// matmul normalizers of test_matmul.cpp (sum_k |x[k]| * A[k][i]):
//   |out - ref| <= tol * sum_i ( A_down[i][n] * |h[i]| + |W_down[i][n]| * e[i] ),
//   e[i] = 1.1 * |u[i]| * S_g[i] + |silu(g[i])| * S_u[i],      tol = 2 * matmul_tol(max(H, I))
// (1.1 bounds |silu'|; exp_poly's 2e-7 relative error is far below tol).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tpullm/kernels/mlp.hpp"

#include "kernel_test_util.hpp"

using namespace tpullm;
using namespace tpullm::kernels;

using namespace tpullm_test;

namespace {

struct MlpCase {
  std::int64_t M, H, I, group;
  WeightFormat format;
  std::size_t budget; // bytes of local memory
  bool act_order_gate_up;
};

double silu(double v) {
  return v / (1.0 + std::exp(-v));
}

} // namespace

TEST_CASE("swiglu_mlp matches a double reference for every format, tiling and ISA", "[mlp]") {
  const bool saved_bf16_dot_disabled = detail::bf16_dot_disabled(); // restored at the end
  const WeightFormat fs[] = {
      WeightFormat::f32,       WeightFormat::bf16,     WeightFormat::f16,
      WeightFormat::int8,      WeightFormat::int4_sym, WeightFormat::int4_asym,
      WeightFormat::int8_asym, WeightFormat::int4_min, WeightFormat::int8_min,
      WeightFormat::int6_sym,  WeightFormat::int6_min};
  std::vector<MlpCase> cases;
  for (WeightFormat f : fs) {
    // the intermediate must be a multiple of down's row group (swiglu_mlp): 72 -> 80 and
    // 200 -> 208 for int6's 16-row blocks
    const auto fit = [f](std::int64_t I) {
      return (I + row_group(f) - 1) / row_group(f) * row_group(f);
    };
    cases.push_back({1, 64, 96, 32, f, 1 << 20, false});            // one tile
    cases.push_back({3, 33, fit(72), 0, f, 3 * 8 * 32, false});     // 32-column tiles, odd shapes
    cases.push_back({17, 64, 160, 32, f, 17 * 8 * 64, false});      // two-panel tiles
    cases.push_back({40, 96, fit(200), 40, f, 8 * 160 * 7, false}); // row tiles (7 x 160)
    cases.push_back({2, 96, fit(200), 40, f, 2 * 8 * 160, false});  // GEMV over several tiles
    cases.push_back({128, 64, 96, 32, f, 1 << 20, false});
  }
  cases.push_back({5, 64, 96, 32, WeightFormat::int4_asym, 5 * 8 * 32, true});
  cases.push_back({1, 64, 96, 32, WeightFormat::int4_sym, 1 << 20, true});
  cases.push_back({5, 64, 96, 16, WeightFormat::int4_min, 5 * 8 * 32, true});
  cases.push_back({2, 64, 96, 16, WeightFormat::int8_min, 1 << 20, true});
  cases.push_back({3, 64, 96, 16, WeightFormat::int6_sym, 3 * 8 * 32, true});
  cases.push_back({2, 64, 96, 32, WeightFormat::int6_min, 2 * 8 * 32, true});
  int runs = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const MlpCase& c = cases[ci];
    const std::uint32_t seed = 500 + static_cast<std::uint32_t>(ci) * 3;
    // quantized formats need group | K: pick group = K when the case's group does not divide
    const std::int64_t rg = row_group(c.format);
    auto grp = [&](std::int64_t K) {
      return c.group > 0 && K % c.group == 0 && c.group % rg == 0 ? c.group : K;
    };
    const auto g = make_weights(c.format, c.H, c.I, grp(c.H), seed, c.act_order_gate_up);
    const auto u = make_weights(c.format, c.H, c.I, grp(c.H), seed + 1, c.act_order_gate_up);
    const auto d = make_weights(c.format, c.I, c.H, grp(c.I), seed + 2, false);
    const auto x = random_vec(static_cast<std::size_t>(c.M * c.H), seed, -1.0f, 1.0f);
    const double tol = 2 * matmul_tol(std::max(c.H, c.I));
    std::vector<double> ref(static_cast<std::size_t>(c.M * c.H)), bound(ref.size());
    std::vector<double> h(static_cast<std::size_t>(c.I)), e(h.size());
    for (std::int64_t m = 0; m < c.M; ++m) {
      for (std::int64_t i = 0; i < c.I; ++i) {
        double gs = 0, us = 0, sg = 0, su = 0;
        for (std::int64_t k = 0; k < c.H; ++k) {
          const double xv = x[m * c.H + k];
          gs += xv * g.deq[k * c.I + i];
          us += xv * u.deq[k * c.I + i];
          sg += std::abs(xv) * g.absw[k * c.I + i];
          su += std::abs(xv) * u.absw[k * c.I + i];
        }
        h[i] = silu(gs) * us;
        e[i] = 1.1 * std::abs(us) * sg + std::abs(silu(gs)) * su;
      }
      for (std::int64_t n = 0; n < c.H; ++n) {
        double s = 0, b = 0;
        for (std::int64_t i = 0; i < c.I; ++i) {
          s += h[i] * d.deq[i * c.H + n];
          b += d.absw[i * c.H + n] * std::abs(h[i]) + std::abs(d.deq[i * c.H + n]) * e[i];
        }
        ref[m * c.H + n] = s;
        bound[m * c.H + n] = tol * b + 1e-30;
      }
    }
    // on the amx path: the gate / up AMX bounds propagated through silu * u plus the down
    // projection's own AMX bound (test_amx.cpp), 20% margin for second-order terms
    std::vector<double> amx_bound;
    if (detail::amx_format(c.format)) {
      const std::vector<double> xd(x.begin(), x.end());
      const auto bg = amx_linear_bound(g, xd, c.M, c.H, c.I);
      const auto bu = amx_linear_bound(u, xd, c.M, c.H, c.I);
      std::vector<double> hv(static_cast<std::size_t>(c.M * c.I)), dh(hv.size()), ha(hv.size());
      for (std::int64_t m = 0; m < c.M; ++m)
        for (std::int64_t i = 0; i < c.I; ++i) {
          double gs = 0, us = 0;
          for (std::int64_t k = 0; k < c.H; ++k) {
            gs += xd[m * c.H + k] * g.deq[k * c.I + i];
            us += xd[m * c.H + k] * u.deq[k * c.I + i];
          }
          const std::size_t e = static_cast<std::size_t>(m * c.I + i);
          hv[e] = silu(gs) * us;
          dh[e] = 1.1 * std::abs(us) * bg[e] + std::abs(silu(gs)) * bu[e];
          ha[e] = (std::abs(hv[e]) + dh[e]) * 1.01;
        }
      const auto bd = amx_linear_bound(d, ha, c.M, c.I, c.H);
      amx_bound.resize(ref.size());
      for (std::int64_t m = 0; m < c.M; ++m)
        for (std::int64_t n = 0; n < c.H; ++n) {
          double prop = 0;
          for (std::int64_t i = 0; i < c.I; ++i)
            prop += std::abs(d.deq[i * c.H + n]) * dh[static_cast<std::size_t>(m * c.I + i)];
          const std::size_t e = static_cast<std::size_t>(m * c.H + n);
          amx_bound[e] = std::max(bound[e], 1.2 * (prop + bd[e]));
        }
    }
    const MlpShape shape{c.M, c.H, c.I};
    const MlpTiling t = plan_mlp_tiling(shape, g.packed, u.packed, d.packed, c.budget);
    REQUIRE(t.buffer_bytes <= static_cast<std::int64_t>(c.budget));
    struct Path {
      Isa isa;
      bool amx_emulated, bf16_dot = false; // AMX on the tile emulator; bf16 on VDPBF16PS
    };
    std::vector<Path> paths;
    for (Isa isa : test_isas())
      paths.push_back({isa, false});
    if (!amx_bound.empty() && c.M >= detail::kAmxMinRows && c.M * c.H * c.I <= 1'000'000)
      paths.push_back({Isa::portable, true});
    // bf16 rows tiles of >= 16 rows on VDPBF16PS (x rounded to bf16: the AMX bound); the plain
    // avx512 entry runs the f32-FMA GEMM with it disabled
    if (c.format == WeightFormat::bf16 && cpu_features().avx512_bf16 &&
        t.row_tile >= detail::kBf16DotMinRows)
      paths.push_back({Isa::avx512, false, true});
    for (auto [isa, amx_emulated, bf16_dot] : paths) {
      ScopedIsa scoped(isa);
      std::optional<amx::ScopedEmulation> emu;
      if (amx_emulated)
        emu.emplace();
      detail::bf16_dot_disabled() = !bf16_dot;
      for (CoreSplit split : {CoreSplit{SplitDim::none, 1}, CoreSplit{SplitDim::cols, 2},
                              CoreSplit{SplitDim::rows, 2}}) {
        std::vector<float> out = nan_vec(ref.size());
        swiglu_mlp(x, g.packed, u.packed, d.packed, out, shape, c.budget, split);
        ++runs;
        const auto& bnd =
            (isa == Isa::amx || amx_emulated || bf16_dot) && !amx_bound.empty() ? amx_bound : bound;
        std::int64_t bad = 0;
        for (std::size_t i = 0; i < out.size(); ++i)
          if (!(std::abs(double(out[i]) - ref[i]) <= bnd[i]))
            ++bad;
        INFO("M=" << c.M << " H=" << c.H << " I=" << c.I << " " << format_name(c.format)
                  << " budget=" << c.budget << " tiles rows=" << t.row_tile << " inter="
                  << t.inter_tile << " isa=" << isa_name(isa) << (amx_emulated ? " amx-emu" : "")
                  << (bf16_dot ? " vdpbf16ps" : "") << " split=" << int(split.dim));
        REQUIRE(bad == 0);
      }
    }
    detail::bf16_dot_disabled() = saved_bf16_dot_disabled;
  }
  CHECK(runs >= static_cast<int>(cases.size() * test_isas().size() * 3));
}

TEST_CASE("swiglu_mlp reuses its per-thread gate and up buffers and never reads them stale",
          "[mlp]") {
  // The buffers outlive the call (no mapping and page faults per prefill layer): the same
  // storage serves the next call, and what an earlier call (or anything) left in it must not
  // reach the result. Filled with NaN between calls, the output must not change by one bit.
  const std::int64_t H = 64, I = 160;
  const auto g = make_weights(WeightFormat::int4_sym, H, I, 32, 901, false);
  const auto u = make_weights(WeightFormat::int4_sym, H, I, 32, 902, false);
  const auto d = make_weights(WeightFormat::int4_sym, I, H, 32, 903, false);
  const std::size_t budget = 1 << 20;
  auto run = [&](std::int64_t M, CoreSplit split) {
    const auto x = random_vec(static_cast<std::size_t>(M * H), 904, -1.0f, 1.0f);
    std::vector<float> out = nan_vec(static_cast<std::size_t>(M * H));
    swiglu_mlp(x, g.packed, u.packed, d.packed, out, {M, H, I}, budget, split, XPrecision::int8);
    return out;
  };
  for (Isa isa : test_isas()) {
    ScopedIsa scoped(isa);
    for (CoreSplit split : {CoreSplit{SplitDim::none, 1}, CoreSplit{SplitDim::rows, 2}}) {
      INFO("isa=" << isa_name(isa) << " split=" << int(split.dim));
      const std::vector<float> first = run(16, split);
      detail::ScratchPair& sc = detail::mlp_scratch();
      const MlpTiling t = plan_mlp_tiling({16, H, I}, g.packed, u.packed, d.packed, budget);
      REQUIRE(sc.first.size() >= static_cast<std::size_t>(t.row_tile * t.inter_tile));
      REQUIRE(sc.second.size() >= static_cast<std::size_t>(t.row_tile * t.inter_tile));
      const float* kept = sc.first.data();
      for (std::int64_t M : {2, 16}) {
        std::fill_n(sc.first.data(), sc.first.size(), std::numeric_limits<float>::quiet_NaN());
        std::fill_n(sc.second.data(), sc.second.size(), std::numeric_limits<float>::quiet_NaN());
        const std::vector<float> again = run(M, split);
        CHECK(sc.first.data() == kept); // no larger shape came: the same storage
        if (M == 16) {
          REQUIRE(again.size() == first.size());
          CHECK(std::memcmp(again.data(), first.data(), first.size() * sizeof(float)) == 0);
        } else {
          for (float v : again)
            REQUIRE(std::isfinite(v));
        }
      }
    }
  }
}

TEST_CASE("plan_mlp_tiling respects the budget and rejects impossible ones", "[mlp]") {
  const auto g = make_weights(WeightFormat::int4_sym, 64, 256, 32, 1, false);
  const auto u = make_weights(WeightFormat::int4_sym, 64, 256, 32, 2, false);
  const auto d = make_weights(WeightFormat::int4_sym, 256, 64, 64, 3, false);
  const MlpShape s{10, 64, 256};
  const auto full = plan_mlp_tiling(s, g.packed, u.packed, d.packed, 1 << 20);
  CHECK(full.row_tile == 10);
  CHECK(full.inter_tile == 256);
  const auto tiled = plan_mlp_tiling(s, g.packed, u.packed, d.packed, 10 * 8 * 130);
  CHECK(tiled.row_tile == 10);
  CHECK(tiled.inter_tile == 128); // largest multiple of lcm(32, down group 64) that fits
  CHECK(tiled.buffer_bytes <= 10 * 8 * 130);
  const auto rows = plan_mlp_tiling(s, g.packed, u.packed, d.packed, 8 * 64 * 3);
  CHECK(rows.row_tile == 3);
  CHECK(rows.inter_tile == 64);
  CHECK_THROWS_KIND(plan_mlp_tiling(s, g.packed, u.packed, d.packed, 8 * 63), internal);
  CHECK_THROWS_KIND(plan_mlp_tiling({10, 64, 255}, g.packed, u.packed, d.packed, 1 << 20),
                    internal);
  const auto g7 = make_weights(WeightFormat::f32, 64, 252, 64, 3, false);
  const auto d8 = make_weights(WeightFormat::int8, 252, 64, 252, 3, false); // 252 % 4 == 0
  CHECK_NOTHROW(plan_mlp_tiling({10, 64, 252}, g7.packed, g7.packed, d8.packed, 1 << 20));
  const auto d4 = make_weights(WeightFormat::int4_sym, 252, 64, 252, 3, false); // 252 % 8 != 0
  CHECK_THROWS_KIND(plan_mlp_tiling({10, 64, 252}, g7.packed, g7.packed, d4.packed, 1 << 20),
                    internal);
  const auto dp = make_weights(WeightFormat::int4_sym, 256, 64, 64, 3, true);
  CHECK_THROWS_KIND(plan_mlp_tiling(s, g.packed, u.packed, dp.packed, 1 << 20), internal);
}

TEST_CASE("permute_columns moves every column's weights, scales and zeros", "[mlp][packed]") {
  for (WeightFormat f : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::f16,
                         WeightFormat::int8, WeightFormat::int4_sym, WeightFormat::int4_asym,
                         WeightFormat::int8_asym, WeightFormat::int4_min, WeightFormat::int8_min,
                         WeightFormat::int6_sym, WeightFormat::int6_min}) {
    const bool int4 = f == WeightFormat::int4_sym || f == WeightFormat::int4_asym ||
                      f == WeightFormat::int8_asym || has_mins(f) || is_six_format(f);
    const auto w = make_weights(f, 64, 72, 32, 17, int4); // int4: act-order rows as well
    std::vector<std::int32_t> cols(72);
    for (std::int32_t n = 0; n < 72; ++n)
      cols[static_cast<std::size_t>(n)] = (n * 29 + 5) % 72; // 29 is coprime with 72
    const PackedWeights p = permute_columns(w.packed, cols);
    CHECK(p.k_perm == w.packed.k_perm);
    const auto a = dequantize(w.packed), b = dequantize(p);
    std::int64_t bad = 0;
    for (std::int64_t k = 0; k < 64; ++k)
      for (std::int64_t n = 0; n < 72; ++n)
        bad += b[k * 72 + n] != a[k * 72 + cols[static_cast<std::size_t>(n)]];
    INFO(format_name(f));
    CHECK(bad == 0);
  }
  const auto w = make_weights(WeightFormat::f32, 8, 40, 8, 1, false);
  std::vector<std::int32_t> dup(40, 0);
  CHECK_THROWS_KIND(permute_columns(w.packed, dup), invalid_input);
}

TEST_CASE("an act-order down projection folded into gate / up columns gives the same MLP",
          "[mlp]") {
  const std::int64_t M = 5, H = 64, I = 256;
  for (WeightFormat f : {WeightFormat::f32, WeightFormat::int8, WeightFormat::int4_asym}) {
    const auto g = make_weights(f, H, I, 32, 51, false);
    const auto u = make_weights(f, H, I, 32, 52, false);
    const auto d = make_weights(WeightFormat::int4_asym, I, H, 32, 53, true);
    REQUIRE_FALSE(d.packed.k_perm.empty());
    // The fold the compiler does: gate / up column j = column k_perm[j]; down in natural order.
    const PackedWeights g2 = permute_columns(g.packed, d.packed.k_perm);
    const PackedWeights u2 = permute_columns(u.packed, d.packed.k_perm);
    PackedWeights d2 = permute_columns(d.packed, [&] {
      std::vector<std::int32_t> id(static_cast<std::size_t>(H));
      for (std::int64_t n = 0; n < H; ++n)
        id[static_cast<std::size_t>(n)] = static_cast<std::int32_t>(n);
      return id;
    }());
    d2.k_perm.clear();
    const auto x = random_vec(static_cast<std::size_t>(M * H), 54);
    std::vector<double> ref(static_cast<std::size_t>(M * H), 0.0);
    double scale = 0;
    for (std::int64_t m = 0; m < M; ++m) {
      std::vector<double> h(static_cast<std::size_t>(I));
      for (std::int64_t i = 0; i < I; ++i) {
        double gs = 0, us = 0;
        for (std::int64_t k = 0; k < H; ++k) {
          gs += double(x[m * H + k]) * g.deq[k * I + i];
          us += double(x[m * H + k]) * u.deq[k * I + i];
        }
        h[static_cast<std::size_t>(i)] = silu(gs) * us;
      }
      for (std::int64_t n = 0; n < H; ++n) {
        double s = 0;
        for (std::int64_t i = 0; i < I; ++i)
          s += h[static_cast<std::size_t>(i)] * d.deq[i * H + n];
        ref[static_cast<std::size_t>(m * H + n)] = s;
        scale = std::max(scale, std::abs(s));
      }
    }
    for (Isa isa : test_isas()) {
      ScopedIsa scoped(isa);
      std::vector<float> out = nan_vec(ref.size());
      swiglu_mlp(x, g2, u2, d2, out, {M, H, I}, 1 << 20, {SplitDim::none, 1});
      double worst = 0;
      for (std::size_t e = 0; e < out.size(); ++e)
        worst = std::max(worst, std::abs(double(out[e]) - ref[e]));
      INFO(format_name(f) << " isa=" << isa_name(isa));
      CHECK(worst <= 1e-4 * scale);
    }
  }
}
