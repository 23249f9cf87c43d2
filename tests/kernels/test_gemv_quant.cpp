// The weight-only int GEMV (M <= 4; int8, int8_asym, int4_sym, int4_asym, the scale-and-min
// int4_min / int8_min, and the 6-bit int6_sym / int6_min) on every path this
// CPU has, each forced explicitly: the VNNI digit path (Isa::avx512 with AVX512_VNNI; test_matmul
// reaches it only when avx512 is the machine's best ISA, not on AMX machines where the best is
// amx), the AVX-512 f32-FMA path (VNNI disabled), AVX2 and portable. Shapes are the decode ones
// that matter for speed: 1 to 9 panels (every remainder of the 4-stream grouping), groups of 32 /
// 64 / 128 rows and per channel, K = 896 (Qwen2.5-0.5B's hidden size), and x with outliers (a
// few elements 30x the rest, as real activations have), which the digit decomposition (scaled by
// each group's largest |x|) must also carry at f32-rounding level.
//
// Oracle: a double-precision product of x with the weights built from the integer codes, scales
// and zero points by the format's definition (w = q s, (u - z) s, (u - 8) s, u s - m), never
// from the library's dequantize(). Bound as in test_matmul.cpp (docs/kernels.md):
//   |y - y_ref| <= tol * sum_k |x[k]| * A[k][n],   tol = 3e-6 sqrt(K) + 1e-6,
// A = |s| (|q| + |z|), or |s| u + |m| for scale and min.
//
// XPrecision::int8 ([act_int8]): the paths that round x to one int8 digit per weight group
// (AVX-512 VNNI, and AVX2 forced onto each of its two integer-dot kernels: AVX-VNNI and
// VPMADDUBSW) are held to the same f32-rounding bound around x as that rounding defines it, must
// leave the exact bound on most outputs, and the AVX2 results must equal the VNNI ones bit for
// bit; every other path stays exact.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <cstdint>
#include <cstring>
#include <span>
#include <random>
#include <string>
#include <vector>

#include "tpullm/kernels/matmul.hpp"

#include "kernel_test_util.hpp"

using namespace tpullm;
using namespace tpullm::kernels;
using namespace tpullm_test;

