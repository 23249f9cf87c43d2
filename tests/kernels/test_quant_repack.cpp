// GPTQ / AWQ unpacking and repacking, on synthetic checkpoints made by reference packers written
// from the format descriptions (GPTQ: nibbles along K, v1 zeros; AWQ: nibbles along N in the order
// 0,2,4,6,1,3,5,7), including act-order g_idx.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tpullm/conversion/quant_repack.hpp"
#include "tpullm/kernels/matmul.hpp"

#include "kernel_test_util.hpp"

using namespace tpullm;
using namespace tpullm::conversion;
using namespace tpullm::kernels;
using namespace tpullm_test;

namespace {

struct Synthetic {
  std::int64_t K, N, group;
  std::vector<std::uint8_t> q;     // [K, N]
  std::vector<std::uint8_t> zeros; // [G, N]
  std::vector<std::uint16_t> scales_f16;
  std::vector<std::int32_t> g_idx;
};

// zmin = 1 for GPTQ v1 (a real zero of 0 would be stored as -1, which v1 cannot hold).
Synthetic make_synthetic(std::int64_t K, std::int64_t N, std::int64_t group, bool sym,
                         bool act_order, std::uint32_t seed, int zmin = 1) {
  std::mt19937 rng(seed);
  Synthetic s{K, N, group, {}, {}, {}, {}};
  const std::int64_t G = K / group;
  s.q.resize(K * N);
  for (auto& v : s.q)
    v = static_cast<std::uint8_t>(rng() % 16);
  s.zeros.assign(G * N, 8);
  if (!sym)
    for (auto& v : s.zeros)
      v = static_cast<std::uint8_t>(zmin + rng() % (16 - zmin));
  std::uniform_real_distribution<float> us(0.001f, 0.05f);
  s.scales_f16.resize(G * N);
  for (auto& v : s.scales_f16)
    v = f32_to_f16(us(rng));
  s.g_idx.resize(K);
  for (std::int64_t k = 0; k < K; ++k)
    s.g_idx[k] = static_cast<std::int32_t>(k / group);
  if (act_order) // GPTQ desc_act: g_idx[perm[i]] = i / group for a random permutation
  {
    std::vector<std::int32_t> perm(K);
    for (std::int64_t k = 0; k < K; ++k)
      perm[k] = static_cast<std::int32_t>(k);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (std::int64_t i = 0; i < K; ++i)
      s.g_idx[perm[i]] = static_cast<std::int32_t>(i / group);
  }
  return s;
}

// Reference GPTQ packer: qweight [K/8, N] (nibble i = row 8r+i), qzeros [G, N/8] holding zero-1.
void gptq_pack(const Synthetic& s, std::vector<std::int32_t>& qweight,
               std::vector<std::int32_t>& qzeros) {
  const std::int64_t K = s.K, N = s.N, G = K / s.group;
  qweight.assign(K / 8 * N, 0);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n) {
      std::uint32_t& w = reinterpret_cast<std::uint32_t&>(qweight[(k / 8) * N + n]);
      w |= static_cast<std::uint32_t>(s.q[k * N + n]) << (4 * (k % 8));
    }
  qzeros.assign(G * N / 8, 0);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t n = 0; n < N; ++n) {
      std::uint32_t& w = reinterpret_cast<std::uint32_t&>(qzeros[g * (N / 8) + n / 8]);
      w |= static_cast<std::uint32_t>((s.zeros[g * N + n] - 1) & 0xF) << (4 * (n % 8));
    }
}

// Reference AWQ packer (AutoAWQ): for i in 0..7, column order_map[i] of each 8-column pack is
// shifted by 4*i, order_map = {0, 2, 4, 6, 1, 3, 5, 7}.
void awq_pack(const Synthetic& s, std::vector<std::int32_t>& qweight,
              std::vector<std::int32_t>& qzeros) {
  const int order_map[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const std::int64_t K = s.K, N = s.N, G = K / s.group;
  qweight.assign(K * N / 8, 0);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i) {
        std::uint32_t& w = reinterpret_cast<std::uint32_t&>(qweight[k * (N / 8) + c]);
        w |= static_cast<std::uint32_t>(s.q[k * N + 8 * c + order_map[i]]) << (4 * i);
      }
  qzeros.assign(G * N / 8, 0);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i) {
        std::uint32_t& w = reinterpret_cast<std::uint32_t&>(qzeros[g * (N / 8) + c]);
        w |= static_cast<std::uint32_t>(s.zeros[g * N + 8 * c + order_map[i]]) << (4 * i);
      }
}

