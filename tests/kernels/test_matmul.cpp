// Numerics of kernels::linear against a naive double-precision reference, for every weight format,
// many shapes (odd K and N, GEMV and GEMM row counts), every ISA path and every core split.
//
// Error bound (documented in docs/kernels.md): for every output element
//   |y - y_ref| <= tol * (sum_k |x[k]| * A[k][n] + |bias[n]|)
// with A = |w| for float formats, |scale| * (|q| + |zero|) for quantized ones (the GEMV path
// applies the zero point after accumulating x * q, so its rounding scales with |q| + |zero|) and
// |scale| * u + |min| for the scale-and-min ones (s * sum x u - min * sum x), and
// tol = 3e-6 * sqrt(K) + 1e-6 (f32 accumulation: a few ulps times sqrt(K) with margin).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tpullm/kernels/matmul.hpp"

#include "kernel_test_util.hpp"

using namespace tpullm;
using namespace tpullm::kernels;

namespace tpullm_test {

namespace {
/// An act-order row permutation of [0, K) (empty when act_order is false).
std::vector<std::int32_t> shuffled_rows(std::int64_t K, bool act_order, std::mt19937& rng) {
  std::vector<std::int32_t> perm;
  if (act_order) {
    perm.resize(static_cast<std::size_t>(K));
    for (std::int64_t k = 0; k < K; ++k)
      perm[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(k);
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  return perm;
}
} // namespace

TestWeights make_weights(WeightFormat f, std::int64_t K, std::int64_t N, std::int64_t group,
                         std::uint32_t seed, bool act_order) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uf(-1.0f, 1.0f);
  std::uniform_real_distribution<float> us(0.005f, 0.05f);
  TestWeights t;
  const std::size_t kn = static_cast<std::size_t>(K * N);
  t.absw.resize(kn);
  const std::int64_t G = is_quantized(f) ? K / group : 1;
  std::vector<float> scales(static_cast<std::size_t>(G * N));
  for (auto& s : scales)
    s = us(rng) * (rng() % 2 ? 1.0f : -1.0f);
  switch (f) {
  case WeightFormat::f32: {
    std::vector<float> w(kn);
    for (auto& v : w)
      v = uf(rng);
    t.packed = pack_f32(w, K, N);
    break;
  }
  case WeightFormat::bf16:
  case WeightFormat::f16: {
    std::vector<std::uint16_t> w(kn);
    for (auto& v : w)
      v = f == WeightFormat::bf16 ? f32_to_bf16(uf(rng)) : f32_to_f16(uf(rng));
    t.packed = f == WeightFormat::bf16 ? pack_bf16(w, K, N) : pack_f16(w, K, N);
    break;
  }
  case WeightFormat::int8: {
    std::vector<std::int8_t> q(kn);
    for (auto& v : q)
      v = static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
    t.packed = pack_int8(q, scales, K, N, group);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        t.absw[k * N + n] = std::abs(scales[(k / group) * N + n]) * std::abs(float(q[k * N + n]));
    break;
  }
  case WeightFormat::int8_asym: {
    // codes and zeros over the whole byte range; the reference below is built from them (not
    // from dequantize()), so it checks the packer as well as the kernels
    const std::vector<std::int32_t> perm = shuffled_rows(K, act_order, rng);
    std::vector<std::uint8_t> u(kn), z(static_cast<std::size_t>(G * N));
    for (auto& v : u)
      v = static_cast<std::uint8_t>(rng() % 256);
    for (auto& v : z)
      v = static_cast<std::uint8_t>(rng() % 256);
    t.packed = pack_int8_asym(u, scales, z, K, N, group, perm);
    t.deq.resize(kn);
    for (std::int64_t j = 0; j < K; ++j) {
      const std::int64_t k = perm.empty() ? j : perm[j];
      for (std::int64_t n = 0; n < N; ++n) {
        const float s = scales[(j / group) * N + n];
        const float zz = float(z[(j / group) * N + n]);
        t.deq[k * N + n] = (float(u[j * N + n]) - zz) * s;
        t.absw[k * N + n] = std::abs(s) * (float(u[j * N + n]) + zz);
      }
    }
    return t;
  }
  case WeightFormat::int4_min:
  case WeightFormat::int8_min:
  case WeightFormat::int6_min: {
    // codes over the whole range, mins of either sign and up to the largest |code * scale| (so
    // that w = u s - m cancels in part, as ggml's Q4_K weights do); the reference is built from
    // them, not from dequantize()
    const std::vector<std::int32_t> perm = shuffled_rows(K, act_order, rng);
    const int levels = f == WeightFormat::int4_min ? 16 : f == WeightFormat::int6_min ? 64 : 256;
    std::vector<std::uint8_t> u(kn);
    for (auto& v : u)
      v = static_cast<std::uint8_t>(rng() % static_cast<unsigned>(levels));
    std::vector<float> mins(static_cast<std::size_t>(G * N));
    for (std::size_t i = 0; i < mins.size(); ++i)
      mins[i] = uf(rng) * std::abs(scales[i]) * static_cast<float>(levels - 1);
    t.packed = f == WeightFormat::int4_min   ? pack_int4_min(u, scales, mins, K, N, group, perm)
               : f == WeightFormat::int6_min ? pack_int6_min(u, scales, mins, K, N, group, perm)
                                             : pack_int8_min(u, scales, mins, K, N, group, perm);
    t.deq.resize(kn);
    for (std::int64_t j = 0; j < K; ++j) {
      const std::int64_t k = perm.empty() ? j : perm[j];
      for (std::int64_t n = 0; n < N; ++n) {
        const double s = scales[(j / group) * N + n], mn = mins[(j / group) * N + n];
        t.deq[k * N + n] = static_cast<float>(double(u[j * N + n]) * s - mn);
        t.absw[k * N + n] = static_cast<float>(std::abs(s) * u[j * N + n] + std::abs(mn));
      }
    }
    return t;
  }
  case WeightFormat::int6_sym: {
    // 6-bit codes over their whole range (ggml's Q6_K); the reference is built from the codes
    const std::vector<std::int32_t> perm = shuffled_rows(K, act_order, rng);
    std::vector<std::int8_t> q(kn);
    for (auto& v : q)
      v = static_cast<std::int8_t>(static_cast<int>(rng() % 64) - 32);
    t.packed = pack_int6_sym(q, scales, K, N, group, perm);
    t.deq.resize(kn);
    for (std::int64_t j = 0; j < K; ++j) {
      const std::int64_t k = perm.empty() ? j : perm[j];
      for (std::int64_t n = 0; n < N; ++n) {
        const float sc = scales[(j / group) * N + n];
        t.deq[k * N + n] = static_cast<float>(q[j * N + n]) * sc;
        t.absw[k * N + n] = std::abs(sc) * (float(q[j * N + n] + 32) + 32.0f);
      }
    }
    return t;
  }
  case WeightFormat::int4_sym:
  case WeightFormat::int4_asym: {
    const std::vector<std::int32_t> perm = shuffled_rows(K, act_order, rng);
    std::vector<std::uint8_t> u(kn), z(static_cast<std::size_t>(G * N), 8);
    for (auto& v : u)
      v = static_cast<std::uint8_t>(rng() % 16);
    if (f == WeightFormat::int4_asym)
      for (auto& v : z)
        v = static_cast<std::uint8_t>(rng() % 16);
    if (f == WeightFormat::int4_sym) {
      std::vector<std::int8_t> q(kn);
      for (std::size_t i = 0; i < kn; ++i)
        q[i] = static_cast<std::int8_t>(u[i] - 8);
      t.packed = pack_int4_sym(q, scales, K, N, group, perm);
    } else {
      t.packed = pack_int4_asym(u, scales, z, K, N, group, perm);
    }
    for (std::int64_t j = 0; j < K; ++j) {
      const std::int64_t k = perm.empty() ? j : perm[j];
      for (std::int64_t n = 0; n < N; ++n)
        t.absw[k * N + n] = std::abs(scales[(j / group) * N + n]) *
                            (float(u[j * N + n]) + float(z[(j / group) * N + n]));
    }
    break;
  }
  }
  t.deq = dequantize(t.packed);
  if (!is_quantized(f))
    for (std::size_t i = 0; i < kn; ++i)
      t.absw[i] = std::abs(t.deq[i]);
  return t;
}

} // namespace tpullm_test

using namespace tpullm_test;

namespace {

struct MatmulCase {
  std::int64_t M, K, N, group; // group: rows per scale group for quantized formats
  WeightFormat format;
  bool bias;
  bool act_order;
};

std::string describe(const MatmulCase& c) {
  return "M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) +
         " " + std::string(format_name(c.format)) + " g=" + std::to_string(c.group) +
         (c.bias ? " bias" : "") + (c.act_order ? " act-order" : "");
}

std::vector<MatmulCase> matmul_cases() {
  struct KN {
    std::int64_t K, N, group;
  };
  // group: rows per scale group; int8 needs a multiple of 4, int4 of 8 (else per-channel, g = K)
  const KN kns[] = {{1, 1, 1},      {7, 5, 7},     {33, 31, 33},   {64, 33, 32},
                    {897, 31, 897}, {300, 70, 60}, {256, 64, 128}, {896, 40, 64}};
  const std::int64_t Ms[] = {1, 2, 3, 4, 5, 17, 128};
  const WeightFormat fs[] = {
      WeightFormat::f32,       WeightFormat::bf16,     WeightFormat::f16,
      WeightFormat::int8,      WeightFormat::int4_sym, WeightFormat::int4_asym,
      WeightFormat::int8_asym, WeightFormat::int4_min, WeightFormat::int8_min,
      WeightFormat::int6_sym,  WeightFormat::int6_min};
  std::vector<MatmulCase> cases;
  int i = 0;
  for (auto kn : kns)
    for (auto M : Ms)
      for (auto f : fs) {
        const bool big = kn.K * kn.N * M > 2'000'000;
        if (big && f != WeightFormat::f32 && f != WeightFormat::int4_asym)
          continue; // keep the run short: the largest shape only for two formats
        std::int64_t g = kn.group;
        if (g % row_group(f) != 0)
          g = kn.K;
        cases.push_back({M, kn.K, kn.N, g, f, (i++ % 2) == 0, false});
      }
  // int8 per-channel (group = K), act-order int4, and M above the mc block (336 rows)
  cases.push_back({1, 64, 40, 64, WeightFormat::int8, true, false});
  cases.push_back({20, 897, 33, 897, WeightFormat::int8, false, false});
  cases.push_back({1, 128, 40, 32, WeightFormat::int4_sym, false, true});
  cases.push_back({9, 128, 40, 32, WeightFormat::int4_asym, true, true});
  cases.push_back({350, 64, 40, 64, WeightFormat::bf16, true, false});
  // bf16 GEMMs over several K blocks of the VDPBF16PS path (256 rows each), odd K in and
  // across blocks, 14-row strips with a remainder
  cases.push_back({40, 1100, 70, 1100, WeightFormat::bf16, false, false});
  cases.push_back({20, 1025, 33, 1025, WeightFormat::bf16, true, false});
  cases.push_back({31, 33, 97, 33, WeightFormat::bf16, false, false});
  cases.push_back({350, 64, 40, 16, WeightFormat::int4_sym, false, false});
  cases.push_back({2, 35, 40, 35, WeightFormat::int4_asym, true, false}); // per-channel, K % 8 != 0
  cases.push_back({6, 35, 40, 35, WeightFormat::int8, false, false});     // K % 4 != 0
  // int8 with zero points: per-channel with K % 4 != 0, act-order (GEMV and GEMM), 4-row groups
  cases.push_back({3, 35, 40, 35, WeightFormat::int8_asym, true, false});
  cases.push_back({1, 128, 70, 32, WeightFormat::int8_asym, false, true});
  cases.push_back({21, 128, 40, 32, WeightFormat::int8_asym, true, true});
  cases.push_back({2, 64, 33, 4, WeightFormat::int8_asym, false, false});
  // scale and min (ggml's Q4_K / Q5_K / Q2_K): groups of 16 and 32, odd N, GEMV (M 1..4, the
  // multi-panel single-row GEMV included) and GEMM (M 17 also on the AMX emulator, 40 over
  // several 14-row strips), act-order, per-channel with K % 8 != 0
  for (WeightFormat f : {WeightFormat::int4_min, WeightFormat::int8_min, WeightFormat::int6_min})
    for (std::int64_t g : {16, 32}) {
      for (std::int64_t M : {1, 2, 3, 4})
        cases.push_back({M, 128, 161, g, f, M % 2 == 1, false});
      cases.push_back({17, 64, 33, g, f, true, false});
      cases.push_back({40, 96, 71, g, f, false, false});
      cases.push_back({1, 128, 70, g, f, false, true});
      cases.push_back({21, 64, 40, g, f, true, true});
    }
  // 6-bit (ggml's Q6_K: groups of 16): GEMV, GEMM over several strips, act-order,
  // per-channel with K % 16 != 0
  for (std::int64_t g : {16, 32}) {
    for (std::int64_t M : {1, 2, 3, 4})
      cases.push_back({M, 128, 161, g, WeightFormat::int6_sym, M % 2 == 1, false});
    cases.push_back({17, 64, 33, g, WeightFormat::int6_sym, true, false});
    cases.push_back({40, 96, 71, g, WeightFormat::int6_sym, false, false});
    cases.push_back({1, 128, 70, g, WeightFormat::int6_sym, false, true});
    cases.push_back({21, 64, 40, g, WeightFormat::int6_sym, true, true});
  }
  cases.push_back({3, 35, 40, 35, WeightFormat::int6_sym, true, false});
  cases.push_back({350, 64, 40, 16, WeightFormat::int6_sym, false, false});
  cases.push_back({2, 35, 40, 35, WeightFormat::int4_min, true, false});
  cases.push_back({5, 35, 40, 35, WeightFormat::int8_min, false, false});
  cases.push_back({3, 35, 40, 35, WeightFormat::int6_min, false, false});
  cases.push_back({350, 64, 40, 32, WeightFormat::int6_min, true, false});
  // >= 4 panels: the single-row GEMV reads several panels at once (and a remainder of 1-3)
  for (auto f : fs)
    for (std::int64_t n : {161, 224})
      cases.push_back({1, 96, n, 32, f, n == 161, false});
  // the float GEMVs' K streams (M 1..4): K = 79 leaves the last stream the most rows past the 4
  // interleaved streams (15 bf16 / f16 rows, 7 f32 rows), K = 2051 long streams whose prefetch
  // runs on into the next panel, N not a multiple of the 32-column panel
  for (WeightFormat f : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::f16})
    for (std::int64_t M = 1; M <= 4; ++M) {
      cases.push_back({M, 79, 97, 79, f, M % 2 == 1, false});
      cases.push_back({M, 2051, 67, 2051, f, M % 2 == 0, false});
    }
  // the row-blocked GEMV (4 < M <= kGemvBlockMaxRows): 4-row blocks and a remainder over
  // blocks of panels (K = 1024: 2 f32 or 4 bf16 / f16 panels to a block of 256 KB; N = 161: 6
  // panels, the last one partial), groups of 32 rows
  for (auto f : fs)
    for (std::int64_t M : {8, 13, 16})
      cases.push_back({M, 1024, 161, is_quantized(f) ? 32 : 1024, f, M % 2 == 0, false});
  return cases;
}

} // namespace