namespace {

/// Quantized weights with their reference W and bound weights A (both [K, N] row-major).
struct QuantCase {
  PackedWeights packed;
  std::vector<double> w, a;
};

QuantCase make_quant(WeightFormat f, std::int64_t K, std::int64_t N, std::int64_t group,
                     std::uint32_t seed) {
  std::mt19937 rng(seed);
  const std::int64_t G = K / group;
  const auto kn = static_cast<std::size_t>(K * N);
  std::vector<float> s(static_cast<std::size_t>(G * N));
  for (auto& v : s) // scales of both signs over two decades
    v = static_cast<float>((rng() % 2 ? 1 : -1) *
                           std::ldexp(1.0 + (rng() % 1000) / 1000.0, -static_cast<int>(rng() % 7)));
  std::vector<std::uint8_t> z(static_cast<std::size_t>(G * N), 0);
  const unsigned levels = is_byte_format(f) ? 256 : is_six_format(f) ? 64 : 16;
  if (has_zeros(f))
    for (auto& v : z)
      v = static_cast<std::uint8_t>(rng() % levels);
  std::vector<std::uint8_t> u(kn);
  for (auto& v : u)
    v = static_cast<std::uint8_t>(rng() % levels);
  QuantCase c;
  c.w.resize(kn);
  c.a.resize(kn);
  if (has_mins(f)) { // mins of either sign up to the largest |u s| of the column's group
    std::vector<float> m(s.size());
    for (std::size_t i = 0; i < m.size(); ++i)
      m[i] = static_cast<float>((static_cast<double>(rng() % 2001) / 1000.0 - 1.0) *
                                std::abs(s[i]) * (levels - 1));
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n) {
        const std::size_t i = static_cast<std::size_t>(k * N + n);
        const std::size_t gi = static_cast<std::size_t>((k / group) * N + n);
        c.w[i] = double(u[i]) * double(s[gi]) - double(m[gi]);
        c.a[i] = std::abs(double(s[gi])) * u[i] + std::abs(double(m[gi]));
      }
    c.packed = f == WeightFormat::int4_min   ? pack_int4_min(u, s, m, K, N, group)
               : f == WeightFormat::int6_min ? pack_int6_min(u, s, m, K, N, group)
                                             : pack_int8_min(u, s, m, K, N, group);
    return c;
  }
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::size_t i = static_cast<std::size_t>(k * N + n);
      const std::size_t gi = static_cast<std::size_t>((k / group) * N + n);
      double q = 0, zz = 0; // w = (q - zz) * s
      switch (f) {
      case WeightFormat::int8:
        q = static_cast<double>(static_cast<int>(u[i]) - 128);
        break;
      case WeightFormat::int4_sym:
        q = u[i];
        zz = 8;
        break;
      case WeightFormat::int6_sym:
        q = u[i];
        zz = 32;
        break;
      default:
        q = u[i];
        zz = z[gi];
        break;
      }
      c.w[i] = (q - zz) * double(s[gi]);
      c.a[i] = std::abs(double(s[gi])) * (std::abs(q) + zz);
    }
  switch (f) {
  case WeightFormat::int8: {
    std::vector<std::int8_t> q(kn);
    for (std::size_t i = 0; i < kn; ++i)
      q[i] = static_cast<std::int8_t>(static_cast<int>(u[i]) - 128);
    c.packed = pack_int8(q, s, K, N, group);
    break;
  }
  case WeightFormat::int8_asym:
    c.packed = pack_int8_asym(u, s, z, K, N, group);
    break;
  case WeightFormat::int4_sym: {
    std::vector<std::int8_t> q(kn);
    for (std::size_t i = 0; i < kn; ++i)
      q[i] = static_cast<std::int8_t>(static_cast<int>(u[i]) - 8);
    c.packed = pack_int4_sym(q, s, K, N, group);
    break;
  }
  case WeightFormat::int4_asym:
    c.packed = pack_int4_asym(u, s, z, K, N, group);
    break;
  case WeightFormat::int6_sym: {
    std::vector<std::int8_t> q(kn);
    for (std::size_t i = 0; i < kn; ++i)
      q[i] = static_cast<std::int8_t>(static_cast<int>(u[i]) - 32);
    c.packed = pack_int6_sym(q, s, K, N, group);
    break;
  }
  default:
    break;
  }
  return c;
}

/// x [M, K]: N(0, 1) with every 97th element 30x larger (outliers set each group's digit scale).
std::vector<float> outlier_x(std::int64_t M, std::int64_t K, std::uint32_t seed) {
  std::vector<float> x = normal_vec(static_cast<std::size_t>(M * K), 1.0f, seed);
  for (std::size_t i = 5; i < x.size(); i += 97)
    x[i] *= 30.0f;
  return x;
}

struct GemvPath {
  Isa isa;
  bool no_vnni;
  const char* name;
  bool no_avx_vnni = false;  ///< AVX2 with XPrecision::int8: VPMADDUBSW instead of AVX-VNNI
  bool amx_emulated = false; ///< the AMX path on the tile emulator (M >= kAmxMinRows)
  bool amx_int_body = false; ///< the tile unit forced onto the AMX-INT8 body (amx_int_forced)
};

/// The tile unit's int8-activation paths where the CPU has AMX: as dispatched (the x8 kernel from
/// kAmxX8MinRows rows), and forced onto the AMX-INT8 body (from kAmxMinRows rows; the x8 kernel
/// at 16). Warns SKIPPED without AMX.
std::vector<GemvPath> amx_tile_paths() {
  if (!cpu_features().amx) {
    WARN("SKIPPED the int8-activation paths on the tile unit: this CPU lacks AMX");
    return {};
  }
  return {{Isa::amx, false, "amx tile unit (x8)"},
          {Isa::amx, false, "amx tile unit, AMX-INT8 body", false, false, true}};
}

/// Every int GEMV path this CPU can run, each named.
std::vector<GemvPath> gemv_paths() {
  std::vector<GemvPath> p{{Isa::portable, false, "portable"}};
  const auto& f = cpu_features();
  if (f.avx2)
    p.push_back({Isa::avx2, false, "avx2"});
  if (vector_isa(f.best()) == Isa::avx512) {
    p.push_back({Isa::avx512, true, "avx512 f32-FMA"});
    if (f.avx512_vnni)
      p.push_back({Isa::avx512, false, "avx512 VNNI digits"});
  }
  return p;
}

