// Embedding gather from a packed [H, V] weight (the tied lm_head stored once): column v of every
// packed format equals the values it was packed from, by the format's definition (float bits
// exact, q * scale, (u - 8) * scale, (u - zero) * scale for int4 and int8, u * scale - min for the
// scale-and-min formats), act-order rows put back in place.

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "tpullm/kernels/packed_gather.hpp"

#include "kernel_test_util.hpp"

namespace {

using namespace tpullm;
using namespace tpullm::kernels;
using namespace tpullm_test;

constexpr std::int64_t K = 40, N = 70; // 3 panels, the last one padded
// runs of one id (gathered once, then copied), one across the two cores' halves, and a tail of
// id 0 as a padded prompt has
const std::vector<std::int32_t> kIds = {0, 69, 31, 32, 5, 69, 40, 40, 40, 7, 0, 0, 0, 0};

/// Gathers kIds from w and compares with expected [K, N] row-major (original row order).
void check_gather(const PackedWeights& w, const std::vector<float>& expected) {
  for (CoreSplit split : {CoreSplit{SplitDim::rows, 2}, CoreSplit{SplitDim::none, 1}}) {
    std::vector<float> out = nan_vec(kIds.size() * static_cast<std::size_t>(K));
    packed_embedding_gather(kIds, w, out, split);
    std::size_t bad = 0;
    for (std::size_t l = 0; l < kIds.size(); ++l)
      for (std::int64_t k = 0; k < K; ++k)
        bad += out[l * K + static_cast<std::size_t>(k)] !=
               expected[static_cast<std::size_t>(k * N + kIds[l])];
    INFO("format " << format_name(w.format) << " split " << int(split.dim));
    CHECK(bad == 0);
  }
}

std::vector<float> randn(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& e : v)
    e = nd(rng);
  return v;
}

} // namespace

TEST_CASE("packed gather: float formats give the stored values bit for bit", "[packed_gather]") {
  const std::vector<float> w = randn(K * N, 1);
  check_gather(pack_f32(w, K, N), w);
  std::vector<std::uint16_t> b(w.size()), h(w.size());
  std::vector<float> wb(w.size()), wh(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    b[i] = f32_to_bf16(w[i]);
    h[i] = f32_to_f16(w[i]);
    wb[i] = bf16_to_f32(b[i]);
    wh[i] = f16_to_f32(h[i]);
  }
  check_gather(pack_bf16(b, K, N), wb);
  check_gather(pack_f16(h, K, N), wh);
}

TEST_CASE("packed gather: integer formats dequantize by their definition", "[packed_gather]") {
  std::mt19937 rng(7);
  const std::int64_t group = 8, G = K / group;
  const std::vector<float> s = randn(G * N, 2);
  std::vector<std::int8_t> q8(K * N), q4(K * N);
  std::vector<std::uint8_t> u4(K * N), z4(G * N);
  for (auto& e : q8)
    e = static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
  for (auto& e : q4)
    e = static_cast<std::int8_t>(static_cast<int>(rng() % 16) - 8);
  for (auto& e : u4)
    e = static_cast<std::uint8_t>(rng() % 16);
  for (auto& e : z4)
    e = static_cast<std::uint8_t>(rng() % 16);
  std::vector<std::uint8_t> u8(K * N), z8(G * N);
  for (auto& e : u8)
    e = static_cast<std::uint8_t>(rng() % 256);
  for (auto& e : z8)
    e = static_cast<std::uint8_t>(rng() % 256);
  std::vector<float> e8(K * N), e8a(K * N), e4s(K * N), e4a(K * N);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::size_t i = static_cast<std::size_t>(k * N + n);
      const std::size_t gi = static_cast<std::size_t>((k / group) * N + n);
      e8[i] = static_cast<float>(q8[i]) * s[gi];
      e8a[i] = static_cast<float>(static_cast<int>(u8[i]) - static_cast<int>(z8[gi])) * s[gi];
      e4s[i] = static_cast<float>(q4[i]) * s[gi];
      e4a[i] = static_cast<float>(static_cast<int>(u4[i]) - static_cast<int>(z4[gi])) * s[gi];
    }
  check_gather(pack_int8(q8, s, K, N, group), e8);
  check_gather(pack_int8_asym(u8, s, z8, K, N, group), e8a);
  check_gather(pack_int4_sym(q4, s, K, N, group), e4s);
  check_gather(pack_int4_asym(u4, s, z4, K, N, group), e4a);
  // int6 (ggml's Q6_K container): per channel, K = 40 padded to 48 rows in 16-row blocks
  {
    std::vector<std::int8_t> q6(K * N);
    for (auto& e : q6)
      e = static_cast<std::int8_t>(static_cast<int>(rng() % 64) - 32);
    const std::vector<float> s6 = randn(N, 4);
    std::vector<float> e6(K * N);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        e6[static_cast<std::size_t>(k * N + n)] =
            static_cast<float>(q6[static_cast<std::size_t>(k * N + n)]) *
            s6[static_cast<std::size_t>(n)];
    check_gather(pack_int6_sym(q6, s6, K, N, K), e6);
  }

  SECTION("per-output-channel int8 (one group over K)") {
    const std::vector<float> sc = randn(N, 3);
    std::vector<float> e(K * N);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        e[static_cast<std::size_t>(k * N + n)] =
            static_cast<float>(q8[static_cast<std::size_t>(k * N + n)]) *
            sc[static_cast<std::size_t>(n)];
    check_gather(pack_int8_per_channel(q8, sc, K, N), e);
  }
  SECTION("act-order: packed row j is original row k_perm[j]") {
    std::vector<std::int32_t> perm(K);
    for (std::int64_t j = 0; j < K; ++j)
      perm[static_cast<std::size_t>(j)] = static_cast<std::int32_t>((j * 7) % K); // 7 coprime 40
    std::vector<float> e(K * N);
    for (std::int64_t j = 0; j < K; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        e[static_cast<std::size_t>(perm[static_cast<std::size_t>(j)] * N + n)] =
            e4a[static_cast<std::size_t>(j * N + n)];
    check_gather(pack_int4_asym(u4, s, z4, K, N, group, perm), e);
  }
}