void expect_plain_equal(const QuantPlain& p, const Synthetic& s) {
  REQUIRE(p.K == s.K);
  REQUIRE(p.N == s.N);
  REQUIRE(p.q == s.q);
  REQUIRE(p.zeros == s.zeros);
  REQUIRE(p.g_idx == s.g_idx);
  for (std::size_t i = 0; i < s.scales_f16.size(); ++i)
    REQUIRE(p.scales[i] == f16_to_f32(s.scales_f16[i]));
}

// y = x · W through the repacked weights vs the plain dequantization, best ISA.
void check_linear(const QuantPlain& p, const PackedWeights& w, std::int64_t M) {
  const auto deq = p.dequantize();
  const std::vector<float> x = random_vec(static_cast<std::size_t>(M * p.K), 3);
  std::vector<float> y = nan_vec(static_cast<std::size_t>(M * p.N));
  linear(x, w, {}, y, {M, p.K, p.N}, {SplitDim::cols, 2});
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < p.N; ++n) {
      double r = 0, a = 0;
      for (std::int64_t k = 0; k < p.K; ++k) {
        r += double(x[m * p.K + k]) * deq[k * p.N + n];
        a += std::abs(x[m * p.K + k]) * 0.05 * 30;
      }
      REQUIRE(std::abs(y[m * p.N + n] - r) <= 1e-5 * a);
    }
}

} // namespace

TEST_CASE("GPTQ unpack recovers ints, v1 zeros and scales, with and without act-order",
          "[quant_repack]") {
  for (bool act : {false, true})
    for (bool sym : {true, false}) {
      const auto s = make_synthetic(128, 48, 32, sym, act, act ? 11u : 12u);
      std::vector<std::int32_t> qw, qz;
      gptq_pack(s, qw, qz);
      const auto p = unpack_gptq(qw, qz, s.scales_f16, s.g_idx, s.K, s.N, s.group);
      expect_plain_equal(p, s);
      const auto w = repack_quant(p);
      CHECK(w.format == (sym ? WeightFormat::int4_sym : WeightFormat::int4_asym));
      CHECK(w.k_perm.empty() == !act);
      REQUIRE(dequantize(w) == p.dequantize()); // element for element, original row order
      check_linear(p, w, 1);
      check_linear(p, w, 9);
    }
}

TEST_CASE("GPTQ with empty g_idx uses k / group_size", "[quant_repack]") {
  const auto s = make_synthetic(64, 16, 32, false, false, 5);
  std::vector<std::int32_t> qw, qz;
  gptq_pack(s, qw, qz);
  const auto p = unpack_gptq(qw, qz, s.scales_f16, {}, s.K, s.N, s.group);
  expect_plain_equal(p, s);
}

TEST_CASE("AWQ unpack recovers the 0,2,4,6,1,3,5,7 nibble order", "[quant_repack]") {
  const auto s = make_synthetic(96, 40, 32, false, false, 21, 0);
  std::vector<std::int32_t> qw, qz;
  awq_pack(s, qw, qz);
  // nibble 1 of word (k=0, c=0) is column 2 (AutoAWQ order_map)
  CHECK(((static_cast<std::uint32_t>(qw[0]) >> 4) & 0xF) == s.q[2]);
  const auto p = unpack_awq(qw, qz, s.scales_f16, s.K, s.N, s.group);
  expect_plain_equal(p, s);
  const auto w = repack_quant(p);
  CHECK(w.format == WeightFormat::int4_asym);
  REQUIRE(dequantize(w) == p.dequantize());
  check_linear(p, w, 1);
  check_linear(p, w, 7);
}