TEST_CASE("linear matches a double reference for every format, shape and ISA", "[matmul]") {
  const bool saved_bf16_dot_disabled = detail::bf16_dot_disabled(); // restored at the end
  const auto cases = matmul_cases();
  int runs = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const MatmulCase& c = cases[ci];
    const auto tw = make_weights(c.format, c.K, c.N, c.group, 1000 + static_cast<std::uint32_t>(ci),
                                 c.act_order);
    const auto x =
        random_vec(static_cast<std::size_t>(c.M * c.K), 7 + static_cast<std::uint32_t>(ci));
    const auto bias = c.bias ? random_vec(static_cast<std::size_t>(c.N), 99) : std::vector<float>{};
    std::vector<double> ref(static_cast<std::size_t>(c.M * c.N)), bound(ref.size());
    const double tol = matmul_tol(c.K);
    for (std::int64_t m = 0; m < c.M; ++m)
      for (std::int64_t n = 0; n < c.N; ++n) {
        double s = c.bias ? bias[n] : 0.0, a = c.bias ? std::abs(bias[n]) : 0.0;
        for (std::int64_t k = 0; k < c.K; ++k) {
          s += double(x[m * c.K + k]) * double(tw.deq[k * c.N + n]);
          a += std::abs(double(x[m * c.K + k])) * double(tw.absw[k * c.N + n]);
        }
        ref[m * c.N + n] = s;
        bound[m * c.N + n] = tol * a + 1e-30;
      }
    const CoreSplit splits[] = {{SplitDim::none, 1}, {SplitDim::cols, 2}, {SplitDim::rows, 2}};
    struct Path {
      Isa isa;
      bool no_vnni, amx_emulated, bf16_dot = false;
    };
    std::vector<Path> paths;
    for (Isa isa : test_isas())
      paths.push_back({isa, false, false});
    if (cpu_features().avx512_vnni && is_quantized(c.format) && c.M <= 4)
      paths.push_back({Isa::avx512, true, false}); // the f32-FMA int GEMV without VNNI
    if (detail::amx_format(c.format) && c.M >= detail::kAmxMinRows &&
        c.M * c.K * c.N <= 600'000) // the scalar emulator is slow: the smaller shapes only
      paths.push_back({Isa::portable, false, true}); // the AMX path on the tile emulator
    // bf16 GEMM on VDPBF16PS (x rounded to bf16 as on AMX); the plain avx512 entry above then
    // runs the f32-FMA GEMM with it disabled
    if (c.format == WeightFormat::bf16 && c.M >= detail::kBf16DotMinRows &&
        cpu_features().avx512_bf16)
      paths.push_back({Isa::avx512, false, false, true});
    std::vector<double> amx_bound; // the looser bound of the AMX paths (isa amx, M >= 16)
    if (detail::amx_format(c.format)) {
      amx_bound = amx_linear_bound(tw, std::vector<double>(x.begin(), x.end()), c.M, c.K, c.N);
      for (std::int64_t m = 0; m < c.M; ++m)
        for (std::int64_t n = 0; n < c.N; ++n)
          amx_bound[m * c.N + n] += tol * (c.bias ? std::abs(bias[n]) : 0.0) + 1e-30;
    }
    for (auto [isa, no_vnni, amx_emulated, bf16_dot] : paths) {
      ScopedIsa scoped(isa);
      std::optional<amx::ScopedEmulation> emu;
      if (amx_emulated)
        emu.emplace();
      detail::bf16_dot_disabled() = !bf16_dot;
      if (bf16_dot)
        REQUIRE(detail::bf16_dot_applies(c.M));
      const bool on_amx = (isa == Isa::amx || amx_emulated || bf16_dot) && !amx_bound.empty();
      const auto& bnd = on_amx ? amx_bound : bound;
      for (const CoreSplit& split : splits) {
        std::vector<float> y = nan_vec(static_cast<std::size_t>(c.M * c.N));
        detail::vnni_disabled() = no_vnni;
        linear(x, tw.packed, bias, y, {c.M, c.K, c.N}, split);
        ++runs;
        std::int64_t bad = 0;
        double worst = 0;
        for (std::size_t i = 0; i < y.size(); ++i) {
          const double err = std::abs(double(y[i]) - ref[i]);
          if (!(err <= bnd[i]))
            ++bad;
          worst = std::max(worst, std::isfinite(err) ? err / bnd[i] * tol : 1e9);
        }
        detail::vnni_disabled() = false;
        INFO(describe(c) << " isa=" << isa_name(isa) << (no_vnni ? " (no vnni)" : "")
                         << (amx_emulated ? " (amx emulated)" : "")
                         << (bf16_dot ? " (vdpbf16ps)" : "") << " split=" << int(split.dim)
                         << " worst normalized err=" << worst << " tol=" << tol);
        REQUIRE(bad == 0);
      }
    }
  }
  detail::bf16_dot_disabled() = saved_bf16_dot_disabled;
  if (!cpu_features().avx512_bf16)
    WARN("SKIPPED the VDPBF16PS bf16 GEMM: this CPU has no AVX512_BF16");
  INFO("runs " << runs);
  CHECK(runs > 600);
}

