// Flash attention against a naive double-precision reference.
//
// Error bound (documented in docs/kernels.md): for every computed element,
//   |out - ref| <= tol * max|v|   (max over the valid keys of that kv head)
// tol = 2e-5 for f32/bf16/f16 caches (the reference reads the same widened 16-bit values, so the
// bound measures the kernel, not the storage rounding). Sources of error: the exp2 polynomial
// (~2e-7 relative), f32 accumulation over d and over the keys.
// Poisoning: k/v slots past S_valid and q rows past L_valid are NaN; out is NaN-filled before the
// call, rows past L_valid must still be NaN after it (untouched) and every other element finite.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/flash_attention.hpp"

#include "kernel_test_util.hpp"

namespace {

using namespace tpullm;
using namespace tpullm::kernels;
using namespace tpullm_test;

struct FaCase {
  std::string name;
  std::int64_t L, L_valid, S, S_valid, q_heads, kv_heads, d;
  std::int64_t pos0 = 0; ///< position of query row 0 (history length); row i is at pos0 + i
  bool causal = true;
  bool reversed_positions = false; ///< positions pos0 + L_valid - 1 - i (order independence)
  std::size_t budget = 0;          ///< local memory bytes (0 = default)
  CoreSplit split = {};
  double tol = 2e-5;
  /// keys of slot j scaled by 1 + k_ramp * j / S: > 0 makes later scores keep passing the running
  /// max (the decode items' rescale path on most blocks), < 0 lets the first block hold it
  double k_ramp = 0;
  std::int64_t window = 0; ///< sliding window (0: none): keys pos - window < j <= pos
};

template <class KV>
float kv_f32(KV x) {
  return detail::to_f32(x);
}

template <class KV>
void run_case(const FaCase& c) {
  const float nan = kNaN;
  std::mt19937 rng(1234u + static_cast<unsigned>(c.L * 31 + c.S * 7 + c.d));
  std::normal_distribution<float> nd(0.f, 1.f);
  const std::int64_t d = c.d, G = c.q_heads / c.kv_heads;
  std::vector<float> q(static_cast<std::size_t>(c.L * c.q_heads * d));
  for (std::int64_t l = 0; l < c.L; ++l)
    for (std::int64_t e = 0; e < c.q_heads * d; ++e)
      q[static_cast<std::size_t>(l * c.q_heads * d + e)] = l < c.L_valid ? nd(rng) : nan;
  // kf, vf: the values as stored (what the kernel must read back), [S, kv_heads, d]; k, v: the
  // cache in its storage type (an int8 cache: head rows of codes and scale, kv8.hpp)
  std::vector<float> kf(static_cast<std::size_t>(c.S * c.kv_heads * d)), vf(kf.size());
  for (std::int64_t j = 0; j < c.S; ++j)
    for (std::int64_t e = 0; e < c.kv_heads * d; ++e) {
      const auto i = static_cast<std::size_t>(j * c.kv_heads * d + e);
      // a larger spread of k makes the softmax peaky, exercising the running-max rescale
      const float ramp = static_cast<float>(1.0 + c.k_ramp * double(j) / double(c.S));
      kf[i] = j < c.S_valid ? 2.0f * ramp * nd(rng) : nan;
      vf[i] = j < c.S_valid ? nd(rng) : nan;
    }
  const std::int64_t row = kv_row_elems<KV>(d);
  std::vector<KV> k(static_cast<std::size_t>(c.S * c.kv_heads * row)), v(k.size());
  for (std::int64_t r = 0; r < c.S * c.kv_heads; ++r) {
    const auto e = static_cast<std::size_t>(r * d);
    if constexpr (std::is_same_v<KV, kv8_t>) {
      kv8_quantize_row(kf.data() + e, k.data() + r * row, d);
      kv8_quantize_row(vf.data() + e, v.data() + r * row, d);
      kv8_dequantize_row(k.data() + r * row, kf.data() + e, d);
      kv8_dequantize_row(v.data() + r * row, vf.data() + e, d);
    } else {
      for (std::int64_t x = 0; x < d; ++x) {
        k[e + static_cast<std::size_t>(x)] = from_f32<KV>(kf[e + static_cast<std::size_t>(x)]);
        v[e + static_cast<std::size_t>(x)] = from_f32<KV>(vf[e + static_cast<std::size_t>(x)]);
        kf[e + static_cast<std::size_t>(x)] = kv_f32(k[e + static_cast<std::size_t>(x)]);
        vf[e + static_cast<std::size_t>(x)] = kv_f32(v[e + static_cast<std::size_t>(x)]);
      }
    }
  }
  std::vector<std::int32_t> pos(static_cast<std::size_t>(c.L));
  for (std::int64_t i = 0; i < c.L; ++i)
    pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(
        c.reversed_positions ? (i < c.L_valid ? c.pos0 + c.L_valid - 1 - i : 0) : c.pos0 + i);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  // reference in double
  std::vector<double> ref(q.size(), 0.0);
  std::vector<double> maxv(static_cast<std::size_t>(c.kv_heads), 0.0);
  for (std::int64_t h = 0; h < c.kv_heads; ++h)
    for (std::int64_t j = 0; j < c.S_valid; ++j)
      for (std::int64_t x = 0; x < d; ++x)
        maxv[static_cast<std::size_t>(h)] =
            std::max(maxv[static_cast<std::size_t>(h)],
                     std::abs(static_cast<double>(
                         vf[static_cast<std::size_t>((j * c.kv_heads + h) * d + x)])));
  for (std::int64_t i = 0; i < c.L_valid; ++i)
    for (std::int64_t h = 0; h < c.q_heads; ++h) {
      const std::int64_t kvh = h / G;
      const std::int64_t kend =
          c.causal ? std::min<std::int64_t>(c.S_valid, pos[static_cast<std::size_t>(i)] + 1)
                   : c.S_valid;
      const std::int64_t kstart =
          c.window > 0 ? std::max<std::int64_t>(0, pos[static_cast<std::size_t>(i)] - c.window + 1)
                       : 0;
      std::vector<double> sc(static_cast<std::size_t>(kend), 0.0);
      double mx = -1e300;
      for (std::int64_t j = kstart; j < kend; ++j) {
        double acc = 0;
        for (std::int64_t x = 0; x < d; ++x)
          acc += static_cast<double>(q[static_cast<std::size_t>((i * c.q_heads + h) * d + x)]) *
                 kf[static_cast<std::size_t>((j * c.kv_heads + kvh) * d + x)];
        sc[static_cast<std::size_t>(j)] = acc * scale;
        mx = std::max(mx, acc * scale);
      }
      double den = 0;
      for (std::int64_t j = kstart; j < kend; ++j)
        den += (sc[static_cast<std::size_t>(j)] = std::exp(sc[static_cast<std::size_t>(j)] - mx));
      for (std::int64_t x = 0; x < d; ++x) {
        double acc = 0;
        for (std::int64_t j = kstart; j < kend; ++j)
          acc += sc[static_cast<std::size_t>(j)] *
                 vf[static_cast<std::size_t>((j * c.kv_heads + kvh) * d + x)];
        ref[static_cast<std::size_t>((i * c.q_heads + h) * d + x)] = acc / den;
      }
    }

  // the AMX prefill path (tile unit or emulator) computes with q * scale * log2 e, k, v and p
  // rounded to bf16: it is checked against a reference on the rounded q, k, v with the bound
  // (2^-8 + 1e-4) max|v| (P's bf16 rounding; docs/kernels.md)
  std::vector<double> ref_bf16;
  if (c.L_valid > 1) {
    auto bf = [](double x) {
      const std::uint32_t u = std::uint32_t{detail::amx_bf16_rne(float(x))} << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return double(f);
    };
    ref_bf16.assign(q.size(), 0.0);
    const double qs = double(scale) * 1.4426950408889634;
    for (std::int64_t i = 0; i < c.L_valid; ++i)
      for (std::int64_t h = 0; h < c.q_heads; ++h) {
        const std::int64_t kvh = h / G;
        const std::int64_t kend =
            c.causal ? std::min<std::int64_t>(c.S_valid, pos[static_cast<std::size_t>(i)] + 1)
                     : c.S_valid;
        const std::int64_t kstart =
            c.window > 0
                ? std::max<std::int64_t>(0, pos[static_cast<std::size_t>(i)] - c.window + 1)
                : 0;
        std::vector<double> sc(static_cast<std::size_t>(kend), 0.0);
        double mx = -1e300;
        for (std::int64_t j = kstart; j < kend; ++j) {
          double acc = 0;
          for (std::int64_t x = 0; x < d; ++x)
            acc += bf(float(q[static_cast<std::size_t>((i * c.q_heads + h) * d + x)] * float(qs))) *
                   bf(kf[static_cast<std::size_t>((j * c.kv_heads + kvh) * d + x)]);
          sc[static_cast<std::size_t>(j)] = acc;
          mx = std::max(mx, acc);
        }
        double den = 0;
        for (std::int64_t j = kstart; j < kend; ++j)
          den +=
              (sc[static_cast<std::size_t>(j)] = std::exp2(sc[static_cast<std::size_t>(j)] - mx));
        for (std::int64_t x = 0; x < d; ++x) {
          double acc = 0;
          for (std::int64_t j = kstart; j < kend; ++j)
            acc += sc[static_cast<std::size_t>(j)] *
                   bf(vf[static_cast<std::size_t>((j * c.kv_heads + kvh) * d + x)]);
          ref_bf16[static_cast<std::size_t>((i * c.q_heads + h) * d + x)] = acc / den;
        }
      }
  }
  AttentionShape shape{c.L, c.L_valid, c.S, c.S_valid, c.q_heads, c.kv_heads, d, scale, c.causal};
  shape.window = c.window;
  std::vector<std::pair<Isa, bool>> paths; // (isa, AMX on the tile emulator)
  for (Isa isa : isas_to_test())
    paths.push_back({isa, false});
  if (c.L_valid > 1)
    paths.push_back({Isa::portable, true});
  for (auto [isa, amx_emulated] : paths) {
    ScopedIsa guard(isa);
    std::optional<amx::ScopedEmulation> emu;
    if (amx_emulated)
      emu.emplace();
    // on the tile unit a bf16 cache prefills on AMX with q and p rounded to bf16; an int8 or f16
    // cache with an even head dim up to 64 does too, but with every operand in exact bf16 terms,
    // held to the vector path's bound; f32 keeps the vector path. The emulator takes every float
    // cache.
    const bool on_amx = !std::is_same_v<KV, kv8_t> && c.L_valid > 1 &&
                        (amx_emulated || (isa == Isa::amx && std::is_same_v<KV, bf16_t>));
    const std::vector<double>& rf = on_amx ? ref_bf16 : ref;
    const double tol = on_amx ? std::ldexp(1.0, -8) + 1e-4 : c.tol;
    std::vector<float> out(q.size(), nan);
    flash_attention<KV>(q, k, v, pos, out, shape, c.split, c.budget);
    double worst = 0;
    std::int64_t bad_untouched = 0, non_finite = 0;
    for (std::int64_t i = 0; i < c.L; ++i)
      for (std::int64_t h = 0; h < c.q_heads; ++h)
        for (std::int64_t x = 0; x < d; ++x) {
          const auto e = static_cast<std::size_t>((i * c.q_heads + h) * d + x);
          if (i >= c.L_valid) {
            bad_untouched += !std::isnan(out[e]);
            continue;
          }
          if (!std::isfinite(out[e])) {
            ++non_finite;
            continue;
          }
          const double err =
              std::abs(out[e] - rf[e]) / std::max(1e-30, maxv[static_cast<std::size_t>(h / G)]);
          worst = std::max(worst, err);
        }
    INFO(c.name << " kv=" << storage_name<KV>() << " isa=" << isa_name(isa)
                << (amx_emulated ? " (amx emulated)" : "") << " worst=" << worst);
    CHECK(non_finite == 0);
    CHECK(bad_untouched == 0);
    CHECK(worst <= tol);
  }
}

std::vector<FaCase> numerics_cases() {
  std::vector<FaCase> cs;
  const CoreSplit heads2{SplitDim::heads, 2}, rows2{SplitDim::rows, 2};
  // prefill (S = L, positions from 0)
  for (std::int64_t d : {32, 64, 80, 128})
    cs.push_back({"prefill d" + std::to_string(d), 37, 37, 37, 37, 4, 2, d});
  cs.push_back({"prefill L1", 1, 1, 1, 1, 2, 2, 64});
  cs.push_back({"prefill gqa7 big", 100, 100, 100, 100, 14, 2, 64, 0, true, false, 0, rows2});
  cs.push_back({"prefill mha", 70, 70, 70, 70, 3, 3, 64, 0, true, false, 0, heads2});
  cs.push_back({"prefill mqa", 45, 45, 45, 45, 8, 1, 128});
  // prefill with history crossing key-tile boundaries, positions not starting at 0
  cs.push_back({"history 130", 20, 20, 150, 150, 7, 1, 64, 130});
  cs.push_back({"history 37 gqa2", 64, 64, 101, 101, 4, 2, 80, 37, true, false, 0, rows2});
  cs.push_back({"history 250 d128", 33, 33, 283, 283, 8, 2, 128, 250});
  // valid counts below the allocated sizes (pads are NaN-poisoned)
  cs.push_back({"L_valid<L S_valid<S", 40, 29, 300, 29 + 100, 6, 2, 64, 100});
  cs.push_back({"prefill padded", 64, 50, 64, 50, 14, 2, 64, 0, true, false, 0, heads2});
  // decode: L = 1 at the last valid slot of a larger cache
  for (std::int64_t sv : {1, 2, 17, 128, 129, 300})
    cs.push_back({"decode S_valid " + std::to_string(sv), 1, 1, 512, sv, 14, 2, 64, sv - 1});
  cs.push_back({"decode d128 gqa4", 1, 1, 1024, 700, 32, 8, 128, 699, true, false, 0, heads2});
  cs.push_back({"decode d80 gqa1", 1, 1, 64, 33, 2, 2, 80, 32});
  cs.push_back({"decode S=1", 1, 1, 1, 1, 7, 1, 32, 0});
  // flash-decoding: key chunks across cores (>= 256 keys each) and their merge, any split
  const CoreSplit cols2{SplitDim::cols, 2}, rows3{SplitDim::rows, 3};
  cs.push_back({"fd mqa 2 chunks", 1, 1, 1100, 1037, 8, 1, 64, 1036, true, false, 0, cols2});
  cs.push_back({"fd mha 3 chunks d40", 1, 1, 900, 800, 3, 3, 40, 799, true, false, 0, rows3});
  cs.push_back({"fd gqa7 2 chunks", 1, 1, 600, 530, 14, 2, 64, 529, true, false, 0, heads2});
  cs.push_back({"fd gqa4 d128 heads", 1, 1, 400, 300, 8, 2, 128, 299, true, false, 0, rows3});
  cs.push_back({"fd d256 mqa", 1, 1, 700, 620, 4, 1, 256, 619, true, false, 0, cols2});
  cs.push_back({"fd non-causal", 1, 1, 600, 555, 4, 2, 64, 3, false, false, 0, cols2});
  cs.push_back({"fd L_valid 1 of 3", 3, 1, 700, 600, 6, 2, 64, 599, true, false, 0, cols2});
  // the decode items of every ISA: GQA groups 1..16 (row tiles of 8 and 4 with remainders),
  // head dims on compiled-in widths (64, 128, 256) and run-time ones (96, 48, 24), 16-key blocks
  // cut by S_valid and by the position, rising and falling scores (rescale on most blocks / on
  // the first only), and a split into 4 chunks
  const CoreSplit heads4{SplitDim::heads, 4};
  cs.push_back({"fd gqa8 d128 2 chunks", 1, 1, 700, 613, 16, 2, 128, 612, true, false, 0, heads2});
  cs.push_back({"fd gqa16 d64", 1, 1, 300, 283, 16, 1, 64, 282});
  cs.push_back({"fd gqa5 d96", 1, 1, 200, 150, 10, 2, 96, 149});
  cs.push_back({"fd gqa3 d48", 1, 1, 100, 77, 9, 3, 48, 76});
  cs.push_back({"fd mha d24", 1, 1, 60, 45, 4, 4, 24, 44});
  cs.push_back({"fd gqa8 d256 mqa", 1, 1, 300, 270, 8, 1, 256, 269, true, false, 0, cols2});
  cs.push_back({"fd gqa7 4 chunks", 1, 1, 2100, 2085, 14, 2, 64, 2084, true, false, 0, heads4});
  cs.push_back({"fd position masks keys", 1, 1, 900, 850, 14, 2, 64, 600, true, false, 0, cols2});
  FaCase rising{"fd rising scores", 1, 1, 640, 600, 8, 2, 128, 599, true, false, 0, heads2};
  rising.k_ramp = 3.0;
  cs.push_back(rising);
  FaCase falling{"fd falling scores", 1, 1, 640, 601, 14, 2, 64, 600, true, false, 0, heads2};
  falling.k_ramp = -0.9;
  cs.push_back(falling);
  // prefill against a long history with rising scores: several 128-key chunks of the AMX
  // resident item, rows whose reference max moves mid-row
  FaCase prising{"prefill rising scores", 70, 70, 700, 700, 7, 1, 64, 630, true, false, 0, rows2};
  prising.k_ramp = 3.0;
  cs.push_back(prising);
  // position beyond S_valid: every valid key is visible
  cs.push_back({"pos beyond S_valid", 3, 3, 64, 20, 2, 1, 64, 40});
  // small budget forces 16x16 tiles; order-independent masking; non-causal
  cs.push_back({"tiny tiles", 50, 50, 90, 90, 4, 2, 64, 40, true, false, 20 * 1024});
  cs.push_back({"reversed positions", 30, 30, 60, 60, 4, 2, 64, 30, true, true});
  cs.push_back({"non-causal", 20, 20, 77, 70, 4, 2, 64, 0, false});
  // sliding windows (transformers' sliding_window: keys pos - window < j <= pos): prefill tiles
  // whose first key tiles fall out of the window, partly visible tiles at both ends, history,
  // tiny tiles, reversed positions, decode chunks of the window only, and a window wider than
  // the context (no effect)
  auto windowed = [&](FaCase c, std::int64_t w) {
    c.name += " window " + std::to_string(w);
    c.window = w;
    cs.push_back(c);
  };
  windowed({"prefill", 100, 100, 100, 100, 4, 2, 64}, 17);
  windowed({"prefill gqa7", 300, 300, 300, 300, 14, 2, 64, 0, true, false, 0, rows2}, 130);
  windowed({"history 250 d128", 33, 33, 283, 283, 8, 2, 128, 250}, 40);
  windowed({"history 37 gqa2", 64, 64, 101, 101, 4, 2, 80, 37, true, false, 0, rows2}, 1);
  windowed({"tiny tiles", 50, 50, 90, 90, 4, 2, 64, 40, true, false, 20 * 1024}, 23);
  windowed({"reversed positions", 30, 30, 60, 60, 4, 2, 64, 30, true, true}, 9);
  windowed({"decode", 1, 1, 512, 300, 14, 2, 64, 299}, 100);
  windowed({"fd mqa 2 chunks", 1, 1, 1100, 1037, 8, 1, 64, 1036, true, false, 0, cols2}, 600);
  windowed({"fd gqa7 4 chunks", 1, 1, 2100, 2085, 14, 2, 64, 2084, true, false, 0, heads4}, 1500);
  windowed({"fd L_valid 2 of 3", 3, 2, 700, 600, 6, 2, 64, 598, true, false, 0, cols2}, 33);
  windowed({"decode wider than context", 1, 1, 64, 33, 2, 2, 80, 32}, 4096);
  return cs;
}

} // namespace