TEST_CASE("unpack and repack reject malformed inputs", "[quant_repack]") {
  const auto s = make_synthetic(64, 16, 32, false, false, 5);
  std::vector<std::int32_t> qw, qz;
  gptq_pack(s, qw, qz);
  CHECK_THROWS_AS(unpack_gptq(qw, qz, s.scales_f16, s.g_idx, 64, 16, 24), tpullm::Error);
  CHECK_THROWS_AS(unpack_gptq(qw, qz, s.scales_f16, s.g_idx, 64, 24, 32), tpullm::Error);
  auto bad_g = s.g_idx;
  bad_g[3] = 2; // G = 2
  CHECK_THROWS_AS(unpack_gptq(qw, qz, s.scales_f16, bad_g, 64, 16, 32), tpullm::Error);
  bad_g[3] = 1; // group 1 gets 33 rows: not representable in the packed layout
  const auto p = unpack_gptq(qw, qz, s.scales_f16, bad_g, 64, 16, 32);
  CHECK_THROWS_AS(repack_quant(p), tpullm::Error);
  CHECK_THROWS_AS(
      unpack_awq(std::span<const std::int32_t>(qw).first(100), qz, s.scales_f16, 64, 16, 32),
      tpullm::Error);
  // v1 zero 0 stored as 0xF would give 16
  auto qz_bad = qz;
  qz_bad[0] = -1;
  CHECK_THROWS_AS(unpack_gptq(qw, qz_bad, s.scales_f16, s.g_idx, 64, 16, 32), tpullm::Error);
}

namespace {
// 8-bit GPTQ from the format: qweight [K/4, N] (byte i of word (r, n) = q[4r + i][n]), qzeros
// [G, N/4] (byte i of word (g, c) = zero[g][4c + i] - offset).
struct Synthetic8 {
  std::int64_t K, N, group;
  std::vector<std::uint8_t> q, zeros;
  std::vector<std::uint16_t> scales_f16;
  std::vector<std::int32_t> g_idx, qweight, qzeros;
};
Synthetic8 make_gptq8(std::int64_t K, std::int64_t N, std::int64_t group, bool sym, bool act,
                      int offset, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Synthetic8 s{K, N, group, {}, {}, {}, {}, {}, {}};
  const std::int64_t G = K / group;
  s.q.resize(K * N);
  for (auto& v : s.q)
    v = static_cast<std::uint8_t>(rng() % 256);
  s.zeros.assign(G * N, 128);
  if (!sym)
    for (auto& v : s.zeros)
      v = static_cast<std::uint8_t>(offset + rng() % (256 - offset));
  s.scales_f16.resize(G * N);
  for (auto& v : s.scales_f16)
    v = f32_to_f16(0.0005f + static_cast<float>(rng() % 1000) * 1e-6f);
  std::vector<std::int32_t> perm(K);
  for (std::int64_t k = 0; k < K; ++k)
    perm[k] = static_cast<std::int32_t>(k);
  if (act)
    std::shuffle(perm.begin(), perm.end(), rng);
  s.g_idx.resize(K);
  for (std::int64_t i = 0; i < K; ++i)
    s.g_idx[perm[i]] = static_cast<std::int32_t>(i / group);
  s.qweight.assign(K / 4 * N, 0);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n)
      reinterpret_cast<std::uint32_t&>(s.qweight[(k / 4) * N + n]) |=
          static_cast<std::uint32_t>(s.q[k * N + n]) << (8 * (k % 4));
  s.qzeros.assign(G * N / 4, 0);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t n = 0; n < N; ++n)
      reinterpret_cast<std::uint32_t&>(s.qzeros[g * (N / 4) + n / 4]) |=
          static_cast<std::uint32_t>((s.zeros[g * N + n] - offset) & 0xFF) << (8 * (n % 4));
  return s;
}
} // namespace

