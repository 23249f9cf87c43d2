// Numerics of the W8A8 kernels (kernels/int8_linear.hpp) on every path this CPU has (AVX-512
// VNNI, AVX-VNNI, AVX2 VPMADDWD, portable, AMX-INT8 on the tile unit and on the emulator) against
// the portable reference detail::linear_w8a8_ref. The integer sums are exact and the epilogue
// follows the reference's operation order, so the bound is tight: max |y - y_ref| <= 1e-6 *
// max |y_ref| per case. Paths the CPU lacks are reported as SKIPPED.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tpullm/kernels/detail/w4a8_gemv_avx512.hpp"
#include "tpullm/kernels/int8_linear.hpp"
#include "tpullm/kernels/moe.hpp"

#include "kernel_test_util.hpp"

using namespace tpullm;
using namespace tpullm::kernels;

namespace w8a8_test {

/// A path to force: the Isa, the AVX-VNNI hook, the AMX emulator, and the path it must select.
struct W8A8TestPath {
  const char* name;
  Isa isa;
  bool no_avx_vnni, amx_emulated, available;
  detail::W8A8Path expect;
};

std::vector<W8A8TestPath> all_paths() {
  const auto& f = cpu_features();
  return {
      {"avx512-vnni", Isa::avx512, false, false, f.avx512_vnni, detail::W8A8Path::vnni512},
      {"avx-vnni", Isa::avx2, false, false, f.avx_vnni, detail::W8A8Path::avx_vnni},
      {"avx2", Isa::avx2, true, false, f.avx2, detail::W8A8Path::avx2},
      {"portable", Isa::portable, false, false, true, detail::W8A8Path::portable},
      {"amx", Isa::amx, false, false, f.amx, detail::W8A8Path::amx},
      {"amx-emulated", Isa::portable, false, true, true, detail::W8A8Path::amx_emulated},
  };
}

bool is_amx(const W8A8TestPath& p) {
  return p.expect == detail::W8A8Path::amx || p.expect == detail::W8A8Path::amx_emulated;
}

/// Forces one path for a scope (and restores the previous choice).
class ForcePath {
public:
  explicit ForcePath(const W8A8TestPath& p) : isa_(p.isa) {
#if TPULLM_X86
    saved_ = detail::w8a8_avx_vnni_disabled();
    detail::w8a8_avx_vnni_disabled() = p.no_avx_vnni;
#endif
    if (p.amx_emulated)
      emu_.emplace();
  }
  ~ForcePath() {
#if TPULLM_X86
    detail::w8a8_avx_vnni_disabled() = saved_;
#endif
  }
  ForcePath(const ForcePath&) = delete;
  ForcePath& operator=(const ForcePath&) = delete;

private:
  ScopedIsa isa_;
  std::optional<amx::ScopedEmulation> emu_;
  bool saved_ = false;
};

void report_skipped() {
  for (const auto& p : all_paths())
    if (!p.available)
      WARN("SKIPPED W8A8 path " << p.name << ": this CPU lacks it");
}

/// Random int8 weights [K, N] per output channel; `extreme`: only -128 and 127.
PackedWeights make_w8(std::int64_t K, std::int64_t N, std::uint32_t seed, bool extreme = false) {
  std::mt19937 rng(seed);
  std::vector<std::int8_t> q(static_cast<std::size_t>(K * N));
  for (auto& v : q)
    v = extreme ? static_cast<std::int8_t>(rng() % 2 ? 127 : -128)
                : static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
  std::uniform_real_distribution<float> us(0.005f, 0.05f);
  std::vector<float> sc(static_cast<std::size_t>(N));
  for (auto& s : sc)
    s = us(rng);
  return pack_int8_per_channel(q, sc, K, N);
}

ActQuant dyn() {
  return {};
}
ActQuant stat(float scale, std::int32_t zero) {
  ActQuant a;
  a.kind = ActQuant::Kind::static_tensor;
  a.scale = scale;
  a.zero = zero;
  return a;
}

std::string aq_name(const ActQuant& a) {
  if (a.kind == ActQuant::Kind::dynamic_row)
    return "dynamic";
  return "static(s=" + std::to_string(a.scale) + ", z=" + std::to_string(a.zero) + ")";
}

/// max |y - ref| / max |ref| (0 when both are all zero); NaN / mismatch in size count as 1e9.
double rel_err(const std::vector<float>& y, const std::vector<float>& ref) {
  double mx = 0, err = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    mx = std::max(mx, std::abs(double(ref[i])));
    const double e = std::abs(double(y[i]) - double(ref[i]));
    err = std::isfinite(e) ? std::max(err, e) : 1e9;
  }
  return mx > 0 ? err / mx : err;
}

