// Token-selection primitives: argmax / top-k against sorting. (The sampler with HF's processors
// is runtime::Sampler, tested in tests/runtime.)

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
  CHECK_THROWS_KIND(argmax(std::vector<float>{}), internal);
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
  CHECK_THROWS_KIND(top_k(x, 0), internal);
  CHECK_THROWS_KIND(top_k(x, 5001), internal);
}