TEST_CASE("GPTQ 8-bit unpacks 4 values a word; symmetric repacks to int8 exactly",
          "[quant_repack]") {
  for (bool act : {false, true})
    for (int offset : {1, 0}) {
      const auto s = make_gptq8(128, 40, 32, true, act, offset, act ? 31u : 32u);
      // byte 1 of word (r=0, n=0) is row 1, column 0
      CHECK(((static_cast<std::uint32_t>(s.qweight[0]) >> 8) & 0xFF) == s.q[s.N]);
      const auto p =
          unpack_gptq(s.qweight, s.qzeros, s.scales_f16, s.g_idx, s.K, s.N, s.group, offset, 8);
      REQUIRE(p.bits == 8);
      REQUIRE(p.q == s.q);
      REQUIRE(p.zeros == s.zeros);
      REQUIRE(p.g_idx == s.g_idx);
      const auto w = repack_quant(p);
      CHECK(w.format == WeightFormat::int8);
      CHECK(w.k_perm.empty() == !act);
      REQUIRE(dequantize(w) == p.dequantize());
      check_linear(p, w, 1);
      check_linear(p, w, 9);
    }
}

TEST_CASE("GPTQ 8-bit asymmetric repacks to int8_asym exactly", "[quant_repack]") {
  for (bool act : {false, true})
    for (int offset : {1, 0}) {
      const auto s = make_gptq8(128, 40, 32, false, act, offset, act ? 43u : 44u);
      const auto p =
          unpack_gptq(s.qweight, s.qzeros, s.scales_f16, s.g_idx, s.K, s.N, s.group, offset, 8);
      REQUIRE(p.zeros == s.zeros);
      const auto w = repack_quant(p);
      CHECK(w.format == WeightFormat::int8_asym);
      CHECK(w.k_perm.empty() == !act);
      // against the format's definition: (q - zero) * f16 scale, row k in group g_idx[k]
      std::vector<float> want(static_cast<std::size_t>(s.K * s.N));
      for (std::int64_t k = 0; k < s.K; ++k)
        for (std::int64_t n = 0; n < s.N; ++n) {
          const std::int64_t g = s.g_idx[k];
          want[k * s.N + n] = (float(s.q[k * s.N + n]) - float(s.zeros[g * s.N + n])) *
                              f16_to_f32(s.scales_f16[g * s.N + n]);
        }
      REQUIRE(dequantize(w) == want);
      check_linear(p, w, 1);
      check_linear(p, w, 9);
    }
  // allow_sym = false keeps a symmetric checkpoint in the asymmetric format
  const auto sy = make_gptq8(64, 16, 32, true, false, 1, 45);
  const auto ps =
      unpack_gptq(sy.qweight, sy.qzeros, sy.scales_f16, sy.g_idx, sy.K, sy.N, sy.group, 1, 8);
  CHECK(repack_quant(ps, false).format == WeightFormat::int8_asym);
  CHECK(repack_quant(ps).format == WeightFormat::int8);
}

TEST_CASE("GPTQ 8-bit zero points are range-checked", "[quant_repack]") {
  const auto s = make_gptq8(64, 16, 32, false, false, 0, 41);
  // v1: a stored 255 is the zero 256
  auto qz = s.qzeros;
  qz[0] = -1;
  CHECK_THROWS_WITH(unpack_gptq(s.qweight, qz, s.scales_f16, s.g_idx, s.K, s.N, s.group, 1, 8),
                    Catch::Contains("outside [0, 255]"));
  CHECK_THROWS_AS(unpack_gptq(s.qweight, s.qzeros, s.scales_f16, s.g_idx, s.K, s.N, s.group, 0, 3),
                  tpullm::Error);
}

