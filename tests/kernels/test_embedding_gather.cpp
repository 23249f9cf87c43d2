// Embedding gather: exact widening of f32/bf16/f16 rows, int8 * per-row scale, id errors.

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tpullm/kernels/embedding_gather.hpp"

#include "kernel_test_util.hpp"

namespace {

using namespace tpullm;
using namespace tpullm::kernels;
using namespace tpullm_test;

template <class T>
void run(std::int64_t V, std::int64_t H, const std::vector<std::int32_t>& ids, CoreSplit split) {
  std::mt19937 rng(static_cast<unsigned>(V + H));
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<T> table(static_cast<std::size_t>(V * H));
  for (auto& e : table)
    e = from_f32<T>(nd(rng));
  for (Isa isa : isas_to_test()) {
    ScopedIsa guard(isa);
    std::vector<float> out = nan_vec(ids.size() * static_cast<std::size_t>(H));
    embedding_gather<T>(ids, table, out, {V, H}, split);
    std::size_t bad = 0;
    for (std::size_t l = 0; l < ids.size(); ++l)
      for (std::int64_t i = 0; i < H; ++i)
        bad += out[l * static_cast<std::size_t>(H) + static_cast<std::size_t>(i)] !=
               detail::to_f32(table[static_cast<std::size_t>(ids[l] * H + i)]);
    INFO("T=" << storage_name<T>() << " V=" << V << " H=" << H << " isa=" << isa_name(isa));
    CHECK(bad == 0);
  }
}

} // namespace

TEST_CASE("embedding_gather widens rows exactly", "[kernels][embedding]") {
  const std::vector<std::int32_t> ids{3, 0, 99, 3, 17};
  for (std::int64_t H : {1, 8, 17, 64, 896}) {
    run<float>(100, H, ids, {});
    run<bf16_t>(100, H, ids, {SplitDim::rows, 2});
    run<f16_t>(100, H, ids, {});
  }
  run<f16_t>(100, 33, {}, {});
}

TEST_CASE("embedding_gather int8 with per-row scale", "[kernels][embedding]") {
  const std::int64_t V = 5, H = 37;
  std::vector<std::int8_t> q(static_cast<std::size_t>(V * H));
  for (std::size_t i = 0; i < q.size(); ++i)
    q[i] = static_cast<std::int8_t>(static_cast<int>(i * 37 % 255) - 127);
  std::vector<float> scales{0.5f, 0.25f, 2.f, 1.f, 0.125f};
  std::vector<std::int32_t> ids{4, 2, 2};
  for (Isa isa : isas_to_test()) {
    ScopedIsa guard(isa);
    std::vector<float> out(ids.size() * H);
    embedding_gather_i8(ids, q, scales, out, {V, H});
    for (std::size_t l = 0; l < ids.size(); ++l)
      for (std::int64_t i = 0; i < H; ++i)
        CHECK(out[l * H + static_cast<std::size_t>(i)] ==
              static_cast<float>(q[static_cast<std::size_t>(ids[l] * H + i)]) *
                  scales[static_cast<std::size_t>(ids[l])]);
  }
  std::vector<float> out(ids.size() * H);
  CHECK_THROWS_KIND(
      embedding_gather_i8(ids, q, std::span<const float>(scales).first(4), out, {V, H}), internal);
}

TEST_CASE("embedding_gather rejects out-of-range ids", "[kernels][embedding]") {
  std::vector<float> table(10 * 4, 1.f), out(2 * 4);
  std::vector<std::int32_t> bad{1, 10};
  try {
    embedding_gather<float>(bad, table, out, {10, 4});
    FAIL("no throw");
  } catch (const Error& e) { // a token from outside: invalid input, not a bug
    CHECK(e.kind() == ErrorKind::invalid_input);
    const std::string msg = e.what();
    CHECK(msg.find("10") != std::string::npos);
    CHECK(msg.find("V=10") != std::string::npos);
  }
  std::vector<std::int32_t> neg{-1};
  CHECK_THROWS_KIND(embedding_gather<float>(neg, table, out, {10, 4}), invalid_input);
  std::vector<std::int32_t> ok{1, 2};
  CHECK_THROWS_KIND(embedding_gather<float>(ok, table, std::span<float>(out).first(7), {10, 4}),
                    internal);
  CHECK_THROWS_KIND(embedding_gather<float>(ok, table, out, {11, 4}), internal);
}