TEST_CASE("flash_attention f32 matches double reference", "[kernels][attention]") {
  for (const FaCase& c : numerics_cases()) {
    SECTION(c.name) {
      run_case<float>(c);
    }
  }
}

TEST_CASE("flash_attention 16-bit caches", "[kernels][attention]") {
  FaCase c{"bf16 history", 24, 24, 200, 200, 4, 2, 64, 176};
  run_case<bf16_t>(c);
  FaCase c2{"f16 decode", 1, 1, 300, 201, 14, 2, 64, 200};
  run_case<f16_t>(c2);
  FaCase c4{"bf16 decode 2 chunks", 1, 1, 800, 777, 4, 1, 80, 776};
  c4.split = {SplitDim::cols, 2};
  run_case<bf16_t>(c4);
  FaCase c5{"f16 decode 3 chunks d128", 1, 1, 900, 899, 8, 2, 128, 898};
  c5.split = {SplitDim::heads, 3};
  run_case<f16_t>(c5);
  FaCase c3{"f16 prefill d80", 40, 33, 40, 33, 2, 1, 80};
  run_case<f16_t>(c3);
}

// A KV cache in f16 or bf16 (--kv-dtype) goes through every path the f32 cache does: prefill
// tiles, history, the AMX emulator, flash-decoding chunks and their merge. The reference reads
// the same rounded keys and values, so the f32 bound holds (the storage rounding is verify's).
// A 16-bit cache's key tiles are widened into f32 tile buffers, so its smallest tile needs more
// local memory (25920 bytes at d = 64): the tiny-tiles budget is raised to that for these caches
// (still the smallest tile), and the f32 case's 20 KiB is refused with the reason.
TEST_CASE("flash_attention f16 and bf16 caches on every case", "[kernels][attention]") {
  for (FaCase c : numerics_cases()) {
    SECTION(c.name) {
      if (c.budget > 0 && c.budget < 25920) {
        const std::int64_t n = c.S * c.kv_heads * c.d;
        std::vector<f16_t> kv(static_cast<std::size_t>(n));
        std::vector<float> q(static_cast<std::size_t>(c.L * c.q_heads * c.d)), out(q.size());
        std::vector<std::int32_t> pos(static_cast<std::size_t>(c.L), 0);
        const AttentionShape sh{c.L,        c.L_valid, c.S,    c.S_valid, c.q_heads,
                                c.kv_heads, c.d,       0.125f, c.causal};
        ScopedIsa guard(Isa::portable);
        CHECK_THROWS_WITH(
            flash_attention<f16_t>(q, kv, kv, pos, out, sh, c.split, c.budget),
            Catch::Contains("below the smallest 16x16 tile (25920 bytes for head_dim 64)"));
        c.budget = 25920;
      }
      run_case<f16_t>(c);
      run_case<bf16_t>(c);
    }
  }
}