TEST_CASE("scale-and-min plain weights repack to int4_min / int6_min / int8_min exactly",
          "[quant_repack]") {
  // w = q * scale - min (ggml's Q4_1 / Q5_1 / K-quants): scales of f16 precision (q * scale exact
  // in f32), mins of any sign; rows in natural order (g_idx empty or k / group) or act-order
  for (int bits : {4, 6, 8})
    for (std::int64_t group : {16, 32})
      for (int order : {0, 1, 2}) { // g_idx empty, natural, act-order (row k in group k % G)
        const std::int64_t K = 64, N = 40, G = K / group;
        std::mt19937 rng(static_cast<std::uint32_t>(bits * 100 + group + order));
        QuantPlain p;
        p.K = K;
        p.N = N;
        p.bits = bits;
        p.group_size = group;
        p.q.resize(static_cast<std::size_t>(K * N));
        for (auto& v : p.q)
          v = static_cast<std::uint8_t>(rng() % (1u << bits));
        const auto s = normal_vec(static_cast<std::size_t>(G * N), 0.05f, rng());
        for (float v : s)
          p.scales.push_back(f16_to_f32(f32_to_f16(v)));
        p.mins = normal_vec(static_cast<std::size_t>(G * N), 0.3f, rng());
        if (order > 0)
          for (std::int64_t k = 0; k < K; ++k)
            p.g_idx.push_back(static_cast<std::int32_t>(order == 1 ? k / group : k % G));
        const auto w = repack_quant(p, true); // allow_sym does not apply to scale and min
        INFO("bits " << bits << " group " << group << " order " << order);
        CHECK(w.format == (bits == 4   ? WeightFormat::int4_min
                           : bits == 6 ? WeightFormat::int6_min
                                       : WeightFormat::int8_min));
        CHECK(w.k_perm.empty() == (order != 2));
        CHECK(w.zeros.empty());
        std::vector<float> want(static_cast<std::size_t>(K * N));
        for (std::int64_t k = 0; k < K; ++k) {
          const std::int64_t g = order == 2 ? k % G : k / group;
          for (std::int64_t n = 0; n < N; ++n)
            want[k * N + n] = float(p.q[k * N + n]) * p.scales[g * N + n] - p.mins[g * N + n];
        }
        REQUIRE(p.dequantize() == want);
        REQUIRE(dequantize(w) == want); // element for element, original row order
        for (std::int64_t M : {1, 3, 20}) {
          const std::vector<float> x = random_vec(static_cast<std::size_t>(M * K), 3);
          std::vector<float> y = nan_vec(static_cast<std::size_t>(M * N));
          linear(x, w, {}, y, {M, K, N}, {SplitDim::cols, 2});
          for (std::int64_t m = 0; m < M; ++m)
            for (std::int64_t n = 0; n < N; ++n) {
              double r = 0, a = 0;
              for (std::int64_t k = 0; k < K; ++k) {
                const std::int64_t g = order == 2 ? k % G : k / group;
                r += double(x[m * K + k]) * want[k * N + n];
                a += std::abs(x[m * K + k]) *
                     (std::abs(p.scales[g * N + n]) * p.q[k * N + n] + std::abs(p.mins[g * N + n]));
              }
              REQUIRE(std::abs(y[m * N + n] - r) <= matmul_tol(K) * a);
            }
        }
      }
}

TEST_CASE("scale-and-min repack refuses zeros with mins, bad sizes and bit widths",
          "[quant_repack]") {
  QuantPlain p;
  p.K = 32;
  p.N = 8;
  p.bits = 4;
  p.group_size = 16;
  p.q.assign(32 * 8, 1);
  p.scales.assign(2 * 8, 0.5f);
  p.mins.assign(2 * 8, 0.25f);
  CHECK(repack_quant(p).format == WeightFormat::int4_min);
  auto both = p;
  both.zeros.assign(2 * 8, 3);
  CHECK_THROWS_WITH(repack_quant(both), Catch::Contains("either zero points or mins"));
  auto short_mins = p;
  short_mins.mins.pop_back();
  CHECK_THROWS_AS(repack_quant(short_mins), tpullm::Error);
  auto big = p;
  big.q[5] = 16;
  CHECK_THROWS_AS(repack_quant(big), tpullm::Error);
  auto bits = p;
  bits.bits = 5;
  CHECK_THROWS_WITH(repack_quant(bits), Catch::Contains("5-bit"));
  auto group = p;
  group.group_size = 12;
  CHECK_THROWS_AS(repack_quant(group), tpullm::Error);
}