/// gemv_paths() plus, for XPrecision::int8, the AVX2 integer-dot kernels both ways: "avx2"
/// forced onto VPMADDUBSW and "avx2 AVX-VNNI" (where the CPU has it). Warns SKIPPED for a
/// variant this CPU lacks.
std::vector<GemvPath> int8_paths() {
  std::vector<GemvPath> p;
  const auto& f = cpu_features();
  for (GemvPath g : gemv_paths()) {
    if (g.isa == Isa::avx2) {
      g.no_avx_vnni = true;
      g.name = "avx2 VPMADDUBSW";
      p.push_back(g);
      if (f.avx_vnni)
        p.push_back({Isa::avx2, false, "avx2 AVX-VNNI"});
      continue;
    }
    p.push_back(g);
  }
  if (!f.avx2)
    WARN("SKIPPED the AVX2 int8-activation GEMV: this CPU has no AVX2");
  else if (!f.avx_vnni)
    WARN("SKIPPED the AVX2 AVX-VNNI int8-activation GEMV: this CPU has no AVX-VNNI");
  return p;
}

/// Whether `p` rounds x to int8 under XPrecision::int8 for M rows (the digit kernels of AVX-512
/// VNNI and AVX2; AMX-INT8 with one digit from kAmxMinRows rows, the VNNI GEMV below them).
bool path_rounds(const GemvPath& p, std::int64_t M) {
  if (p.amx_emulated)
    return M >= detail::kAmxMinRows || (p.isa == Isa::avx512 && !p.no_vnni);
  return ((p.isa == Isa::avx512 || p.isa == Isa::amx) && !p.no_vnni) || p.isa == Isa::avx2;
}

/// Forces a path's ISA and test hooks for a scope.
class ScopedPath {
public:
  explicit ScopedPath(const GemvPath& p) : isa_(p.isa) {
    detail::vnni_disabled() = p.no_vnni;
    detail::avx_vnni_gemv_disabled() = p.no_avx_vnni;
    if (p.amx_emulated)
      emu_.emplace();
    detail::amx_int_forced() = p.amx_int_body; // AMX-INT8 on the tile unit, where asked
  }
  ~ScopedPath() {
    detail::amx_int_forced() = false;
    detail::vnni_disabled() = false;
    detail::avx_vnni_gemv_disabled() = false;
  }
  ScopedPath(const ScopedPath&) = delete;
  ScopedPath& operator=(const ScopedPath&) = delete;

private:
  ScopedIsa isa_;
  std::optional<amx::ScopedEmulation> emu_;
};

} // namespace

TEST_CASE("int GEMV (M <= 4) matches the codes' double product on every path, stream remainders "
          "and groupings included",
          "[matmul][gemv_quant]") {
  struct Shape {
    std::int64_t K, group;
  };
  const Shape shapes[] = {{896, 128}, {896, 64}, {896, 896}, {256, 32}, {200, 40}, {256, 16}};
  const WeightFormat formats[] = {WeightFormat::int8,     WeightFormat::int8_asym,
                                  WeightFormat::int4_sym, WeightFormat::int4_asym,
                                  WeightFormat::int4_min, WeightFormat::int8_min,
                                  WeightFormat::int6_sym, WeightFormat::int6_min};
  const std::int64_t panel_counts[] = {1, 2, 3, 4, 5, 7, 9};
  const CoreSplit splits[] = {{SplitDim::none, 1}, {SplitDim::cols, 2}};
  const auto paths = gemv_paths();
  int runs = 0;
  std::uint32_t seed = 1;
  for (WeightFormat f : formats)
    for (const Shape& sh : shapes)
      for (std::int64_t P : panel_counts) {
        if (sh.group % row_group(f) != 0 && sh.group != sh.K)
          continue;
        const std::int64_t N = 32 * P - (P % 2) * 7; // odd panel counts end in a partial panel
        const QuantCase qc = make_quant(f, sh.K, N, sh.group, ++seed);
        const double tol = matmul_tol(sh.K);
        for (std::int64_t M = 1; M <= 4; M += (P % 3 == 0 ? 1 : 3)) {
          const auto x = outlier_x(M, sh.K, seed * 7);
          std::vector<double> ref(static_cast<std::size_t>(M * N)), bnd(ref.size());
          for (std::int64_t m = 0; m < M; ++m)
            for (std::int64_t n = 0; n < N; ++n) {
              double s = 0, b = 0;
              for (std::int64_t k = 0; k < sh.K; ++k) {
                const std::size_t i = static_cast<std::size_t>(k * N + n);
                s += double(x[static_cast<std::size_t>(m * sh.K + k)]) * qc.w[i];
                b += std::abs(double(x[static_cast<std::size_t>(m * sh.K + k)])) * qc.a[i];
              }
              ref[static_cast<std::size_t>(m * N + n)] = s;
              bnd[static_cast<std::size_t>(m * N + n)] = tol * b + 1e-30;
            }
          for (const GemvPath& path : paths)
            for (const CoreSplit& split : splits) {
              ScopedIsa scoped(path.isa);
              detail::vnni_disabled() = path.no_vnni;
              std::vector<float> y = nan_vec(static_cast<std::size_t>(M * N));
              linear(x, qc.packed, {}, y, {M, sh.K, N}, split);
              detail::vnni_disabled() = false;
              ++runs;
              std::int64_t bad = 0;
              double worst = 0;
              for (std::size_t i = 0; i < y.size(); ++i) {
                const double err = std::abs(double(y[i]) - ref[i]);
                if (!(err <= bnd[i]))
                  ++bad;
                worst = std::max(worst, std::isfinite(err) ? err / bnd[i] : 1e9);
              }
              INFO(format_name(f) << " K=" << sh.K << " g=" << sh.group << " N=" << N << " M=" << M
                                  << " path=" << path.name << " split=" << int(split.dim)
                                  << " worst err / bound=" << worst);
              REQUIRE(bad == 0);
            }
        }
      }
  INFO("runs " << runs);
  CHECK(runs >= 200);
}

