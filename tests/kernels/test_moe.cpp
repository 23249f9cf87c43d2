// Routed MoE MLP (kernels/moe.hpp) against a naive double reference: the router product,
// softmax, top-k and renormalisation in f64 from the same (dequantized) weights, then the chosen
// experts' SwiGLU MLPs summed with their weights. Covers decode (one row), prefill with many
// rows per expert, every row routed to one expert (the worst case the scratch is sized for),
// top_k = experts, a local-memory budget that tiles each expert's MLP, several weight formats,
// core splits and ISA paths.
//
// Bound: every product is an f32-accumulated linear over at most max(H, I) terms of weights the
// reference uses exactly, so |out - ref| <= 1e-5 * max|ref| (about 30x the f32 rounding seen);
// on the AMX path bf16 activations are rounded to bf16 (2^-8), so 2e-2 * max|ref| there.
// Rows whose k-th and (k+1)-th reference logits are within 1e-4 (a choice f32 rounding may
// legitimately flip) are left out of the routing comparison; at most a tenth may be.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "tpullm/kernels/moe.hpp"

#include "kernel_test_util.hpp"

using namespace tpullm;
using namespace tpullm::kernels;
using namespace tpullm_test;

namespace {

struct MoeCase {
  std::int64_t M, H, I, E, k;
  bool renormalize;
  WeightFormat format;
  std::size_t budget; ///< each expert MLP's local-memory budget
  bool one_expert;    ///< a router that sends every row to expert 3 first
};

double silu(double v) {
  return v / (1.0 + std::exp(-v));
}

/// A router [H, E] f32 whose column 3 is +2 everywhere (x > 0 then picks expert 3 first), the
/// others uniform in [-0.1, 0.1).
std::vector<float> one_expert_router(std::int64_t H, std::int64_t E, std::uint32_t seed) {
  auto w = random_vec(static_cast<std::size_t>(H * E), seed, -0.1f, 0.1f);
  for (std::int64_t h = 0; h < H; ++h)
    w[static_cast<std::size_t>(h * E + 3)] = 2.0f;
  return w;
}

struct Reference {
  std::vector<double> out;               ///< [M, H]
  std::vector<std::vector<int>> experts; ///< per row, its choices in rank order
  std::vector<bool> clear;               ///< the row's k-th choice is not near a tie
};

Reference reference(const MoeCase& c, const std::vector<float>& x, const std::vector<float>& R,
                    const std::vector<TestWeights>& g, const std::vector<TestWeights>& u,
                    const std::vector<TestWeights>& d) {
  Reference r;
  r.out.assign(static_cast<std::size_t>(c.M * c.H), 0.0);
  for (std::int64_t t = 0; t < c.M; ++t) {
    std::vector<double> l(static_cast<std::size_t>(c.E));
    for (std::int64_t e = 0; e < c.E; ++e)
      for (std::int64_t h = 0; h < c.H; ++h)
        l[e] += double(x[t * c.H + h]) * R[h * c.E + e];
    const double mx = *std::max_element(l.begin(), l.end());
    double sum = 0;
    for (double v : l)
      sum += std::exp(v - mx);
    std::vector<int> order(static_cast<std::size_t>(c.E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    r.clear.push_back(c.k == c.E || l[order[c.k - 1]] - l[order[c.k]] > 1e-4);
    order.resize(static_cast<std::size_t>(c.k));
    r.experts.push_back(order);
    double chosen = 0;
    for (int e : order)
      chosen += std::exp(l[e] - mx) / sum;
    for (int e : order) {
      const double p = std::exp(l[e] - mx) / sum / (c.renormalize ? chosen : 1.0);
      std::vector<double> hid(static_cast<std::size_t>(c.I));
      for (std::int64_t i = 0; i < c.I; ++i) {
        double gs = 0, us = 0;
        for (std::int64_t h = 0; h < c.H; ++h) {
          gs += double(x[t * c.H + h]) * g[e].deq[h * c.I + i];
          us += double(x[t * c.H + h]) * u[e].deq[h * c.I + i];
        }
        hid[i] = silu(gs) * us;
      }
      for (std::int64_t h = 0; h < c.H; ++h) {
        double s = 0;
        for (std::int64_t i = 0; i < c.I; ++i)
          s += hid[i] * d[e].deq[i * c.H + h];
        r.out[t * c.H + h] += p * s;
      }
    }
  }
  return r;
}

} // namespace

TEST_CASE("moe_mlp matches a double reference (decode, prefill, one hot expert)", "[moe]") {
  const bool saved_bf16_dot_disabled = detail::bf16_dot_disabled(); // restored at the end
  const std::vector<MoeCase> cases = {
      {1, 64, 32, 8, 2, true, WeightFormat::f32, 1 << 20, false},    // decode, mixtral-like
      {2, 64, 32, 8, 2, false, WeightFormat::bf16, 1 << 20, false},  // small M: GEMVs
      {37, 64, 64, 16, 4, false, WeightFormat::f32, 1 << 20, false}, // prefill, qwen3-moe-like
      {37, 64, 64, 16, 4, true, WeightFormat::bf16, 1 << 20, false},
      {30, 96, 64, 8, 2, true, WeightFormat::f16, 8 * 32 * 5, false}, // tiled expert MLPs
      {24, 64, 64, 8, 1, false, WeightFormat::f32, 1 << 20, true},    // every row to expert 3
      {24, 64, 64, 8, 3, true, WeightFormat::bf16, 1 << 20, true},
      {9, 64, 32, 4, 4, true, WeightFormat::f32, 1 << 20, false},       // top_k = experts
      {16, 64, 64, 8, 2, true, WeightFormat::int4_sym, 1 << 20, false}, // a packed int format
      {3, 64, 64, 8, 2, false, WeightFormat::int6_sym, 1 << 20, false}, // Q6_K experts
  };
  int runs = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const MoeCase& c = cases[ci];
    const auto seed = static_cast<std::uint32_t>(900 + 17 * ci);
    // x in [0, 1) for the one-hot router (it relies on sum_h x_h > 0), else [-1, 1)
    const auto x =
        random_vec(static_cast<std::size_t>(c.M * c.H), seed, c.one_expert ? 0.0f : -1.0f, 1.0f);
    const std::vector<float> R =
        c.one_expert ? one_expert_router(c.H, c.E, seed + 1)
                     : random_vec(static_cast<std::size_t>(c.H * c.E), seed + 1, -0.3f, 0.3f);
    const PackedWeights router = pack_f32(R, c.H, c.E);
    std::vector<TestWeights> g, u, d;
    for (std::int64_t e = 0; e < c.E; ++e) {
      const auto s = seed + 10 + 3 * static_cast<std::uint32_t>(e);
      g.push_back(make_weights(c.format, c.H, c.I, 32, s, false));
      u.push_back(make_weights(c.format, c.H, c.I, 32, s + 1, false));
      d.push_back(make_weights(c.format, c.I, c.H, 32, s + 2, false));
    }
    std::vector<MoeExpert> experts;
    for (std::int64_t e = 0; e < c.E; ++e)
      experts.push_back({&g[e].packed, &u[e].packed, &d[e].packed});
    const Reference ref = reference(c, x, R, g, u, d);
    double scale = 0;
    for (double v : ref.out)
      scale = std::max(scale, std::abs(v));
    std::int64_t unclear = 0;
    for (bool b : ref.clear)
      unclear += b ? 0 : 1;
    REQUIRE(unclear * 10 <= c.M);
    if (c.one_expert)
      for (const auto& row : ref.experts)
        REQUIRE(row[0] == 3); // the case really routes every row to one expert

    const MoeShape shape{c.M, c.H, c.I, c.E, c.k, c.renormalize};
    std::vector<std::pair<Isa, bool>> paths; // (isa, bf16 on VDPBF16PS)
    for (Isa isa : test_isas())
      paths.push_back({isa, false});
    if (c.format == WeightFormat::bf16 && cpu_features().avx512_bf16)
      paths.push_back({Isa::avx512, true}); // the expert GEMMs of >= 16 rows, x rounded to bf16
    for (auto [isa, bf16_dot] : paths) {
      ScopedIsa scoped(isa);
      detail::bf16_dot_disabled() = !bf16_dot;
      for (CoreSplit split : {CoreSplit{SplitDim::none, 1}, CoreSplit{SplitDim::cols, 2},
                              CoreSplit{SplitDim::rows, 2}}) {
        std::vector<float> out = nan_vec(ref.out.size());
        const MoeRouting r = moe_mlp(x, router, experts, out, shape, c.budget, split);
        ++runs;
        INFO("case " << ci << " M=" << c.M << " E=" << c.E << " k=" << c.k << " "
                     << format_name(c.format) << " isa=" << isa_name(isa)
                     << (bf16_dot ? " vdpbf16ps" : "") << " split=" << int(split.dim));
        REQUIRE(r.expert.size() == static_cast<std::size_t>(c.M * c.k));
        for (std::int64_t t = 0; t < c.M; ++t) {
          if (!ref.clear[static_cast<std::size_t>(t)])
            continue;
          double wsum = 0;
          for (std::int64_t j = 0; j < c.k; ++j) {
            CHECK(r.expert[t * c.k + j] == ref.experts[t][j]);
            wsum += r.weight[t * c.k + j];
          }
          if (c.renormalize)
            CHECK(std::abs(wsum - 1.0) < 1e-6);
        }
        // x rounded to bf16 (AMX-BF16, VDPBF16PS): the bf16 activations' bound
        const bool amx_bf16 = (isa == Isa::amx || bf16_dot) && c.format == WeightFormat::bf16;
        const double tol = (amx_bf16 ? 2e-2 : 1e-5) * scale;
        std::int64_t bad = 0;
        double worst = 0;
        for (std::size_t i = 0; i < out.size(); ++i) {
          const double e = std::abs(double(out[i]) - ref.out[i]);
          worst = std::max(worst, std::isnan(e) ? 1e300 : e);
          if (!(e <= tol))
            ++bad;
        }
        INFO("worst |err| " << worst << " bound " << tol);
        REQUIRE(bad == 0);
      }
    }
  }
  detail::bf16_dot_disabled() = saved_bf16_dot_disabled;
  const auto dot_cases =
      cpu_features().avx512_bf16
          ? std::count_if(cases.begin(), cases.end(),
                          [](const MoeCase& c) { return c.format == WeightFormat::bf16; })
          : 0;
  CHECK(runs == static_cast<int>((cases.size() * test_isas().size() + dot_cases) * 3));
}

TEST_CASE("moe_route: softmax, top-k with ties to the lower expert, renormalisation", "[moe]") {
  // two rows of 4 logits; row 0 ties experts 1 and 3 at the top
  const std::vector<float> logits = {1, 3, 2, 3, 0, 0, 5, 1};
  MoeShape s{2, 1, 1, 4, 2, false};
  const MoeRouting plain = moe_route(logits, s);
  CHECK(plain.expert == std::vector<std::int32_t>{1, 3, 2, 3});
  const double z0 = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  CHECK(plain.weight[0] == Approx(std::exp(3.0) / z0).epsilon(1e-6));
  CHECK(plain.weight[1] == Approx(std::exp(3.0) / z0).epsilon(1e-6));
  const double z1 = 2 + std::exp(5.0) + std::exp(1.0);
  CHECK(plain.weight[2] == Approx(std::exp(5.0) / z1).epsilon(1e-6));
  CHECK(plain.weight[3] == Approx(std::exp(1.0) / z1).epsilon(1e-6));
  s.renormalize = true;
  const MoeRouting norm = moe_route(logits, s);
  CHECK(norm.weight[0] == Approx(0.5).epsilon(1e-6));
  CHECK(norm.weight[2] == Approx(std::exp(5.0) / (std::exp(5.0) + std::exp(1.0))).epsilon(1e-6));

  const std::vector<float> nan_row = {0, kNaN, 1, 2};
  CHECK_THROWS_MATCHES(moe_route(nan_row, {1, 1, 1, 4, 1, false}), ModelValueError,
                       kind_is(ErrorKind::invalid_input));                // a value
  CHECK_THROWS_KIND(moe_route(logits, {2, 1, 1, 4, 5, false}), internal); // k > E
  CHECK_THROWS_KIND(moe_route(logits, {3, 1, 1, 4, 1, false}), internal); // short
}

TEST_CASE("moe_mlp refuses mismatched weights", "[moe]") {
  const auto g = make_weights(WeightFormat::f32, 64, 32, 32, 1, false);
  const auto d = make_weights(WeightFormat::f32, 32, 64, 32, 2, false);
  const PackedWeights router = pack_f32(random_vec(64 * 4, 3), 64, 4);
  const std::vector<MoeExpert> experts(4, MoeExpert{&g.packed, &g.packed, &d.packed});
  const auto x = random_vec(2 * 64, 4);
  std::vector<float> out(2 * 64);
  CHECK_NOTHROW(moe_mlp(x, router, experts, out, {2, 64, 32, 4, 2, true}, 1 << 20));
  // router width != experts
  CHECK_THROWS_KIND(moe_mlp(x, router, experts, out, {2, 64, 32, 5, 2, true}, 1 << 20), internal);
  // top_k > experts
  CHECK_THROWS_KIND(moe_mlp(x, router, experts, out, {2, 64, 32, 4, 5, true}, 1 << 20), internal);
  // an expert whose down weight has the wrong shape
  std::vector<MoeExpert> bad = experts;
  bad[2].down = &g.packed;
  CHECK_THROWS_KIND(moe_mlp(x, router, bad, out, {2, 64, 32, 4, 4, true}, 1 << 20), internal);
}

TEST_CASE("moe_mlp reads only the chosen experts", "[moe]") {
  // Every row routes to expert 3 (top_k 1, renormalised: weight exactly 1); all other experts'
  // weights are NaN, so reading any of them would poison the output. The result must be
  // bitwise expert 3's own swiglu_mlp, for a decode row and for a prefill block.
  const std::int64_t H = 64, I = 32, E = 8;
  const auto g = make_weights(WeightFormat::bf16, H, I, 32, 71, false);
  const auto u = make_weights(WeightFormat::bf16, H, I, 32, 72, false);
  const auto d = make_weights(WeightFormat::bf16, I, H, 32, 73, false);
  const PackedWeights poison_in = pack_f32(std::vector<float>(H * I, kNaN), H, I);
  const PackedWeights poison_out = pack_f32(std::vector<float>(I * H, kNaN), I, H);
  std::vector<MoeExpert> experts(E, MoeExpert{&poison_in, &poison_in, &poison_out});
  experts[3] = {&g.packed, &u.packed, &d.packed};
  const PackedWeights router = pack_f32(one_expert_router(H, E, 74), H, E);
  for (std::int64_t M : {1, 20}) {
    INFO("M=" << M);
    const auto x = random_vec(static_cast<std::size_t>(M * H), 75, 0.0f, 1.0f);
    std::vector<float> want(static_cast<std::size_t>(M * H)), got = nan_vec(want.size());
    swiglu_mlp(x, g.packed, u.packed, d.packed, want, {M, H, I}, 1 << 20);
    const MoeRouting r = moe_mlp(x, router, experts, got, {M, H, I, E, 1, true}, 1 << 20);
    for (std::int64_t t = 0; t < M; ++t) {
      CHECK(r.expert[t] == 3);
      CHECK(r.weight[t] == 1.0f);
    }
    CHECK(got == want);
  }
}
