// RoPE tables and rotation. Tables: compared with a double evaluation of the HF formulas; the
// f32 rounding of inv_freq (pow, reciprocal) and of the angle (HF does the same) allows
// |err| <= 2^-22 * angle + 2e-7. Rotation: against
// a double rotation that uses the table values, |err| <= 1e-6 * max(1, |ref|).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tpullm/kernels/rope_gather.hpp"

#include "kernel_test_util.hpp"

namespace {

using namespace tpullm::kernels;
using namespace tpullm_test;

std::vector<double> ref_inv_freq(std::int64_t d, double theta, const RopeScaling& sc) {
  std::vector<double> inv(static_cast<std::size_t>(d / 2));
  for (std::int64_t i = 0; i < d / 2; ++i)
    inv[static_cast<std::size_t>(i)] = 1.0 / std::pow(theta, 2.0 * i / static_cast<double>(d));
  for (double& f : inv) {
    if (sc.kind == RopeScaling::Kind::linear)
      f /= sc.factor;
    if (sc.kind == RopeScaling::Kind::llama3) {
      const double old = static_cast<double>(sc.original_max_position_embeddings);
      const double wl = 2 * M_PI / f;
      if (wl > old / sc.low_freq_factor)
        f /= sc.factor;
      else if (wl >= old / sc.high_freq_factor) {
        const double sm =
            (old / wl - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
        f = (1 - sm) * f / sc.factor + sm * f;
      }
    }
  }
  return inv;
}

void check_tables(std::int64_t seq, std::int64_t d, double theta, const RopeScaling& sc) {
  const RopeTables t = build_rope_tables(seq, d, theta, sc);
  REQUIRE(t.half_dim == d / 2);
  REQUIRE(t.cos.size() == static_cast<std::size_t>(seq * d / 2));
  const auto inv = ref_inv_freq(d, theta, sc);
  double worst = 0;
  for (std::int64_t p = 0; p < seq; ++p)
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const double ang = static_cast<double>(p) * inv[static_cast<std::size_t>(i)];
      const double tol = std::ldexp(ang, -22) + 2e-7;
      const auto e = static_cast<std::size_t>(p * (d / 2) + i);
      worst = std::max(worst, std::abs(t.cos[e] - std::cos(ang)) / tol);
      worst = std::max(worst, std::abs(t.sin[e] - std::sin(ang)) / tol);
    }
  INFO("seq=" << seq << " d=" << d << " theta=" << theta << " worst/tol=" << worst);
  CHECK(worst <= 1.0);
}

} // namespace

TEST_CASE("rope tables follow the HF formulas", "[kernels][rope]") {
  check_tables(64, 64, 10000.0, {});
  check_tables(300, 128, 1000000.0, {});
  check_tables(50, 80, 10000.0, {RopeScaling::Kind::linear, 4.0});
  RopeScaling l3{RopeScaling::Kind::llama3, 8.0, 1.0, 4.0, 8192};
  check_tables(200, 128, 500000.0, l3);
  // llama3 regimes: highest frequency unchanged, lowest divided by factor
  const auto inv = rope_inv_freq(128, 500000.0, l3);
  CHECK(inv[0] == 1.0f);
  const double base_last = 1.0 / std::pow(500000.0, 126.0 / 128.0);
  CHECK(inv[63] == Approx(base_last / 8.0).epsilon(1e-6));
  CHECK_THROWS_KIND(build_rope_tables(10, 63, 10000.0), invalid_input);
  CHECK_THROWS_KIND(build_rope_tables(0, 64, 10000.0), invalid_input);
  CHECK_THROWS_KIND(rope_inv_freq(64, 10000.0, {RopeScaling::Kind::llama3, 8.0, 4.0, 1.0, 8192}),
                    invalid_input);
}