namespace {

/// x rounded as XPrecision::int8 defines it, per group of `group` elements of each row:
/// s1 = max|x| / 127 (f32), h = round-to-nearest-even(x * (127 / max|x|)) in [-127, 127],
/// x ~= s1 * h (returned in double).
std::vector<double> int8_rounded_x(const std::vector<float>& x, std::int64_t M, std::int64_t K,
                                   std::int64_t group) {
  std::vector<double> q(x.size());
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t g0 = 0; g0 < K; g0 += group) {
      const std::int64_t g1 = std::min(K, g0 + group);
      float mx = 0;
      for (std::int64_t k = g0; k < g1; ++k)
        mx = std::max(mx, std::abs(x[static_cast<std::size_t>(m * K + k)]));
      const float s1 = mx / 127.0f, inv1 = 127.0f / mx;
      for (std::int64_t k = g0; k < g1; ++k) {
        const std::size_t i = static_cast<std::size_t>(m * K + k);
        const float h = std::clamp(std::nearbyint(x[i] * inv1), -127.0f, 127.0f);
        q[i] = mx > 0 ? double(s1) * double(h) : 0.0;
      }
    }
  return q;
}

} // namespace

TEST_CASE("x digits: the AVX2 one-digit builder gives make_x_digits' digits, scales and sums",
          "[matmul][gemv_quant][act_int8]") {
  if (!cpu_features().avx512 || !cpu_features().avx2) {
    WARN("SKIPPED: the comparison needs both AVX-512 and AVX2");
    return;
  }
  struct Case {
    std::int64_t M, Kv, seg, Kx;
  };
  // tails of 1..7 elements, padding columns (Kx < Kv), a per-channel group, an all-zero row
  for (const Case& c : {Case{3, 896, 32, 896}, Case{2, 200, 40, 197}, Case{1, 264, 264, 259},
                        Case{4, 96, 16, 96}, Case{2, 43, 43, 43}}) {
    auto x = outlier_x(c.M, c.Kx, 11 + static_cast<std::uint32_t>(c.Kv));
    if (c.M == 4)
      std::fill(x.begin() + c.Kx, x.begin() + 2 * c.Kx, 0.0f);
    detail::XDigits a, b;
    detail::make_x_digits(x.data(), c.Kx, c.M, c.Kv, c.seg, a, c.Kx, 1);
    detail::make_x_digit1_avx2(x.data(), c.Kx, c.M, c.Kv, c.seg, b, c.Kx);
    INFO("M=" << c.M << " Kv=" << c.Kv << " seg=" << c.seg << " Kx=" << c.Kx);
    REQUIRE(b.nd == 1);
    CHECK(a.d == b.d);
    CHECK(a.S == b.S);
    CHECK(std::memcmp(a.s1.data(), b.s1.data(), a.s1.size() * sizeof(float)) == 0);
    CHECK(a.s1.size() == b.s1.size());
    CHECK((a.Gv == b.Gv && a.Kv == b.Kv && a.M == b.M && a.seg == b.seg));
  }
}

