// A two-level packed weight (kernels/two_level_scales.hpp) as the compiler stores it and a bundle
// hands it back: make_packed_weight writes the parts `scales` / `mins` (f32 per super-block) and
// `scale_codes` / `min_codes` (i8 per group) under a `super = S` type, and packed_view reads them
// into the same numbers. A weight whose type or parts were damaged (as a hostile or corrupted
// bundle could carry them) is refused as invalid input naming the weight: super rows that do not
// fit, a zero group size beside them (a division by zero before the check existed), a missing or
// short code part.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tpullm/conversion/weight_convert.hpp"
#include "tpullm/kernels/two_level_scales.hpp"
#include "tpullm/support/error.hpp"

using namespace tpullm;

namespace {

/// A Q4_K-like weight [K = 512, N = 40]: 4-bit codes, groups of 32, super-blocks of 256.
ir::Weight two_level_weight() {
  const std::int64_t K = 512, N = 40, G = K / 32, S = K / 256;
  std::vector<std::uint8_t> u(static_cast<std::size_t>(K * N));
  for (std::size_t i = 0; i < u.size(); ++i)
    u[i] = static_cast<std::uint8_t>((i * 7) % 16);
  std::vector<std::int8_t> sc(static_cast<std::size_t>(G * N)), mc(sc.size());
  std::vector<float> d(static_cast<std::size_t>(S * N)), dm(d.size()), s(sc.size()), m(sc.size());
  for (std::size_t i = 0; i < d.size(); ++i) {
    d[i] = 0.01f * static_cast<float>(i + 1);
    dm[i] = -0.002f * static_cast<float>(i + 3);
  }
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t n = 0; n < N; ++n) {
      const auto i = static_cast<std::size_t>(g * N + n);
      sc[i] = static_cast<std::int8_t>((g * 5 + n) % 64);
      mc[i] = static_cast<std::int8_t>((g + 3 * n) % 64);
      const auto si = static_cast<std::size_t>((g * 32 / 256) * N + n);
      s[i] = d[si] * static_cast<float>(sc[i]);
      m[i] = dm[si] * static_cast<float>(mc[i]);
    }
  kernels::PackedWeights w =
      kernels::with_two_level_scales(kernels::pack_int4_min(u, s, m, K, N, 32), 256, sc, d, mc, dm);
  return conversion::make_packed_weight("w", std::move(w), false);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

ErrorKind view_error(const ir::Weight& w) {
  try {
    conversion::packed_view(w);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::internal; // not refused
}

} // namespace

TEST_CASE("a two-level weight's parts round-trip through packed_view", "[two_level][weights]") {
  const ir::Weight w = two_level_weight();
  CHECK(w.type.str() == "tensor<512x40xu4, panels, quant<packed, group = 32, min, super = 256>>");
  REQUIRE(w.find_part("scale_codes") != nullptr);
  REQUIRE(w.find_part("min_codes") != nullptr);
  CHECK(w.part("scales").bytes.size() == 2 * 2 * 32 * sizeof(float)); // 2 panels x K / 256
  CHECK(w.part("scale_codes").bytes.size() == 2 * 16 * 32);
  const kernels::PackedWeights v = conversion::packed_view(w);
  CHECK(v.super_rows == 256);
  const kernels::PackedWeights& owned =
      *std::static_pointer_cast<const kernels::PackedWeights>(w.part("data").owner);
  CHECK(same_bits(kernels::dequantize(v), kernels::dequantize(owned)));
}

TEST_CASE("packed_view refuses damaged two-level types and parts", "[two_level][weights]") {
  const ir::Weight good = two_level_weight();
  for (std::int64_t super_rows :
       {std::int64_t{3}, std::int64_t{48}, std::int64_t{1024}, std::int64_t{-256}}) {
    ir::Weight w = good;
    w.type.quant->super_rows = super_rows;
    INFO("super rows " << super_rows);
    CHECK(view_error(w) == ErrorKind::invalid_input);
  }
  {
    ir::Weight w = good; // a zero group size beside super rows: refused, not a division by zero
    w.type.quant->group_size = 0;
    CHECK(view_error(w) == ErrorKind::invalid_input);
  }
  {
    ir::Weight w = good; // the one-level reading of two-level parts: the scales' size differs
    w.type.quant->super_rows = 0;
    CHECK(view_error(w) == ErrorKind::invalid_input);
  }
  for (const char* role : {"scale_codes", "min_codes"}) {
    ir::Weight w = good;
    std::erase_if(w.parts, [&](const ir::WeightPart& p) { return p.role == role; });
    INFO("without " << role);
    CHECK_THROWS_WITH(conversion::packed_view(w), Catch::Contains(std::string("'") + role + "'"));
    ir::Weight shorter = good;
    for (auto& p : shorter.parts)
      if (p.role == role)
        p.bytes = p.bytes.first(p.bytes.size() - 1);
    CHECK(view_error(shorter) == ErrorKind::invalid_input);
  }
}
