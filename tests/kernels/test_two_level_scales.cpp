// Two-level scales (kernels/two_level_scales.hpp): a weight whose group scales are an f32 per
// super-block times an int8 code per group (ggml's K-quants) stored that way. The claim is that
// only the bytes change: the same weight in one level and in two levels must give the same
// dequantization, the same linear / MLP / gather outputs bit for bit on every path this CPU has
// (portable, AVX2 exact and both integer-dot kernels, AVX-512 f32 FMA and VNNI, the AMX
// emulator), with fewer bytes by the layout's count. A product that is not the one-level scale,
// or a layout without a two-level form, is refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/amx_tiles.hpp"
#include "tpullm/kernels/matmul.hpp"
#include "tpullm/kernels/mlp.hpp"
#include "tpullm/kernels/packed_gather.hpp"
#include "tpullm/kernels/two_level_scales.hpp"

#include "kernel_test_util.hpp"

using namespace tpullm;
using namespace tpullm::kernels;
using namespace tpullm_test;

namespace {

/// One weight in one level and in two levels, and the two-level inputs.
struct TwoLevelPair {
  PackedWeights one, two;
  std::vector<std::int8_t> codes, min_codes; ///< [G, N]
  std::vector<float> supers, super_mins;     ///< [K / super_rows, N]
};

/// Random codes and two-level scales (and mins) of format f; `one` holds their f32 products.
/// Super-block values are f16-like magnitudes of both signs; scale codes cover Q6_K's signed
/// int8 range for the symmetric formats and K-quants' [0, 63] for scale and min.
TwoLevelPair make_two_level_pair(WeightFormat f, std::int64_t K, std::int64_t N, std::int64_t group,
                                 std::int64_t super_rows, std::uint32_t seed,
                                 bool act_order = false) {
  std::mt19937 rng(seed);
  const std::int64_t G = K / group, S = K / super_rows;
  const unsigned levels = is_byte_format(f) ? 256 : is_six_format(f) ? 64 : 16;
  const bool mins = has_mins(f);
  TwoLevelPair t;
  auto super_value = [&] {
    return static_cast<float>((rng() % 2 ? 1 : -1) * std::ldexp(1.0 + (rng() % 1024) / 1024.0,
                                                                -static_cast<int>(rng() % 9)));
  };
  auto scale_code = [&] {
    return static_cast<std::int8_t>(mins ? static_cast<int>(rng() % 64)
                                         : static_cast<int>(rng() % 256) - 128);
  };
  t.supers.resize(static_cast<std::size_t>(S * N));
  t.codes.resize(static_cast<std::size_t>(G * N));
  for (auto& v : t.supers)
    v = super_value();
  for (auto& v : t.codes)
    v = scale_code();
  std::vector<float> s(t.codes.size()), m;
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t n = 0; n < N; ++n) {
      const auto i = static_cast<std::size_t>(g * N + n);
      s[i] = t.supers[static_cast<std::size_t>((g * group / super_rows) * N + n)] *
             static_cast<float>(t.codes[i]);
    }
  if (mins) {
    t.super_mins.resize(t.supers.size());
    t.min_codes.resize(t.codes.size());
    m.resize(s.size());
    for (auto& v : t.super_mins)
      v = super_value();
    for (auto& v : t.min_codes)
      v = static_cast<std::int8_t>(rng() % 64);
    for (std::int64_t g = 0; g < G; ++g)
      for (std::int64_t n = 0; n < N; ++n) {
        const auto i = static_cast<std::size_t>(g * N + n);
        m[i] = t.super_mins[static_cast<std::size_t>((g * group / super_rows) * N + n)] *
               static_cast<float>(t.min_codes[i]);
      }
  }
  std::vector<std::uint8_t> u(static_cast<std::size_t>(K * N));
  for (auto& v : u)
    v = static_cast<std::uint8_t>(rng() % levels);
  std::vector<std::int32_t> perm;
  if (act_order) { // groups in order, rows within them shuffled: a group-sorted permutation
    perm.resize(static_cast<std::size_t>(K));
    for (std::int64_t k = 0; k < K; ++k)
      perm[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(k);
    for (std::int64_t g = 0; g < G; ++g)
      std::shuffle(perm.begin() + g * group, perm.begin() + (g + 1) * group, rng);
  }
  auto centred = [&](int zero) {
    std::vector<std::int8_t> q(u.size());
    for (std::size_t i = 0; i < u.size(); ++i)
      q[i] = static_cast<std::int8_t>(static_cast<int>(u[i]) - zero);
    return q;
  };
  switch (f) {
  case WeightFormat::int8:
    t.one = pack_int8(centred(128), s, K, N, group);
    t.one.k_perm = perm;
    break;
  case WeightFormat::int4_sym:
    t.one = pack_int4_sym(centred(8), s, K, N, group, perm);
    break;
  case WeightFormat::int6_sym:
    t.one = pack_int6_sym(centred(32), s, K, N, group, perm);
    break;
  case WeightFormat::int4_min:
    t.one = pack_int4_min(u, s, m, K, N, group, perm);
    break;
  case WeightFormat::int6_min:
    t.one = pack_int6_min(u, s, m, K, N, group, perm);
    break;
  case WeightFormat::int8_min:
    t.one = pack_int8_min(u, s, m, K, N, group, perm);
    break;
  default:
    FAIL("no two-level form for " << format_name(f));
  }
  t.two = with_two_level_scales(detail::copy_packed(t.one), super_rows, t.codes, t.supers,
                                t.min_codes, t.super_mins);
  return t;
}

const WeightFormat kTwoLevelFormats[] = {WeightFormat::int8,     WeightFormat::int4_sym,
                                         WeightFormat::int6_sym, WeightFormat::int4_min,
                                         WeightFormat::int6_min, WeightFormat::int8_min};

/// ggml's groups: 16 rows for the 16-row K-quants (Q2_K, Q3_K, Q6_K), else 32.
std::int64_t ggml_group(WeightFormat f) {
  return f == WeightFormat::int6_sym || f == WeightFormat::int4_sym ? 16 : 32;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Path {
  const char* name;
  Isa isa;
  bool no_vnni = false, no_avx_vnni = false, amx_emulated = false;
};

/// Every linear path this CPU has (the AMX one on the emulator, on any CPU).
std::vector<Path> paths() {
  const auto& f = cpu_features();
  std::vector<Path> p{{"portable", Isa::portable},
                      {"AMX emulator", Isa::portable, false, false, true}};
  if (f.avx2) {
    p.push_back({"avx2 (VPMADDUBSW for int8 x)", Isa::avx2, false, true});
    if (f.avx_vnni)
      p.push_back({"avx2 (AVX-VNNI for int8 x)", Isa::avx2});
    else
      WARN("SKIPPED the AVX-VNNI path: this CPU has no AVX-VNNI");
  } else {
    WARN("SKIPPED the AVX2 paths: this CPU has no AVX2");
  }
  if (f.avx512) {
    p.push_back({"avx512 f32 FMA", Isa::avx512, true});
    if (f.avx512_vnni)
      p.push_back({"avx512 VNNI", Isa::avx512});
    else
      WARN("SKIPPED the AVX-512 VNNI path: this CPU has no AVX512_VNNI");
  } else {
    WARN("SKIPPED the AVX-512 paths: this CPU has no AVX-512");
  }
  return p;
}

/// Runs `fn` with path p forced.
template <class Fn>
void on_path(const Path& p, Fn&& fn) {
  ScopedIsa isa(p.isa);
  detail::vnni_disabled() = p.no_vnni;
  detail::avx_vnni_gemv_disabled() = p.no_avx_vnni;
  if (p.amx_emulated) {
    amx::ScopedEmulation emu;
    fn();
  } else {
    fn();
  }
  detail::vnni_disabled() = false;
  detail::avx_vnni_gemv_disabled() = false;
}

} // namespace

TEST_CASE("two-level scales hold the one-level numbers in fewer bytes", "[two_level]") {
  const std::int64_t K = 512, N = 70, S = 256; // three panels, the last partial
  for (WeightFormat f : kTwoLevelFormats) {
    const std::int64_t group = ggml_group(f);
    const TwoLevelPair t = make_two_level_pair(f, K, N, group, S, 11 + static_cast<unsigned>(f));
    INFO(format_name(f) << " group " << group);
    CHECK(t.two.two_level());
    CHECK(t.two.scale_rows() == K / S);
    CHECK(same_bits(dequantize(t.one), dequantize(t.two)));
    // bytes: codes of a byte per group and column; f32 per super-block (scale, and min)
    const std::int64_t P = t.one.panels(), G = K / group, params = has_mins(f) ? 2 : 1;
    CHECK(t.one.total_bytes() - t.two.total_bytes() ==
          params * P * 32 * (4 * G - (G + 4 * (K / S))));
    for (std::int64_t n : {0, 33, 69})
      for (std::int64_t g : {std::int64_t{0}, G / 2 + 1, G - 1}) {
        CHECK(t.two.scale_of(n / 32, g, n % 32) == t.one.scale_of(n / 32, g, n % 32));
        if (has_mins(f))
          CHECK(t.two.min_of(n / 32, g, n % 32) == t.one.min_of(n / 32, g, n % 32));
      }
    // a copy, a column permutation and the gather keep the numbers
    CHECK(same_bits(dequantize(detail::copy_packed(t.two)), dequantize(t.one)));
    std::vector<std::int32_t> cols(static_cast<std::size_t>(N));
    for (std::int64_t n = 0; n < N; ++n)
      cols[static_cast<std::size_t>(n)] = static_cast<std::int32_t>((n * 37) % N);
    const PackedWeights p2 = permute_columns(t.two, cols);
    CHECK(p2.two_level());
    CHECK(same_bits(dequantize(p2), dequantize(permute_columns(t.one, cols))));
    const std::vector<std::int32_t> ids = {0, 69, 5, 33, 5};
    std::vector<float> e1 = nan_vec(ids.size() * K), e2 = nan_vec(ids.size() * K);
    packed_embedding_gather(ids, t.one, e1, CoreSplit{SplitDim::rows, 2});
    packed_embedding_gather(ids, t.two, e2, CoreSplit{SplitDim::rows, 2});
    CHECK(same_bits(e1, e2));
  }
}

TEST_CASE("two-level scales refuse layouts without a two-level form and products that differ",
          "[two_level]") {
  const std::int64_t K = 512, N = 40;
  const TwoLevelPair t = make_two_level_pair(WeightFormat::int4_min, K, N, 32, 256, 3);
  auto again = [&](std::int64_t super_rows, std::vector<std::int8_t> codes,
                   std::vector<float> supers, const PackedWeights& w) {
    return with_two_level_scales(detail::copy_packed(w), super_rows, codes, supers, t.min_codes,
                                 t.super_mins);
  };
  CHECK_NOTHROW(again(256, t.codes, t.supers, t.one));
  // a code that is not the scale's factor, a super-block value likewise
  auto bad = t.codes;
  bad[7 * N + 3] = static_cast<std::int8_t>(bad[7 * N + 3] + 1);
  CHECK_THROWS_WITH(again(256, bad, t.supers, t.one), Catch::Contains("group 7, column 3"));
  auto bad_super = t.supers;
  bad_super[N + 1] *= 2.0f;
  CHECK_THROWS_WITH(again(256, t.codes, bad_super, t.one), Catch::Contains("column 1"));
  // super rows that are no multiple of the group or do not divide K, wrong sizes
  CHECK_THROWS_AS(again(48, t.codes, t.supers, t.one), Error);
  CHECK_THROWS_AS(again(384, t.codes, t.supers, t.one), Error);
  CHECK_THROWS_AS(again(128, t.codes, t.supers, t.one), Error); // supers sized for 256
  // already two-level; zero points; per channel
  CHECK_THROWS_AS(again(256, t.codes, t.supers, t.two), Error);
  std::vector<std::uint8_t> u(static_cast<std::size_t>(K * N), 3), z(16 * N, 8);
  std::vector<float> s(16 * N, 0.5f);
  const PackedWeights asym = pack_int4_asym(u, s, z, K, N, 32);
  CHECK_THROWS_WITH(with_two_level_scales(detail::copy_packed(asym), 256, t.codes, t.supers),
                    Catch::Contains("without zero points"));
  std::vector<std::int8_t> q(static_cast<std::size_t>(K * N), 1);
  std::vector<float> sc(static_cast<std::size_t>(N), 1.0f);
  CHECK_THROWS_WITH(with_two_level_scales(pack_int8(q, sc, K, N, K), 256,
                                          std::vector<std::int8_t>(N, 1),
                                          std::vector<float>(2 * N)),
                    Catch::Contains("per-channel"));
  std::optional<ErrorKind> kind;
  try {
    again(256, bad, t.supers, t.one);
  } catch (const Error& e) {
    kind = e.kind();
  }
  CHECK(kind == ErrorKind::invalid_input);
}

TEST_CASE("two-level linear gives the one-level bits on every path, both x precisions",
          "[two_level][matmul]") {
  // K = 768: three super-blocks; N = 103: four panels, the last partial (the 4-stream VNNI
  // kernel and its remainder); M = 1 / 3 the GEMV, 6 the multi-row integer GEMV, 40 the GEMM and
  // the AMX tiles.
  const std::int64_t K = 768, N = 103;
  for (WeightFormat f : kTwoLevelFormats)
    for (bool act_order : {false, true}) {
      const std::int64_t group = ggml_group(f);
      const TwoLevelPair t =
          make_two_level_pair(f, K, N, group, 256, 100 + static_cast<unsigned>(f), act_order);
      for (std::int64_t M : {1, 3, 6, 40}) {
        const auto x = random_vec(static_cast<std::size_t>(M * K), 7 + static_cast<unsigned>(M));
        const auto bias = random_vec(static_cast<std::size_t>(N), 9);
        for (const Path& p : paths())
          for (XPrecision prec : {XPrecision::exact, XPrecision::int8}) {
            if (p.amx_emulated && (M < 16 || prec == XPrecision::int8))
              continue; // the tiles take prompts, in their own precision
            std::vector<float> y1 = nan_vec(static_cast<std::size_t>(M * N)), y2 = y1;
            on_path(p, [&] {
              linear(x, t.one, bias, y1, {M, K, N}, {SplitDim::cols, 2}, prec);
              linear(x, t.two, bias, y2, {M, K, N}, {SplitDim::cols, 2}, prec);
            });
            INFO(format_name(f) << (act_order ? " act-order" : "") << " M=" << M << " path "
                                << p.name << (prec == XPrecision::int8 ? " x int8" : " x f32"));
            CHECK(std::isfinite(y1[0]));
            CHECK(same_bits(y1, y2));
          }
      }
    }
}

TEST_CASE("two-level SwiGLU MLP gives the one-level bits", "[two_level][mlp]") {
  const std::int64_t H = 256, I = 512;
  for (WeightFormat f : {WeightFormat::int4_min, WeightFormat::int6_sym, WeightFormat::int6_min}) {
    const std::int64_t group = ggml_group(f);
    const auto g = make_two_level_pair(f, H, I, group, 256, 41);
    const auto u = make_two_level_pair(f, H, I, group, 256, 42);
    const auto d = make_two_level_pair(f, I, H, group, 256, 43);
    for (std::int64_t M : {1, 5, 24}) {
      const auto x = random_vec(static_cast<std::size_t>(M * H), 44);
      for (const Path& p : paths()) {
        std::vector<float> y1 = nan_vec(static_cast<std::size_t>(M * H)), y2 = y1;
        on_path(p, [&] {
          swiglu_mlp(x, g.one, u.one, d.one, y1, {M, H, I}, 1 << 20, {SplitDim::cols, 2});
          swiglu_mlp(x, g.two, u.two, d.two, y2, {M, H, I}, 1 << 20, {SplitDim::cols, 2});
        });
        INFO(format_name(f) << " M=" << M << " path " << p.name);
        CHECK(std::isfinite(y1[0]));
        CHECK(same_bits(y1, y2));
      }
    }
  }
}