TEST_CASE("packed gather: scale-and-min formats give u * scale - min", "[packed_gather]") {
  // scales of f16 precision (as ggml's d * sc): u * scale is exact in f32, so the one rounding is
  // the subtraction's whether or not it is fused; mins of any f32 value and sign
  std::mt19937 rng(11);
  for (std::int64_t group : {8, 40}) { // groups of 8 rows and one per column (K = 40)
    const std::int64_t G = K / group;
    std::vector<float> s = randn(static_cast<std::size_t>(G * N), 12);
    for (auto& v : s)
      v = f16_to_f32(f32_to_f16(v));
    const std::vector<float> m = randn(static_cast<std::size_t>(G * N), 13);
    std::vector<std::uint8_t> u4(K * N), u6(K * N), u8(K * N);
    for (auto& e : u4)
      e = static_cast<std::uint8_t>(rng() % 16);
    for (auto& e : u6)
      e = static_cast<std::uint8_t>(rng() % 64);
    for (auto& e : u8)
      e = static_cast<std::uint8_t>(rng() % 256);
    std::vector<float> e4(K * N), e6(K * N), e8(K * N);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n) {
        const std::size_t i = static_cast<std::size_t>(k * N + n);
        const std::size_t gi = static_cast<std::size_t>((k / group) * N + n);
        e4[i] = static_cast<float>(u4[i]) * s[gi] - m[gi];
        e6[i] = static_cast<float>(u6[i]) * s[gi] - m[gi];
        e8[i] = static_cast<float>(u8[i]) * s[gi] - m[gi];
      }
    INFO("group " << group);
    check_gather(pack_int4_min(u4, s, m, K, N, group), e4);
    if (group % 16 == 0 || group == K)
      check_gather(pack_int6_min(u6, s, m, K, N, group), e6);
    check_gather(pack_int8_min(u8, s, m, K, N, group), e8);
    std::vector<std::int32_t> perm(K);
    for (std::int64_t j = 0; j < K; ++j)
      perm[static_cast<std::size_t>(j)] = static_cast<std::int32_t>((j * 7) % K);
    std::vector<float> e(K * N);
    for (std::int64_t j = 0; j < K; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        e[static_cast<std::size_t>(perm[static_cast<std::size_t>(j)] * N + n)] =
            e4[static_cast<std::size_t>(j * N + n)];
    check_gather(pack_int4_min(u4, s, m, K, N, group, perm), e);
  }
}

TEST_CASE("packed gather: an id outside [0, V) names itself", "[packed_gather]") {
  const PackedWeights w = pack_f32(randn(K * N, 4), K, N);
  std::vector<float> out(2 * K);
  const std::vector<std::int32_t> ids = {3, 70};
  CHECK_THROWS_WITH(packed_embedding_gather(ids, w, out),
                    Catch::Contains("token id 70 at position 1 is outside [0, V=70)"));
  const std::vector<std::int32_t> neg = {-1};
  CHECK_THROWS_KIND(packed_embedding_gather(neg, w, out), invalid_input);
  std::vector<float> small(K - 1);
  const std::vector<std::int32_t> one = {0};
  CHECK_THROWS_KIND(packed_embedding_gather(one, w, small), internal);
}
