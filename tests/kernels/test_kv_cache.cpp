// KV-cache row writes: exact copies into [start, start + L), nothing else touched, bounds errors.

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "tpullm/kernels/kv_cache.hpp"
#include "tpullm/support/float16.hpp"

using namespace tpullm;
using namespace tpullm::kernels;

TEST_CASE("kv_cache_write copies rows into their slots", "[kernels][kv_cache]") {
  const KvCacheShape shape{10, 2, 3};
  const std::int64_t row = shape.row_elems();
  for (std::int64_t start : {0, 4, 7})
    for (std::int64_t L : {1, 3})
      for (CoreSplit split : {CoreSplit{}, CoreSplit{SplitDim::rows, 2}}) {
        std::vector<float> cache(static_cast<std::size_t>(shape.capacity * row), -1.f);
        std::vector<float> rows(static_cast<std::size_t>(L * row));
        for (std::size_t i = 0; i < rows.size(); ++i)
          rows[i] = static_cast<float>(i) + 0.5f;
        kv_cache_write<float>(rows, L, cache, shape, start, split);
        for (std::int64_t s = 0; s < shape.capacity; ++s)
          for (std::int64_t e = 0; e < row; ++e) {
            const float got = cache[static_cast<std::size_t>(s * row + e)];
            if (s >= start && s < start + L)
              CHECK(got == rows[static_cast<std::size_t>((s - start) * row + e)]);
            else
              CHECK(got == -1.f);
          }
      }
}

TEST_CASE("kv_cache_write 16-bit and bounds", "[kernels][kv_cache]") {
  const KvCacheShape shape{4, 1, 2};
  std::vector<bf16_t> cache(8), rows{bf16_t{1}, bf16_t{2}, bf16_t{3}, bf16_t{4}};
  kv_cache_write<bf16_t>(rows, 2, cache, shape, 2);
  CHECK(cache[4].bits == 1);
  CHECK(cache[7].bits == 4);
  CHECK(cache[0].bits == 0);
  CHECK_NOTHROW(kv_cache_write<bf16_t>(rows, 0, cache, shape, 4));
  CHECK_THROWS_AS(kv_cache_write<bf16_t>(rows, 2, cache, shape, 3), std::out_of_range);
  CHECK_THROWS_AS(kv_cache_write<bf16_t>(rows, 1, cache, shape, -1), std::out_of_range);
  CHECK_THROWS_AS(kv_cache_write<bf16_t>(rows, 1, cache, shape, 4), std::out_of_range);
  CHECK_THROWS_AS(
      kv_cache_write<bf16_t>(std::span<const bf16_t>(rows).first(3), 2, cache, shape, 0),
      std::invalid_argument);
  std::vector<bf16_t> small(7);
  CHECK_THROWS_AS(kv_cache_write<bf16_t>(rows, 1, small, shape, 0), std::invalid_argument);
}