// An int8 cache (--kv-dtype int8: head rows of codes and an f32 scale, kv8.hpp) goes through the
// same cases: decode items of every ISA widen each block with its rows' scales, prefill tiles
// widen as they copy. The reference reads the dequantized values (code * scale), so the f32
// bound holds; what the quantization itself costs is verify's bound (docs/guarantees.md).
TEST_CASE("flash_attention int8 caches on every case", "[kernels][attention]") {
  for (FaCase c : numerics_cases()) {
    SECTION(c.name) {
      if (c.budget > 0 && c.budget < 25920)
        c.budget = 25920; // tiles are copied and widened, as for a 16-bit cache
      run_case<kv8_t>(c);
    }
  }
}

// A segment of up to kDecodeArithmeticRows rows (a speculative verify call) computes each row as
// the decode step at its position does, bit for bit, for a split of as many cores (a row's key
// chunks depend on its keys and the cores): segments at positions where the rows' chunk counts
// differ (keys 3..18, 505..520 around the 2-chunk edge, 1020..1035 around 3 and 4 chunks)
// against single-row calls, for every cache type and ISA.
template <class KV>
void check_rows_as_decode_steps(std::int64_t window = 0) {
  const std::int64_t S = 1100, H = 2, G = 7, QH = H * G, d = 64, R = kDecodeArithmeticRows;
  const std::int64_t row = kv_row_elems<KV>(d);
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<KV> k(static_cast<std::size_t>(S * H * row)), v(k.size());
  std::vector<float> f(static_cast<std::size_t>(d));
  for (std::int64_t r = 0; r < S * H; ++r)
    for (auto* cache : {&k, &v}) {
      for (auto& e : f)
        e = nd(rng);
      if constexpr (std::is_same_v<KV, kv8_t>)
        kv8_quantize_row(f.data(), cache->data() + r * row, d);
      else
        for (std::int64_t x = 0; x < d; ++x)
          (*cache)[static_cast<std::size_t>(r * d + x)] =
              from_f32<KV>(f[static_cast<std::size_t>(x)]);
    }
  std::vector<float> q(static_cast<std::size_t>(R * QH * d));
  for (auto& e : q)
    e = 2.f * nd(rng);
  const float scale = 0.125f;
  for (Isa isa : isas_to_test()) {
    ScopedIsa guard(isa);
    for (std::int64_t pos0 : {3, 505, 1020})
      for (std::int64_t rows : {std::int64_t{2}, std::int64_t{5}, R}) {
        std::vector<std::int32_t> pos(static_cast<std::size_t>(R));
        for (std::int64_t i = 0; i < R; ++i)
          pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(pos0 + i);
        AttentionShape seg{R, rows, S, pos0 + rows, QH, H, d, scale, true};
        seg.window = window;
        for (const CoreSplit split : {CoreSplit{SplitDim::rows, 2}, CoreSplit{SplitDim::heads, 3},
                                      CoreSplit{SplitDim::none, 4}}) {
          std::vector<float> out(q.size(), kNaN);
          flash_attention<KV>(q, k, v, pos, out, seg, split);
          const int parts = split.dim == SplitDim::none ? 1 : split.parts;
          for (std::int64_t i = 0; i < rows; ++i) {
            AttentionShape step{1, 1, S, pos0 + i + 1, QH, H, d, scale, true};
            step.window = window;
            std::vector<float> one(static_cast<std::size_t>(QH * d), kNaN);
            const auto qi =
                std::span<const float>(q).subspan(static_cast<std::size_t>(i * QH * d), one.size());
            flash_attention<KV>(
                qi, k, v,
                std::span<const std::int32_t>(pos).subspan(static_cast<std::size_t>(i), 1), one,
                step, CoreSplit{SplitDim::cols, parts});
            INFO("kv=" << storage_name<KV>() << " isa=" << isa_name(isa) << " window " << window
                       << " pos " << pos0 + i << " of a segment of " << rows << " on " << parts
                       << " cores");
            REQUIRE(std::memcmp(one.data(), out.data() + i * QH * d, one.size() * 4) == 0);
          }
          for (std::int64_t i = rows; i < R; ++i) // rows past L_valid untouched
            CHECK(std::isnan(out[static_cast<std::size_t>(i * QH * d)]));
        }
      }
  }
}