std::vector<float> ref_linear(const std::vector<float>& x, const PackedWeights& w,
                              const std::vector<float>& bias, std::int64_t M, const ActQuant& aq) {
  std::vector<float> y(static_cast<std::size_t>(M * w.N));
  detail::linear_w8a8_ref(x.data(), w, bias.empty() ? nullptr : bias.data(), y.data(),
                          {M, w.K, w.N}, aq);
  return y;
}

constexpr double kTol = 1e-6;

} // namespace w8a8_test

TEST_CASE("linear_w8a8 matches the reference on every path, shape and quantization",
          "[int8][matmul]") {
  using namespace w8a8_test;
  report_skipped();
  const std::int64_t Ms[] = {1, 2, 3, 4, 5, 17, 64};
  struct KN {
    std::int64_t K, N;
  };
  const KN kns[] = {{37, 7}, {64, 32}, {200, 45}, {515, 100}, {1030, 70}};
  const ActQuant aqs[] = {dyn(), stat(0.02f, 0), stat(0.015f, -37), stat(0.03f, 101)};
  int runs = 0;
  std::uint32_t seed = 1;
  for (const KN& kn : kns) {
    const PackedWeights w = make_w8(kn.K, kn.N, seed++);
    const std::vector<float> bias = tpullm_test::random_vec(static_cast<std::size_t>(kn.N), seed);
    for (std::int64_t M : Ms)
      for (const ActQuant& aq : aqs) {
        const bool with_bias = (seed++ % 2) == 0;
        std::vector<float> x =
            tpullm_test::normal_vec(static_cast<std::size_t>(M * kn.K), 1.0f, seed++);
        if (M > 1) // a row of zeros (dynamic: scale 0; static: the zero point only)
          std::fill(x.begin() + kn.K, x.begin() + 2 * kn.K, 0.0f);
        const std::vector<float> b = with_bias ? bias : std::vector<float>{};
        const std::vector<float> ref = ref_linear(x, w, b, M, aq);
        for (const auto& p : all_paths()) {
          if (!p.available || (is_amx(p) && M < detail::kAmxMinRows))
            continue;
          if (p.amx_emulated && M * kn.K * kn.N > 800'000)
            continue; // the scalar emulator is slow: the smaller shapes only
          ForcePath force(p);
          REQUIRE(detail::w8a8_path(M) == p.expect);
          std::vector<float> y1;
          const CoreSplit splits[] = {{}, {SplitDim::cols, 2}, {SplitDim::rows, 2}};
          for (const CoreSplit& split : splits) {
            std::vector<float> y = tpullm_test::nan_vec(static_cast<std::size_t>(M * kn.N));
            linear_w8a8(x, w, b, y, {M, kn.K, kn.N}, aq, split);
            ++runs;
            const double e = rel_err(y, ref);
            INFO("path=" << p.name << " M=" << M << " K=" << kn.K << " N=" << kn.N << " "
                         << aq_name(aq) << " bias=" << with_bias << " split=" << int(split.dim)
                         << " rel err=" << e);
            REQUIRE(e <= kTol);
            if (split.dim == SplitDim::none)
              y1 = y;
            else // a split changes who computes, never what
              REQUIRE(std::memcmp(y.data(), y1.data(), y.size() * sizeof(float)) == 0);
          }
        }
      }
  }
  int vector_paths = 0; // every available path but the AMX ones runs every case and split
  for (const auto& p : all_paths())
    vector_paths += p.available && !is_amx(p) ? 1 : 0;
  INFO("runs " << runs);
  CHECK(runs > 5 * 7 * 4 * 3 * vector_paths);
}

TEST_CASE("linear_w8a8 GEMV over a long K: k-piece streams, their tail and few panels per thread",
          "[int8][matmul]") {
  using namespace w8a8_test;
  report_skipped();
  // K = 4864 (down_proj's: 1216 quads, 4 equal pieces) and 4861 (Kp 4864 with padding codes) and
  // 4870 (1218 quads: pieces of 304 plus a 2-quad tail); N = 200: 7 panels, the last one 8
  // columns wide, so 2 or 3 threads get whole panels of unequal counts
  for (const std::int64_t K : {std::int64_t{4864}, std::int64_t{4861}, std::int64_t{4870}}) {
    const std::int64_t N = 200;
    const PackedWeights w = make_w8(K, N, static_cast<std::uint32_t>(K));
    const std::vector<float> bias = tpullm_test::random_vec(static_cast<std::size_t>(N), 3);
    for (std::int64_t M = 1; M <= 4; ++M)
      for (const ActQuant& aq : {dyn(), stat(0.02f, -21)}) {
        const std::vector<float> x = tpullm_test::normal_vec(static_cast<std::size_t>(M * K), 1.0f,
                                                             static_cast<std::uint32_t>(M + K));
        const std::vector<float> ref = ref_linear(x, w, bias, M, aq);
        for (const auto& p : all_paths()) {
          if (!p.available || is_amx(p))
            continue;
          ForcePath force(p);
          for (const CoreSplit& split :
               {CoreSplit{}, CoreSplit{SplitDim::cols, 2}, CoreSplit{SplitDim::cols, 3}}) {
            std::vector<float> y = tpullm_test::nan_vec(static_cast<std::size_t>(M * N));
            linear_w8a8(x, w, bias, y, {M, K, N}, aq, split);
            const double e = rel_err(y, ref);
            INFO("path=" << p.name << " M=" << M << " K=" << K << " " << aq_name(aq)
                         << " parts=" << split.parts << " rel err=" << e);
            REQUIRE(e <= kTol);
          }
        }
      }
  }
}

TEST_CASE("linear_w8a8 extreme values: codes +-127 / -128 against weights -128 / 127",
          "[int8][matmul]") {
  using namespace w8a8_test;
  report_skipped();
  // K not a multiple of 4 or 64; every product at its largest magnitude, so a saturating or
  // wrongly sign-applied int8 multiply (VPMADDUBSW and its sign trick) would show
  const std::int64_t K = 1027, N = 45;
  const PackedWeights w = make_w8(K, N, 7, true);
  for (std::int64_t M : {1, 3, 4, 6, 17, 32}) {
    std::vector<float> x(static_cast<std::size_t>(M * K));
    std::mt19937 rng(static_cast<std::uint32_t>(M));
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t k = 0; k < K; ++k) // |x| = the row's max everywhere: q = +-127
        x[static_cast<std::size_t>(m * K + k)] = (rng() % 2 ? 1.0f : -1.0f) * float(m + 1);
    if (M > 2) // a row that is all zero
      std::fill(x.begin() + 2 * K, x.begin() + 3 * K, 0.0f);
    // static: scale so small that every code clamps to -128 or 127, zero points at both ends
    for (const ActQuant& aq : {dyn(), stat(1e-3f, 0), stat(1e-3f, -128), stat(1e-3f, 127)}) {
      const std::vector<float> ref = ref_linear(x, w, {}, M, aq);
      // the reference itself: a dynamic row of +-127 codes against +-128 / 127 weights
      for (const auto& p : all_paths()) {
        if (!p.available || (is_amx(p) && M < detail::kAmxMinRows))
          continue;
        ForcePath force(p);
        std::vector<float> y = tpullm_test::nan_vec(static_cast<std::size_t>(M * N));
        linear_w8a8(x, w, {}, y, {M, K, N}, aq, {SplitDim::cols, 2});
        const double e = rel_err(y, ref);
        INFO("path=" << p.name << " M=" << M << " " << aq_name(aq) << " rel err=" << e);
        REQUIRE(e <= kTol);
      }
    }
  }
}