TEST_CASE("int GEMV with XPrecision::int8: the VNNI and AVX2 integer-dot paths round x to int8 "
          "per weight group, every other path stays exact",
          "[matmul][gemv_quant][act_int8]") {
  struct Shape {
    std::int64_t K, group;
  };
  const Shape shapes[] = {{896, 32}, {896, 128}, {256, 256}};
  const WeightFormat formats[] = {WeightFormat::int8,     WeightFormat::int8_asym,
                                  WeightFormat::int4_sym, WeightFormat::int4_asym,
                                  WeightFormat::int4_min, WeightFormat::int8_min,
                                  WeightFormat::int6_sym, WeightFormat::int6_min};
  auto paths = int8_paths();
  // AMX-INT8 takes XPrecision::int8 from kAmxMinRows rows with the same one-digit rounding: on
  // the tile emulator (any CPU) and on the tile unit where the CPU has one
  paths.push_back({Isa::portable, false, "amx emulator", false, true});
  for (const GemvPath& p : amx_tile_paths())
    paths.push_back(p);
  bool vnni_ran = false;
  int cases = 0, avx2_ran = 0, avx2_same_bits = 0, amx_same_bits = 0, x8_runs = 0;
  std::uint32_t seed = 500;
  for (WeightFormat f : formats)
    for (const Shape& sh : shapes)
      for (std::int64_t P : {1, 5}) {
        const std::int64_t N = 32 * P - (P % 2) * 7;
        const QuantCase qc = make_quant(f, sh.K, N, sh.group, ++seed);
        const double tol = matmul_tol(sh.K);
        // 1 and 3: the decode GEMV; 6 to 130: prompts (up to kVnniInt8MaxRows rows), every
        // remainder of the 4- and 2-row passes and of the 64-row blocks (kVnniRowBlock)
        for (std::int64_t M : {1, 2, 3, 4, 6, 13, 16, 64, 65, 130}) {
          if (M > 4 && P > 1 && sh.group != 32)
            continue; // (bounded work: the larger M on one shape per format)
          const auto x = outlier_x(M, sh.K, seed * 7);
          const auto xq = int8_rounded_x(x, M, sh.K, sh.group);
          // ref: x exact; refq: x as the int8 rounding gives it. Bounds of f32 rounding on each.
          std::vector<double> ref(static_cast<std::size_t>(M * N)), refq(ref.size()),
              bnd(ref.size()), bndq(ref.size());
          for (std::int64_t m = 0; m < M; ++m)
            for (std::int64_t n = 0; n < N; ++n) {
              double s = 0, sq = 0, b = 0, bq = 0;
              for (std::int64_t k = 0; k < sh.K; ++k) {
                const std::size_t i = static_cast<std::size_t>(k * N + n);
                const std::size_t xi = static_cast<std::size_t>(m * sh.K + k);
                s += double(x[xi]) * qc.w[i];
                sq += xq[xi] * qc.w[i];
                b += std::abs(double(x[xi])) * qc.a[i];
                bq += std::abs(xq[xi]) * qc.a[i];
              }
              const std::size_t o = static_cast<std::size_t>(m * N + n);
              ref[o] = s;
              refq[o] = sq;
              bnd[o] = tol * b + 1e-30;
              bndq[o] = tol * bq + 1e-30;
            }
          ++cases;
          std::vector<float> y_vnni; // the AVX-512 VNNI result, where that path ran
          std::vector<std::pair<const char*, std::vector<float>>> avx2_ys;
          for (const GemvPath& path : paths) {
            const bool rounds = path_rounds(path, M) && M <= detail::kVnniInt8MaxRows;
            std::vector<float> y = nan_vec(static_cast<std::size_t>(M * N));
            std::vector<float> y2 = nan_vec(y.size());
            const std::int64_t x8_calls = detail::amx_x8_calls().load();
            {
              ScopedPath scoped(path);
              linear(x, qc.packed, {}, y, {M, sh.K, N}, {SplitDim::cols, 2}, XPrecision::int8);
              // the prepared-input overload takes the same precision
              const LinearInput in(x, M, sh.K, XPrecision::int8);
              linear(in, qc.packed, {}, y2, {M, sh.K, N}, {SplitDim::cols, 2});
            }
            if (rounds && path.isa == Isa::avx512 && !path.amx_emulated) {
              vnni_ran = true;
              y_vnni = y;
            }
            if (path.isa == Isa::amx) {
              // the x8 kernel runs from kAmxX8MinRows rows (up to 16 rows only for groups of <=
              // 64, where it gives the GEMV's bits); forced onto the AMX-INT8 body, at 16 rows
              // only (the body takes 17 and more)
              const bool want = M >= detail::kAmxX8MinRows &&
                                (M > kDecodeArithmeticRows || sh.group <= 64) &&
                                (!path.amx_int_body || M <= kDecodeArithmeticRows);
              INFO(format_name(f) << " g=" << sh.group << " M=" << M << " path=" << path.name);
              const bool ran = detail::amx_x8_calls().load() > x8_calls;
              CHECK(ran == want);
              x8_runs += ran;
            }
            // AMX-INT8 at one digit forms the VNNI kernels' int32 group sums and f32 steps: the
            // same bits (on the emulator from kAmxMinRows rows; on the tile unit every row count)
            const bool on_tiles = path.amx_emulated || path.isa == Isa::amx;
            if (rounds && on_tiles && !y_vnni.empty()) {
              INFO(format_name(f) << " K=" << sh.K << " g=" << sh.group << " N=" << N << " M=" << M
                                  << " path=" << path.name << " against avx512 VNNI");
              CHECK(std::memcmp(y.data(), y_vnni.data(), y.size() * sizeof(float)) == 0);
              ++amx_same_bits;
            }
            if (rounds && path.isa == Isa::avx2) {
              ++avx2_ran;
              avx2_ys.emplace_back(path.name, y);
            }
            const auto& want = rounds ? refq : ref;
            const auto& bound = rounds ? bndq : bnd;
            std::int64_t bad = 0, off_exact = 0;
            for (std::size_t i = 0; i < y.size(); ++i) {
              bad += !(std::abs(double(y[i]) - want[i]) <= bound[i]);
              bad += y2[i] != y[i];
              off_exact += !(std::abs(double(y[i]) - ref[i]) <= bnd[i]);
            }
            INFO(format_name(f) << " K=" << sh.K << " g=" << sh.group << " N=" << N << " M=" << M
                                << " path=" << path.name << " off the exact bound: " << off_exact);
            REQUIRE(bad == 0);
            if (rounds) // the rounding really happened: most outputs leave the exact bound
              CHECK(off_exact * 2 > static_cast<std::int64_t>(y.size()));
          }
          // the AVX2 kernels form the VNNI kernels' int32 group sums and f32 steps: same bits
          for (const auto& [name, y] : avx2_ys) {
            if (y_vnni.empty())
              break;
            INFO(format_name(f) << " K=" << sh.K << " g=" << sh.group << " N=" << N << " M=" << M
                                << " path=" << name << " against avx512 VNNI");
            CHECK(std::memcmp(y.data(), y_vnni.data(), y.size() * sizeof(float)) == 0);
            ++avx2_same_bits;
          }
        }
      }
  if (!vnni_ran)
    WARN("SKIPPED the int8-activation VNNI GEMV: this CPU has no AVX512_VNNI");
  else if (avx2_ran > 0)
    CHECK(avx2_same_bits == avx2_ran);
  INFO("cases " << cases << ", AVX2 integer-dot runs " << avx2_ran << ", AMX runs compared "
                << amx_same_bits);
  if (vnni_ran) // the emulator's rows past kAmxMinRows at least: 65 and 130 per format
    CHECK(amx_same_bits >= 2 * static_cast<int>(std::size(formats)));
  if (cpu_features().amx) // 16, 64, 65 and 130 rows on the x8 kernel per format
    CHECK(x8_runs >= 4 * static_cast<int>(std::size(formats)));
  if (cpu_features().avx2)
    CHECK(avx2_ran == cases * (cpu_features().avx_vnni ? 2 : 1));
}