TEST_CASE("flash_attention computes a short segment's rows bit for bit as decode steps",
          "[kernels][attention]") {
  check_rows_as_decode_steps<float>();
  check_rows_as_decode_steps<bf16_t>();
  check_rows_as_decode_steps<f16_t>();
  check_rows_as_decode_steps<kv8_t>();
  // under a sliding window each row's keys start at its own window (chunks cut from there)
  check_rows_as_decode_steps<float>(300);
  check_rows_as_decode_steps<bf16_t>(7);
}

TEST_CASE("int8 KV rows: codes, scale and their bound", "[kernels][attention]") {
  const std::int64_t d = 64;
  std::vector<float> x(static_cast<std::size_t>(d));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f); // |x| < 9.5 for these 64 draws
  for (auto& e : x)
    e = nd(rng);
  x[5] = -9.5f; // the row's largest magnitude
  std::vector<kv8_t> row(static_cast<std::size_t>(kv_row_elems<kv8_t>(d)));
  kv8_quantize_row(x.data(), row.data(), d);
  const float scale = kv8_scale(row.data(), d);
  CHECK(scale == 9.5f / 127.f);
  CHECK(row[5].code == -127);
  std::vector<float> back(x.size());
  kv8_dequantize_row(row.data(), back.data(), d);
  for (std::int64_t i = 0; i < d; ++i) {
    const auto e = static_cast<std::size_t>(i);
    CHECK(std::abs(back[e] - x[e]) <= 0.5f * scale * (1 + 1e-6f));
  }
  // zeros keep scale 0 and codes 0; a NaN makes the whole row read back as NaN
  std::vector<float> z(x.size(), 0.f);
  kv8_quantize_row(z.data(), row.data(), d);
  CHECK(kv8_scale(row.data(), d) == 0.f);
  kv8_dequantize_row(row.data(), back.data(), d);
  CHECK(back[0] == 0.f);
  x[9] = std::numeric_limits<float>::quiet_NaN();
  kv8_quantize_row(x.data(), row.data(), d);
  kv8_dequantize_row(row.data(), back.data(), d);
  CHECK(std::isnan(back[0]));
  CHECK(std::isnan(back[63]));
}

