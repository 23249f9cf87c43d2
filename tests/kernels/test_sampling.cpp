// Sampling primitives: argmax / top-k against sorting, HF semantics of the filters and the
// penalty, deterministic draws from an explicit mt19937_64, empirical frequencies.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "tpullm/kernels/sampling.hpp"

#include "kernel_test_util.hpp"

namespace {

using namespace tpullm::kernels;
using namespace tpullm_test;

std::int64_t naive_argmax(const std::vector<float>& x) {
  std::int64_t b = 0;
  for (std::size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[static_cast<std::size_t>(b)])
      b = static_cast<std::int64_t>(i);
  return b;
}

const float kInf = std::numeric_limits<float>::infinity();

} // namespace

TEST_CASE("argmax returns the first maximum", "[kernels][sampling]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (std::size_t n : {1u, 2u, 15u, 16u, 17u, 63u, 64u, 100u, 1000u, 151936u}) {
    std::vector<float> x(n);
    for (auto& e : x)
      e = std::round(nd(rng)); // many ties
    for (Isa isa : isas_to_test()) {
      ScopedIsa guard(isa);
      INFO("n=" << n << " isa=" << isa_name(isa));
      CHECK(argmax(x) == naive_argmax(x));
    }
  }
  for (Isa isa : isas_to_test()) {
    ScopedIsa guard(isa);
    std::vector<float> flat(200, 1.f);
    CHECK(argmax(flat) == 0);
    std::vector<float> ninf(200, -kInf);
    CHECK(argmax(ninf) == 0);
    ninf[150] = -1e30f;
    CHECK(argmax(ninf) == 150);
    std::vector<float> late(151936, 0.f);
    late[151935] = 1.f;
    late[77] = 1.f;
    CHECK(argmax(late) == 77);
  }
  CHECK_THROWS_AS(argmax(std::vector<float>{}), std::invalid_argument);
}

TEST_CASE("top_k is sorted descending with ascending indices on ties", "[kernels][sampling]") {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<float> x(5000);
  for (auto& e : x)
    e = std::round(nd(rng) * 4.f);
  std::vector<std::int32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) {
    return x[static_cast<std::size_t>(a)] > x[static_cast<std::size_t>(b)];
  });
  for (std::int64_t k : {1, 5, 50, 5000}) {
    const TopK t = top_k(x, k);
    REQUIRE(t.indices.size() == static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < k; ++i) {
      CHECK(t.indices[static_cast<std::size_t>(i)] == idx[static_cast<std::size_t>(i)]);
      CHECK(t.values[static_cast<std::size_t>(i)] ==
            x[static_cast<std::size_t>(idx[static_cast<std::size_t>(i)])]);
    }
  }
  CHECK_THROWS_AS(top_k(x, 0), std::invalid_argument);
  CHECK_THROWS_AS(top_k(x, 5001), std::invalid_argument);
}

TEST_CASE("repetition penalty, temperature, top-k and top-p filters", "[kernels][sampling]") {
  std::vector<float> x{2.f, -2.f, 1.f, 0.f};
  std::vector<std::int32_t> prev{0, 1, 1, 3};
  apply_repetition_penalty(x, prev, 2.f);
  CHECK(x == std::vector<float>{1.f, -4.f, 1.f, 0.f}); // each distinct token penalized once
  std::vector<std::int32_t> bad{4};
  CHECK_THROWS_AS(apply_repetition_penalty(x, bad, 2.f), std::out_of_range);

  std::vector<float> t{1.f, -3.f};
  apply_temperature(t, 0.5f);
  CHECK(t == std::vector<float>{2.f, -6.f});
  CHECK_THROWS_AS(apply_temperature(t, 0.f), std::invalid_argument);

  std::vector<float> k{1.f, 3.f, 2.f, 3.f, 2.f};
  top_k_filter(k, 3); // the 3rd largest is 2: both 2s are kept (HF keeps ties)
  CHECK(k == std::vector<float>{-kInf, 3.f, 2.f, 3.f, 2.f});
  std::vector<float> k1{1.f, 3.f, 2.f};
  top_k_filter(k1, 1);
  CHECK(k1 == std::vector<float>{-kInf, 3.f, -kInf});

  // probabilities 0.5, 0.3, 0.15, 0.05
  const std::vector<float> base{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto p = base;
  top_p_filter(p, 0.79f); // ascending cumsum 0.05, 0.20, 0.50: removes <= 0.21
  CHECK(p[0] == base[0]);
  CHECK(p[1] == base[1]);
  CHECK(p[2] == -kInf);
  CHECK(p[3] == -kInf);
  p = base;
  top_p_filter(p, 0.9f);
  CHECK(p[2] == base[2]);
  CHECK(p[3] == -kInf);
  p = base;
  top_p_filter(p, 0.01f); // always keeps the most likely token
  CHECK(p[0] == base[0]);
  CHECK(std::count(p.begin(), p.end(), -kInf) == 3);
  CHECK_THROWS_AS(top_p_filter(p, 0.f), std::invalid_argument);
}

TEST_CASE("sample is deterministic and follows the distribution", "[kernels][sampling]") {
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams sp;
  std::mt19937_64 a(42), b(42);
  std::vector<int> counts(3, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const auto ta = sample(logits, sp, a), tb = sample(logits, sp, b);
    REQUIRE(ta == tb);
    ++counts[static_cast<std::size_t>(ta)];
  }
  CHECK(std::abs(counts[0] / double(n) - 0.5) < 0.02);
  CHECK(std::abs(counts[1] / double(n) - 0.3) < 0.02);
  CHECK(std::abs(counts[2] / double(n) - 0.2) < 0.02);

  SamplingParams greedy;
  greedy.temperature = 0.f;
  std::mt19937_64 r(1);
  CHECK(sample(logits, greedy, r) == 0);
  greedy.repetition_penalty = 10.f; // token 0's logit (-0.69) becomes -6.9
  std::vector<std::int32_t> prev{0};
  CHECK(sample(logits, greedy, r, prev) == 1);

  SamplingParams filt;
  filt.top_k = 2;
  filt.top_p = 0.55f; // after top-k: 0.625/0.375 -> cut 0.45 removes the 0.375 token
  filt.temperature = 1.f;
  for (int i = 0; i < 100; ++i)
    CHECK(sample(logits, filt, r) == 0);
  SamplingParams hot;
  hot.temperature = 100.f; // nearly uniform
  std::vector<int> c2(3, 0);
  for (int i = 0; i < 3000; ++i)
    ++c2[static_cast<std::size_t>(sample(logits, hot, r))];
  CHECK(*std::min_element(c2.begin(), c2.end()) > 900);
  std::vector<float> all_ninf(3, -kInf);
  CHECK_THROWS_AS(sample_from_logits(all_ninf, r), std::invalid_argument);
}