TEST_CASE("int GEMV with XPrecision::int8: a row's result does not depend on the rows beside it",
          "[matmul][gemv_quant][act_int8]") {
  // Speculative decoding checks draft tokens in one multi-row call and promises the answer of
  // one-row decode steps: with x rounded per row and group and exact int32 sums, every row
  // count (the 4-stream single-row kernel, the 4-, 2- and 1-row passes, the 64-row blocks) must
  // give each row the same bits, on every path that rounds (AVX-512 VNNI, AVX2 both ways).
  int rounding_paths = 0;
  auto paths = int8_paths();
  for (const GemvPath& p : amx_tile_paths()) // the x8 kernel from 16 rows, the GEMV below
    if (!p.amx_int_body)
      paths.push_back(p);
  for (const GemvPath& path : paths) {
    if (!path_rounds(path, 1))
      continue;
    ++rounding_paths;
    ScopedPath scoped(path);
    for (WeightFormat f : {WeightFormat::int4_sym, WeightFormat::int4_min, WeightFormat::int8,
                           WeightFormat::int8_asym}) {
      const std::int64_t K = 896, N = 153, M = 70;
      const QuantCase qc = make_quant(f, K, N, 32, 900 + static_cast<std::uint32_t>(f));
      const auto x = outlier_x(M, K, 77);
      std::vector<float> all = nan_vec(static_cast<std::size_t>(M * N));
      linear(x, qc.packed, {}, all, {M, K, N}, {SplitDim::cols, 2}, XPrecision::int8);
      for (std::int64_t m : {0, 3, 5, 64, 69}) {
        for (std::int64_t rows : {1, 2, 3, 5, 16}) {
          if (m + rows > M)
            continue;
          std::vector<float> y = nan_vec(static_cast<std::size_t>(rows * N));
          linear(std::span<const float>(x).subspan(static_cast<std::size_t>(m * K),
                                                   static_cast<std::size_t>(rows * K)),
                 qc.packed, {}, y, {rows, K, N}, {SplitDim::cols, 2}, XPrecision::int8);
          INFO(path.name << " " << format_name(f) << " rows " << m << ".." << m + rows - 1
                         << " alone vs in " << M);
          CHECK(std::memcmp(y.data(), all.data() + m * N, y.size() * sizeof(float)) == 0);
        }
      }
    }
  }
  if (rounding_paths == 0)
    WARN("SKIPPED: this CPU has neither the AVX-512 VNNI nor the AVX2 int8-activation path");
}