TEST_CASE("linear rejects bad shapes and splits", "[matmul]") {
  const auto tw = make_weights(WeightFormat::f32, 8, 4, 8, 1);
  std::vector<float> x(16), y(8);
  CHECK_THROWS_KIND(linear(x, tw.packed, {}, y, {2, 7, 4}), internal);
  CHECK_THROWS_KIND(linear(x, tw.packed, {}, y, {2, 8, 5}), internal);
  CHECK_THROWS_KIND(linear(x, tw.packed, {}, y, {0, 8, 4}), internal);
  std::vector<float> small(3);
  CHECK_THROWS_KIND(linear(x, tw.packed, {}, small, {2, 8, 4}), internal);
  std::vector<float> bias(3);
  CHECK_THROWS_KIND(linear(x, tw.packed, bias, y, {2, 8, 4}), internal);
  CHECK_THROWS_KIND(linear(x, tw.packed, {}, y, {2, 8, 4}, {SplitDim::heads, 2}), internal);
  std::vector<float> xb(8 * 8), yb(8 * 4);
  CHECK_THROWS_KIND(linear(xb, tw.packed, {}, yb, {8, 8, 4}, {SplitDim::heads, 2}), internal);
}

TEST_CASE("linear over a prepared LinearInput matches the span overload bit for bit", "[matmul]") {
  // q/k/v-like: one x, several weights (formats, group sizes, an act-order one, a padded K)
  const std::int64_t K = 200;
  struct W {
    WeightFormat f;
    std::int64_t K, N, group;
    bool act_order;
  };
  const W ws[] = {
      {WeightFormat::int4_sym, K, 160, 40, false}, {WeightFormat::int4_asym, K, 64, 40, false},
      {WeightFormat::int8, K, 96, K, false},       {WeightFormat::int8, K, 33, 40, false},
      {WeightFormat::int4_sym, K, 40, 40, true},   {WeightFormat::bf16, K, 70, K, false},
      {WeightFormat::int4_min, K, 64, 40, false},  {WeightFormat::int8_min, K, 33, 20, false},
      {WeightFormat::int6_min, K, 40, K, false}};
  for (std::int64_t M : {1, 3, 6}) {
    const auto x = random_vec(static_cast<std::size_t>(M * K), 5 + static_cast<std::uint32_t>(M));
    for (Isa isa : test_isas()) {
      ScopedIsa scoped(isa);
      const LinearInput in(x, M, K);
      for (int rep = 0; rep < 2; ++rep) // the second pass reads the cached digits
        for (std::size_t i = 0; i < std::size(ws); ++i) {
          const W& w = ws[i];
          const auto tw =
              make_weights(w.f, w.K, w.N, w.group, 40 + static_cast<std::uint32_t>(i), w.act_order);
          std::vector<float> y1 = nan_vec(static_cast<std::size_t>(M * w.N)), y2 = y1;
          linear(x, tw.packed, {}, y1, {M, K, w.N}, {SplitDim::cols, 2});
          linear(in, tw.packed, {}, y2, {M, K, w.N}, {SplitDim::cols, 2});
          INFO("M=" << M << " weight " << i << " isa " << isa_name(isa) << " rep " << rep);
          CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) == 0);
        }
    }
  }
  const auto x = random_vec(64, 1);
  const LinearInput in(x, 2, 32);
  const auto tw = make_weights(WeightFormat::int8, 16, 8, 16, 1);
  std::vector<float> y(16);
  CHECK_THROWS_KIND(linear(in, tw.packed, {}, y, {2, 16, 8}), internal);
  CHECK_THROWS_KIND(LinearInput(x, 3, 32), internal);
}