TEST_CASE("linear_w8a8 reference sanity: one exact integer dot product", "[int8][matmul]") {
  using namespace w8a8_test;
  // x = [1, -1, 0.5, 0] -> dynamic codes [127, -127, 64, 0] (63.5 rounds to even 64), s = 1/127;
  // w column 0 = [-128, 127, 2, 5] with scale 0.5: sum = -16256 - 16129 + 128 = -32257
  std::vector<std::int8_t> q = {-128, 127, 2, 5};
  std::vector<float> sc = {0.5f};
  const PackedWeights w = pack_int8_per_channel(q, sc, 4, 1);
  const std::vector<float> x = {1.0f, -1.0f, 0.5f, 0.0f};
  for (const auto& p : all_paths()) {
    if (!p.available || is_amx(p))
      continue;
    ForcePath force(p);
    std::vector<float> y(1);
    linear_w8a8(x, w, {}, y, {1, 4, 1}, dyn());
    INFO("path=" << p.name);
    CHECK(y[0] == static_cast<float>(-32257) * ((1.0f / 127.0f) * 0.5f));
  }
}

TEST_CASE("linear_w8a8 over a prepared W8A8Input matches the span overload bit for bit",
          "[int8][matmul]") {
  using namespace w8a8_test;
  const std::int64_t K = 200;
  const PackedWeights wq = make_w8(K, 96, 11), wk = make_w8(K, 33, 12);
  for (std::int64_t M : {1, 4, 9}) {
    const std::vector<float> x = tpullm_test::normal_vec(static_cast<std::size_t>(M * K), 1.f, 5);
    for (const ActQuant& aq : {dyn(), stat(0.02f, 3)}) {
      const W8A8Input xin(x, M, K, aq);
      for (const PackedWeights* w : {&wq, &wk}) {
        std::vector<float> a(static_cast<std::size_t>(M * w->N)), b(a.size());
        linear_w8a8(x, *w, {}, a, {M, K, w->N}, aq);
        linear_w8a8(xin, *w, {}, b, {M, K, w->N});
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("swiglu_mlp_w8a8 equals the composition of reference W8A8 linears", "[int8][mlp]") {
  using namespace w8a8_test;
  report_skipped();
  // volatile: with the sizes as constants GCC 12 inlines silu_mul into this test and reports a
  // bogus -Waggressive-loop-optimizations on its loop
  volatile std::int64_t hidden = 72, inter = 160;
  const std::int64_t H = hidden, I = inter;
  const PackedWeights gate = make_w8(H, I, 21), up = make_w8(H, I, 22), down = make_w8(I, H, 23);
  for (std::int64_t M : {1, 3, 6, 20}) {
    const std::vector<float> x = tpullm_test::normal_vec(static_cast<std::size_t>(M * H), 1.f, 9);
    for (const ActQuant& ad : {dyn(), stat(0.05f, -5)}) {
      for (const auto& p : all_paths()) {
        if (!p.available || (is_amx(p) && M < detail::kAmxMinRows))
          continue;
        ForcePath force(p);
        // expected: the reference linears with silu_mul of the same path in between
        std::vector<float> g = ref_linear(x, gate, {}, M, dyn()),
                           u = ref_linear(x, up, {}, M, dyn());
        for (std::int64_t m = 0; m < M; ++m)
          detail::silu_mul(g.data() + m * I, u.data() + m * I, I);
        const std::vector<float> ref = ref_linear(g, down, {}, M, ad);
        // whole rows at once, and a budget of two rows per pass
        for (std::size_t budget : {std::size_t{1} << 20, std::size_t(2 * 2 * 4 * I)}) {
          for (const CoreSplit& split : {CoreSplit{}, CoreSplit{SplitDim::cols, 2}}) {
            std::vector<float> out = tpullm_test::nan_vec(static_cast<std::size_t>(M * H));
            swiglu_mlp_w8a8(x, gate, up, down, out, {M, H, I}, dyn(), ad, budget, split);
            const double e = rel_err(out, ref);
            INFO("path=" << p.name << " M=" << M << " down " << aq_name(ad) << " budget=" << budget
                         << " split=" << int(split.dim) << " rel err=" << e);
            REQUIRE(e <= kTol);
          }
        }
      }
    }
  }
  CHECK_THROWS_KIND(w8a8_mlp_row_tile({4, H, I}, 100), internal);
}

TEST_CASE("moe_mlp with W8A8 experts: each row is its chosen experts' reference W8A8 MLPs",
          "[int8][moe]") {
  // The reference runs every (row, chosen expert) pair alone (M = 1): a dynamic per-row scale
  // must not depend on which other rows the expert received, nor on the GEMV / GEMM path the
  // gathered rows take. Routing: the f32 router through moe_route, as the kernel's.
  using namespace w8a8_test;
  report_skipped();
  volatile std::int64_t hidden = 64, inter = 96; // volatile: see the swiglu_mlp_w8a8 test
  const std::int64_t H = hidden, I = inter, E = 8;
  std::vector<PackedWeights> g, u, d;
  for (std::int64_t e = 0; e < E; ++e) {
    const auto s = static_cast<std::uint32_t>(40 + 3 * e);
    g.push_back(make_w8(H, I, s));
    u.push_back(make_w8(H, I, s + 1));
    d.push_back(make_w8(I, H, s + 2));
  }
  std::vector<MoeExpert> experts;
  for (std::int64_t e = 0; e < E; ++e)
    experts.push_back({&g[e], &u[e], &d[e]});
  struct Case {
    std::int64_t M, k;
    bool hot; ///< router column 5 dominant: every row to expert 5 first (its GEMM path)
  };
  for (const Case c :
       {Case{1, 2, false}, Case{3, 2, false}, Case{37, 2, false}, Case{24, 3, true}}) {
    const std::vector<float> x =
        tpullm_test::random_vec(static_cast<std::size_t>(c.M * H), 60, c.hot ? 0.0f : -1.0f, 1.0f);
    std::vector<float> R =
        tpullm_test::random_vec(static_cast<std::size_t>(H * E), 61, -0.1f, 0.1f);
    if (c.hot)
      for (std::int64_t h = 0; h < H; ++h)
        R[static_cast<std::size_t>(h * E + 5)] = 2.0f;
    const PackedWeights router = pack_f32(R, H, E);
    const MoeShape shape{c.M, H, I, E, c.k, true};
    std::vector<float> logits(static_cast<std::size_t>(c.M * E));
    linear(x, router, {}, logits, {c.M, H, E});
    const MoeRouting route = moe_route(logits, shape);
    for (const auto& p : all_paths()) {
      if (!p.available)
        continue;
      ForcePath force(p);
      std::vector<float> ref(static_cast<std::size_t>(c.M * H), 0.0f);
      for (std::int64_t t = 0; t < c.M; ++t) {
        const std::vector<float> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
        std::vector<std::pair<std::int32_t, float>> chosen;
        for (std::int64_t j = 0; j < c.k; ++j)
          chosen.emplace_back(route.expert[static_cast<std::size_t>(t * c.k + j)],
                              route.weight[static_cast<std::size_t>(t * c.k + j)]);
        std::sort(chosen.begin(), chosen.end()); // the kernel adds experts in ascending order
        for (const auto& [e, wt] : chosen) {
          std::vector<float> ga = ref_linear(xt, g[e], {}, 1, dyn()),
                             ua = ref_linear(xt, u[e], {}, 1, dyn());
          detail::silu_mul(ga.data(), ua.data(), I);
          const std::vector<float> y = ref_linear(ga, d[e], {}, 1, dyn());
          for (std::int64_t h = 0; h < H; ++h)
            ref[static_cast<std::size_t>(t * H + h)] += wt * y[static_cast<std::size_t>(h)];
        }
      }
      if (c.hot)
        for (std::int64_t t = 0; t < c.M; ++t)
          REQUIRE(route.expert[static_cast<std::size_t>(t * c.k)] == 5);
      for (const CoreSplit& split : {CoreSplit{}, CoreSplit{SplitDim::cols, 2}}) {
        std::vector<float> out = tpullm_test::nan_vec(static_cast<std::size_t>(c.M * H));
        const MoeRouting r =
            moe_mlp(x, router, experts, out, shape, std::size_t{1} << 20, split, dyn());
        CHECK(r.expert == route.expert);
        const double e = rel_err(out, ref);
        INFO("path=" << p.name << " M=" << c.M << " k=" << c.k << " split=" << int(split.dim)
                     << " rel err=" << e);
        REQUIRE(e <= kTol);
      }
    }
  }
  // float experts refuse the W8A8 choice instead of running them as if they were int8
  const auto fw = tpullm_test::make_weights(WeightFormat::f32, H, I, 32, 7, false);
  const auto fd = tpullm_test::make_weights(WeightFormat::f32, I, H, 32, 8, false);
  const std::vector<MoeExpert> floats(static_cast<std::size_t>(E),
                                      MoeExpert{&fw.packed, &fw.packed, &fd.packed});
  const PackedWeights router = pack_f32(tpullm_test::random_vec(H * E, 9), H, E);
  std::vector<float> out(static_cast<std::size_t>(2 * H));
  CHECK_THROWS_KIND(moe_mlp(tpullm_test::random_vec(2 * H, 10), router, floats, out,
                            {2, H, I, E, 2, true}, 1 << 20, {}, dyn()),
                    internal);
}

TEST_CASE("linear_w8a8 refuses what it cannot compute", "[int8][matmul]") {
  using namespace w8a8_test;
  const PackedWeights w = make_w8(8, 4, 1);
  std::vector<float> x(16), y(8);
  CHECK_THROWS_KIND(linear_w8a8(x, w, {}, y, {2, 8, 4}, stat(0.0f, 0)), internal);
  CHECK_THROWS_KIND(linear_w8a8(x, w, {}, y, {2, 8, 4}, stat(0.1f, 128)), internal);
  CHECK_THROWS_KIND(linear_w8a8(x, w, {}, y, {2, 8, 4}, dyn(), {SplitDim::heads, 2}), internal);
  CHECK_THROWS_KIND(linear_w8a8(x, w, {}, y, {2, 7, 4}, dyn()), internal);
  std::vector<std::int8_t> q(16);
  std::vector<float> s(4, 0.1f);
  const PackedWeights grouped = pack_int8(q, s, 8, 2, 4); // two groups: not per channel
  CHECK_THROWS_KIND(linear_w8a8(x, grouped, {}, y, {2, 8, 2}, dyn()), internal);
  CHECK_THROWS_KIND(W8A8Input(x, 2, 9, dyn()), internal);
  const W8A8Input xin(x, 2, 8, dyn());
  CHECK_THROWS_KIND(linear_w8a8(xin, w, {}, y, {1, 8, 4}), internal);
}

TEST_CASE("W4A8 GEMV experiment: its formula, and its loss against the exact int4 product",
          "[int8][w4a8]") {
  if (!cpu_features().avx512_vnni) {
    WARN("SKIPPED W4A8 experiment: needs AVX-512 VNNI");
    return;
  }
  ScopedIsa isa(Isa::avx512);
  const std::int64_t K = 256, N = 200;
  std::mt19937 rng(3);
  for (std::int64_t group : {std::int64_t{64}, K})
    for (WeightFormat f : {WeightFormat::int4_sym, WeightFormat::int4_asym}) {
      const std::int64_t G = K / group;
      std::vector<std::int8_t> qs(static_cast<std::size_t>(K * N));
      std::vector<std::uint8_t> qa(qs.size()), zs(static_cast<std::size_t>(G * N));
      std::vector<float> sc(static_cast<std::size_t>(G * N));
      for (auto& v : qs)
        v = static_cast<std::int8_t>(static_cast<int>(rng() % 16) - 8);
      for (auto& v : qa)
        v = static_cast<std::uint8_t>(rng() % 16);
      for (auto& v : zs)
        v = static_cast<std::uint8_t>(rng() % 16);
      for (auto& v : sc)
        v = 0.01f + 0.001f * static_cast<float>(rng() % 10);
      const PackedWeights w = f == WeightFormat::int4_sym ? pack_int4_sym(qs, sc, K, N, group)
                                                          : pack_int4_asym(qa, sc, zs, K, N, group);
      const std::vector<float> x = tpullm_test::normal_vec(static_cast<std::size_t>(K), 1.f, 4);
      const std::vector<float> bias = tpullm_test::random_vec(static_cast<std::size_t>(N), 8);
      detail::W4A8Row r;
      std::vector<float> y(static_cast<std::size_t>(N)), ref(y.size()), exact(y.size());
      detail::w4a8_gemv_experimental(x.data(), w, bias.data(), y.data(), {SplitDim::cols, 2}, r);
      detail::w4a8_gemv_ref(r, w, bias.data(), ref.data());
      INFO(format_name(f) << " group=" << group);
      CHECK(w8a8_test::rel_err(y, ref) <= 1e-5);
      // the loss: |y - exact| <= (s_x / 2) sum_k |w[k][n]| (activation rounding) + f32 slack
      linear(x, w, bias, exact, {1, K, N});
      const std::vector<float> wd = dequantize(w);
      double worst = 0;
      for (std::int64_t n = 0; n < N; ++n) {
        double sw = 0;
        for (std::int64_t k = 0; k < K; ++k)
          sw += std::abs(double(wd[static_cast<std::size_t>(k * N + n)]));
        const double bound = 0.5 * r.sx * sw * (1 + 1e-5) + 1e-5 * std::abs(double(exact[n]));
        worst = std::max(worst, std::abs(double(y[n]) - double(exact[n])) / bound);
      }
      INFO("worst loss / bound = " << worst);
      CHECK(worst <= 1.0);
      CHECK(worst > 0.0); // lossy indeed: W4A8 is not the exact int4 path
    }
  detail::W4A8Row r;
  const PackedWeights w8 = w8a8_test::make_w8(8, 4, 1);
  std::vector<float> x(8), y(4);
  CHECK_THROWS_KIND(detail::w4a8_gemv_experimental(x.data(), w8, nullptr, y.data(), {}, r),
                    internal);
}