TEST_CASE("int GEMV with XPrecision::int8: a NaN or infinite input gives NaN, not a zeroed group",
          "[matmul][gemv_quant][act_int8]") {
  // The exact path propagates a non-finite x into its row's outputs; the rounding paths must not
  // silently drop the group that holds it (its scale is NaN, so every output of the row is).
  auto paths = int8_paths();
  for (const GemvPath& p : amx_tile_paths())
    paths.push_back(p);
  for (const GemvPath& path : paths) {
    ScopedPath scoped(path);
    for (WeightFormat f : {WeightFormat::int4_sym, WeightFormat::int8}) {
      const std::int64_t K = 256, N = 40;
      const QuantCase qc = make_quant(f, K, N, 32, 31 + static_cast<std::uint32_t>(f));
      for (std::int64_t M : {1, 4, 9, 20}) { // a GEMV row, a 4-row pass, prompt blocks
        for (float bad :
             {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
          auto x = outlier_x(M, K, 5);
          x[static_cast<std::size_t>((M - 1) * K + 37)] = bad; // the last row, group 1
          std::vector<float> y = nan_vec(static_cast<std::size_t>(M * N));
          linear(x, qc.packed, {}, y, {M, K, N}, {SplitDim::cols, 2}, XPrecision::int8);
          INFO(path.name << " " << format_name(f) << " M " << M << " x " << bad);
          std::int64_t finite_last = 0, nonfinite_other = 0;
          for (std::int64_t m = 0; m < M; ++m)
            for (std::int64_t n = 0; n < N; ++n) {
              const bool fin = std::isfinite(y[static_cast<std::size_t>(m * N + n)]);
              finite_last += m == M - 1 && fin;
              nonfinite_other += m < M - 1 && !fin;
            }
          CHECK(finite_last == 0);
          CHECK(nonfinite_other == 0);
        }
      }
    }
  }
}