TEST_CASE("a float row block's 8-row pass gives each row the 4-row pass's sums bit for bit",
          "[matmul]") {
  // gemv_rows_range runs 8 rows a pass over float weights on AVX-512 where K <= kGemvRows8MaxK
  // (5120: the bound itself, and 1024), 4 rows elsewhere: an 8-row call must give the bits of
  // two 4-row calls (one accumulator set per row either way), so a speculative verify row stays
  // what the 4-row pass made it.
  if (!cpu_features().avx512) {
    SUCCEED("AVX-512: not available on this CPU (skipped)");
    return;
  }
  ScopedIsa scoped(Isa::avx512);
  for (WeightFormat f : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::f16})
    for (std::int64_t K : {std::int64_t{1024}, detail::kGemvRows8MaxK}) {
      const std::int64_t N = 97;
      const auto tw = make_weights(f, K, N, K, 3);
      const auto x = random_vec(static_cast<std::size_t>(8 * K), 11);
      std::vector<float> y8 = nan_vec(static_cast<std::size_t>(8 * N)), y4 = y8;
      linear(x, tw.packed, {}, y8, {8, K, N}, {SplitDim::cols, 2});
      for (std::int64_t m0 : {0, 4})
        linear(std::span<const float>(x).subspan(static_cast<std::size_t>(m0 * K),
                                                 static_cast<std::size_t>(4 * K)),
               tw.packed, {},
               std::span<float>(y4).subspan(static_cast<std::size_t>(m0 * N),
                                            static_cast<std::size_t>(4 * N)),
               {4, K, N}, {SplitDim::cols, 2});
      INFO(format_name(f) << " K " << K);
      CHECK(std::memcmp(y8.data(), y4.data(), y8.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("a rows split of a short GEMM runs over columns", "[matmul][split]") {
  using tpullm::kernels::CoreSplit;
  using tpullm::kernels::skinny_split;
  using tpullm::kernels::SplitDim;
  // 16 rows in 14-row tiles on 2 parts: 2 tiles, fewer than 4 per part
  CHECK(skinny_split({SplitDim::rows, 2}, 16, 14).dim == SplitDim::cols);
  CHECK(skinny_split({SplitDim::rows, 2}, 97, 14).dim == SplitDim::cols); // 7 tiles
  // 8 tiles of 14 rows: 4 per part, kept
  CHECK(skinny_split({SplitDim::rows, 2}, 112, 14).dim == SplitDim::rows);
  CHECK(skinny_split({SplitDim::rows, 2}, 112, 14).parts == 2);
  // one part, or another planned dimension, is left as planned
  CHECK(skinny_split({SplitDim::rows, 1}, 16, 14).dim == SplitDim::rows);
  CHECK(skinny_split({SplitDim::cols, 2}, 512, 14).dim == SplitDim::cols);
  CHECK(skinny_split({SplitDim::none, 2}, 16, 14).dim == SplitDim::none);
}