TEST_CASE("flash_attention tile choice respects the budget", "[kernels][attention]") {
  const auto t = choose_attention_tiles(1000, 64, 1 << 20);
  CHECK(t.q_rows == 64);
  CHECK(t.k_cols == 128);
  CHECK(AttentionTiles::bytes(t.q_rows, t.k_cols, 64, false) <= (1u << 20));
  const auto small = choose_attention_tiles(7, 128, 1 << 20);
  CHECK(small.q_rows == 16);
  const auto tight = choose_attention_tiles(1000, 128, 64 * 1024);
  CHECK(AttentionTiles::bytes(tight.q_rows, tight.k_cols, 128, false) <= 64u * 1024u);
  CHECK_THROWS_KIND(choose_attention_tiles(100, 128, 1024), internal);
}

TEST_CASE("flash_attention rejects bad arguments", "[kernels][attention]") {
  std::vector<float> q(2 * 4 * 16, 0.f), kv(8 * 2 * 16, 0.f), out(q.size());
  std::vector<std::int32_t> pos{0, 1};
  AttentionShape s{2, 2, 8, 8, 4, 2, 16, 0.25f, true};
  CHECK_NOTHROW(flash_attention<float>(q, kv, kv, pos, out, s));
  auto bad = s;
  bad.q_heads = 3;
  CHECK_THROWS_KIND(flash_attention<float>(q, kv, kv, pos, out, bad), internal);
  bad = s;
  bad.S_valid = 9;
  CHECK_THROWS_KIND(flash_attention<float>(q, kv, kv, pos, out, bad), internal);
  bad = s;
  bad.L_valid = 3;
  CHECK_THROWS_KIND(flash_attention<float>(q, kv, kv, pos, out, bad), internal);
  bad = s;
  bad.S_valid = 0;
  CHECK_THROWS_KIND(flash_attention<float>(q, kv, kv, pos, out, bad), internal);
  std::vector<std::int32_t> neg{0, -1};
  CHECK_THROWS_KIND(flash_attention<float>(q, kv, kv, neg, out, s), invalid_input);
  // a window: > 0 on causal attention only, and never starting past the valid keys
  bad = s;
  bad.window = -1;
  CHECK_THROWS_KIND(flash_attention<float>(q, kv, kv, pos, out, bad), internal);
  bad = s;
  bad.window = 2;
  bad.causal = false;
  CHECK_THROWS_KIND(flash_attention<float>(q, kv, kv, pos, out, bad), internal);
  bad = s;
  bad.window = 2;
  bad.S_valid = 3;
  std::vector<std::int32_t> far{5, 6}; // windows [4, 5] and [5, 6] past the 3 valid keys
  CHECK_THROWS_KIND(flash_attention<float>(q, kv, kv, far, out, bad), invalid_input);
  std::vector<std::int32_t> near{2, 3}; // [1, 2] and [2, 3] still hold key 2
  CHECK_NOTHROW(flash_attention<float>(q, kv, kv, near, out, bad));
  std::vector<float> small_kv(10);
  CHECK_THROWS_KIND(flash_attention<float>(q, small_kv, kv, pos, out, s), internal);
  // past kDecodeArithmeticRows rows (prefill tiles) a key split is refused
  const std::int64_t L = kDecodeArithmeticRows + 1;
  std::vector<float> ql(static_cast<std::size_t>(L * 4 * 16), 0.f), outl(ql.size()),
      kvl(static_cast<std::size_t>(L * 2 * 16), 0.f);
  std::vector<std::int32_t> posl(static_cast<std::size_t>(L), 0);
  AttentionShape ls{L, L, L, L, 4, 2, 16, 0.25f, false};
  CHECK_THROWS_KIND(
      flash_attention<float>(ql, kvl, kvl, posl, outl, ls, CoreSplit{SplitDim::cols, 2}), internal);
  // decode steps and short segments accept a key split (flash-decoding)
  CHECK_NOTHROW(flash_attention<float>(q, kv, kv, pos, out, s, CoreSplit{SplitDim::cols, 2}));
  AttentionShape dec{1, 1, 8, 8, 4, 2, 16, 0.25f, true};
  CHECK_NOTHROW(flash_attention<float>(q, kv, kv, pos, out, dec, CoreSplit{SplitDim::cols, 2}));
}
