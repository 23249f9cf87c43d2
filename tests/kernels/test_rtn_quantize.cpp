// Round-to-nearest quantization (conversion/rtn_quantize.hpp) against values worked out by hand
// from the documented definition, and its packing through the GPTQ repacker into every format.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "tpullm/conversion/rtn_quantize.hpp"

using namespace tpullm;
using namespace tpullm::conversion;

namespace {
// One column of 8 rows: range [-1.5, 6] gives the 4-bit asymmetric scale 7.5 / 15 = 0.5 exactly.
const std::vector<float> kCol = {-1.5f, 0.0f, 0.7f, 6.0f, 2.2f, -0.4f, 1.1f, 3.9f};
} // namespace

TEST_CASE("RTN 4-bit asymmetric: scale (hi - lo) / 15, zero round(-lo / scale)", "[rtn]") {
  const QuantPlain p = rtn_quantize(kCol, 8, 1, {4, 0, false});
  REQUIRE(p.group_size == 8);
  CHECK(p.scales == std::vector<float>{0.5f});
  CHECK(p.zeros == std::vector<std::uint8_t>{3});
  // round(w / 0.5) + 3: -3, 0, 1.4, 12, 4.4, -0.8, 2.2, 7.8 -> +3
  CHECK(p.q == std::vector<std::uint8_t>{0, 3, 4, 15, 7, 2, 5, 11});
  const auto w = repack_quant(p, false);
  CHECK(w.format == kernels::WeightFormat::int4_asym);
  const auto d = kernels::dequantize(w);
  CHECK(d[3] == 6.0f);
  CHECK(d[1] == 0.0f); // zero is exact
}

TEST_CASE("RTN symmetric: scale max|w| / (2^(b-1) - 1), zero 2^(b-1)", "[rtn]") {
  const QuantPlain p4 = rtn_quantize(kCol, 8, 1, {4, 0, true});
  CHECK(p4.scales[0] == 6.0f / 7.0f);
  CHECK(p4.zeros == std::vector<std::uint8_t>{8});
  // w / (6/7): -1.75, 0, 0.82, 7, 2.57, -0.47, 1.28, 4.55 -> round + 8
  CHECK(p4.q == std::vector<std::uint8_t>{6, 8, 9, 15, 11, 8, 9, 13});
  CHECK(repack_quant(p4, true).format == kernels::WeightFormat::int4_sym);
  const QuantPlain p8 = rtn_quantize(kCol, 8, 1, {8, 0, true});
  CHECK(p8.scales[0] == 6.0f / 127.0f);
  CHECK(p8.zeros == std::vector<std::uint8_t>{128});
  CHECK(p8.q[3] == 255); // 6 -> +127
  CHECK(p8.q[1] == 128);
  CHECK(p8.q[0] == 128 - 32); // -1.5 / (6/127) = -31.75
  CHECK(repack_quant(p8, true).format == kernels::WeightFormat::int8);
}

TEST_CASE("RTN 8-bit asymmetric packs as int8_asym with its zero points", "[rtn]") {
  const QuantPlain p = rtn_quantize(kCol, 8, 1, {8, 0, false});
  CHECK(p.scales[0] == Approx(7.5 / 255).epsilon(1e-6));
  CHECK(p.zeros == std::vector<std::uint8_t>{51}); // 1.5 / (7.5 / 255)
  CHECK(p.q[0] == 0);
  CHECK(p.q[1] == 51);
  CHECK(p.q[3] == 255);
  const auto w = repack_quant(p, false);
  CHECK(w.format == kernels::WeightFormat::int8_asym);
  const auto d = kernels::dequantize(w);
  for (std::size_t k = 0; k < kCol.size(); ++k)
    CHECK(std::abs(d[k] - kCol[k]) <= 0.5 * p.scales[0] * (1 + 1e-5));
}

TEST_CASE("RTN groups along K and columns are independent; zero groups are exact", "[rtn]") {
  // K = 16, N = 2, group 8: column 0 = kCol then kCol * 2; column 1 all zero
  std::vector<float> w(32, 0.0f);
  for (int k = 0; k < 8; ++k) {
    w[k * 2] = kCol[k];
    w[(k + 8) * 2] = 2 * kCol[k];
  }
  const QuantPlain p = rtn_quantize(w, 16, 2, {4, 8, false});
  REQUIRE(p.scales.size() == 4);
  CHECK(p.scales == std::vector<float>{0.5f, 1.0f, 1.0f, 1.0f}); // [G, N]; zero column: 1
  CHECK(p.zeros == std::vector<std::uint8_t>{3, 8, 3, 8});       // zero column: the midpoint
  for (int k = 0; k < 16; ++k)
    CHECK(p.g_idx[k] == k / 8);
  CHECK(p.q[9 * 2] == 3);     // row 9 (0.0 in group 1) -> its zero
  CHECK(p.q[11 * 2] == 15);   // 12 / 1 + 3
  CHECK(p.q[5 * 2 + 1] == 8); // the zero column: every code is its zero point
  const auto d = kernels::dequantize(repack_quant(p, false));
  for (int k = 0; k < 16; ++k)
    CHECK(d[k * 2 + 1] == 0.0f);
}

TEST_CASE("RTN refuses what it cannot quantize", "[rtn]") {
  CHECK_THROWS_WITH(rtn_quantize(kCol, 8, 1, {4, 3, false}), Catch::Contains("does not divide K"));
  CHECK_THROWS_WITH(rtn_quantize(std::vector<float>(24, 1.0f), 12, 2, {4, 4, false}),
                    Catch::Contains("multiple of 8"));
  CHECK_THROWS_WITH(rtn_quantize(kCol, 8, 1, {3, 0, false}), Catch::Contains("4 or 8"));
  CHECK_THROWS_WITH(rtn_quantize(kCol, 4, 1, {4, 0, false}), Catch::Contains("values"));
  auto bad = kCol;
  bad[2] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(rtn_quantize(bad, 8, 1, {4, 0, false}), Catch::Contains("not finite"));
}