TEST_CASE("rope_apply rotates halves and interleaved pairs", "[kernels][rope]") {
  const float nan = kNaN;
  for (std::int64_t d : {2, 32, 64, 80, 128})
    for (RopeMode mode : {RopeMode::halves, RopeMode::interleaved}) {
      const std::int64_t L = 5, heads = 3, seq = 40;
      const RopeTables t = build_rope_tables(seq, d, 10000.0);
      std::vector<std::int32_t> pos{7, 0, 39, 12, 13};
      std::mt19937 rng(static_cast<unsigned>(d));
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<float> x(static_cast<std::size_t>(L * heads * d));
      for (auto& e : x)
        e = nd(rng);
      std::vector<double> ref(x.size());
      const std::int64_t half = d / 2;
      for (std::int64_t l = 0; l < L; ++l)
        for (std::int64_t h = 0; h < heads; ++h)
          for (std::int64_t i = 0; i < half; ++i) {
            const auto ti = static_cast<std::size_t>(pos[static_cast<std::size_t>(l)] * half + i);
            const double c = t.cos[ti], s = t.sin[ti];
            const std::int64_t base = (l * heads + h) * d;
            const std::int64_t a = mode == RopeMode::halves ? base + i : base + 2 * i;
            const std::int64_t b = mode == RopeMode::halves ? base + i + half : base + 2 * i + 1;
            const double xa = x[static_cast<std::size_t>(a)], xb = x[static_cast<std::size_t>(b)];
            ref[static_cast<std::size_t>(a)] = xa * c - xb * s;
            ref[static_cast<std::size_t>(b)] = xb * c + xa * s;
          }
      for (Isa isa : isas_to_test()) {
        ScopedIsa guard(isa);
        std::vector<float> y(x.size(), nan), z = x;
        rope_apply(x, y, pos, t, {L, heads, d}, mode, {SplitDim::rows, 2});
        rope_apply(std::span<float>(z), pos, t, {L, heads, d}, mode);
        double worst = 0;
        for (std::size_t e = 0; e < x.size(); ++e) {
          worst = std::max(worst, rel_err(y[e], ref[e]));
          if (std::isnan(y[e]))
            worst = 1e9;
        }
        INFO("d=" << d << " mode=" << (mode == RopeMode::halves ? "halves" : "interleaved")
                  << " isa=" << isa_name(isa) << " worst=" << worst);
        CHECK(worst <= 1e-6);
        CHECK(z == y);
      }
    }
}

TEST_CASE("rope position errors are thrown, not clamped", "[kernels][rope]") {
  const RopeTables t = build_rope_tables(16, 8, 10000.0);
  std::vector<float> x(2 * 1 * 8, 1.f);
  std::vector<std::int32_t> ok{0, 15}, past{0, 16}, neg{-1, 0};
  CHECK_NOTHROW(rope_apply(std::span<float>(x), ok, t, {2, 1, 8}, RopeMode::halves));
  CHECK_THROWS_KIND(rope_apply(std::span<float>(x), past, t, {2, 1, 8}, RopeMode::halves),
                    invalid_input);
  CHECK_THROWS_KIND(rope_apply(std::span<float>(x), neg, t, {2, 1, 8}, RopeMode::halves),
                    invalid_input);
  CHECK_THROWS_KIND(rope_apply(std::span<float>(x), ok, t, {2, 2, 4}, RopeMode::halves), internal);
  std::vector<float> small(15);
  CHECK_THROWS_KIND(rope_apply(std::span<float>(small), ok, t, {2, 1, 8}, RopeMode::halves),
                    internal);
}

TEST_CASE("rope_to_kv_cache writes rotated keys into their slots", "[kernels][rope]") {
  const float nan = kNaN;
  const std::int64_t L = 3, kvh = 2, d = 64, cap = 20;
  const RopeTables t = build_rope_tables(32, d, 10000.0);
  std::vector<float> k(static_cast<std::size_t>(L * kvh * d));
  for (std::size_t i = 0; i < k.size(); ++i)
    k[i] = std::sin(static_cast<float>(i));
  std::vector<std::int32_t> pos{10, 11, 12};
  std::vector<float> rotated(k.size());
  rope_apply(k, rotated, pos, t, {L, kvh, d}, RopeMode::halves);
  const std::int64_t row = kvh * d;
  for (bool explicit_slots : {false, true}) {
    for (RopeMode mode : {RopeMode::halves, RopeMode::interleaved}) {
      std::vector<float> expect(k.size());
      rope_apply(k, expect, pos, t, {L, kvh, d}, mode);
      std::vector<float> cache(static_cast<std::size_t>(cap * row), nan);
      std::vector<std::int32_t> slots =
          explicit_slots ? std::vector<std::int32_t>{2, 3, 19} : std::vector<std::int32_t>{};
      rope_to_kv_cache(k, cache, cap, pos, slots, t, {L, kvh, d}, mode);
      for (std::int64_t s = 0; s < cap; ++s) {
        std::int64_t src = -1;
        for (std::int64_t l = 0; l < L; ++l)
          if ((explicit_slots ? slots[static_cast<std::size_t>(l)]
                              : pos[static_cast<std::size_t>(l)]) == s)
            src = l;
        for (std::int64_t e = 0; e < row; ++e) {
          const float got = cache[static_cast<std::size_t>(s * row + e)];
          if (src < 0)
            CHECK(std::isnan(got));
          else
            CHECK(got == expect[static_cast<std::size_t>(src * row + e)]);
        }
      }
    }
  }
  std::vector<float> cache(static_cast<std::size_t>(cap * row));
  std::vector<std::int32_t> bad_slots{0, 1, 20};
  CHECK_THROWS_KIND(
      rope_to_kv_cache(k, cache, cap, pos, bad_slots, t, {L, kvh, d}, RopeMode::halves),
      invalid_input);
  std::vector<std::int32_t> far{10, 11, 25}; // inside the table, outside the cache
  CHECK_THROWS_KIND(rope_to_kv_cache(k, cache, cap, far, {}, t, {L, kvh, d}, RopeMode::halves),
                    invalid_input);
}
