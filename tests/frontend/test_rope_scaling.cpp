// RoPE position schemes past the training length (issue 38): YaRN's frequencies and attention
// factor in the tables, against a double-precision evaluation of transformers'
// _compute_yarn_parameters written out step by step here, and the yarn keys of a GGUF file.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "tpullm/frontend/gguf.hpp"
#include "tpullm/frontend/gguf_model.hpp"
#include "tpullm/frontend/gguf_writer.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/rope_tables.hpp"

using namespace tpullm;
using namespace tpullm::frontend;
using Catch::Contains;
using tpullm::conversion::GgmlType;
using tpullm::kernels::RopeScaling;

namespace rope_scaling_test {

struct Yarn {
  std::int64_t dim;
  double base, factor, orig, beta_fast, beta_slow;
  bool truncate;
};

/// transformers' yarn inv_freq in double: pos_freqs = base^(2i/dim); the correction dims of
/// beta_fast / beta_slow rotations over the original context, floor / ceil when truncating,
/// clamped to [0, dim - 1]; a ramp linear in the index between them (1 interpolates).
std::vector<double> yarn_reference(const Yarn& y) {
  const double pi = 3.14159265358979323846;
  const auto corr = [&](double rot) {
    return (static_cast<double>(y.dim) * std::log(y.orig / (rot * 2 * pi))) /
           (2 * std::log(y.base));
  };
  double low = corr(y.beta_fast), high = corr(y.beta_slow);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(y.dim - 1));
  if (low == high)
    high += 0.001;
  std::vector<double> out;
  for (std::int64_t i = 0; i < y.dim / 2; ++i) {
    const double pos = std::pow(y.base, static_cast<double>(2 * i) / static_cast<double>(y.dim));
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1 - ramp;
    out.push_back(1 / (y.factor * pos) * (1 - extrapolation_factor) +
                  1 / pos * extrapolation_factor);
  }
  return out;
}

RopeScaling scaling_of(const Yarn& y) {
  RopeScaling s;
  s.kind = RopeScaling::Kind::yarn;
  s.factor = y.factor;
  s.original_max_position_embeddings = static_cast<std::int64_t>(y.orig);
  s.beta_fast = y.beta_fast;
  s.beta_slow = y.beta_slow;
  s.truncate = y.truncate;
  return s;
}

} // namespace rope_scaling_test

using namespace rope_scaling_test;

TEST_CASE("yarn frequencies follow transformers' formula", "[rope][yarn]") {
  for (const Yarn& y : {Yarn{128, 1e6, 4.0, 32768, 32, 1, true},   // Qwen2.5-7B long context
                        Yarn{64, 1e6, 4.0, 32768, 32, 1, true},    // Qwen2.5-0.5B
                        Yarn{128, 1e4, 40.0, 4096, 32, 1, true},   // DeepSeek-style
                        Yarn{64, 5e5, 8.0, 8192, 16, 2, false}}) { // no truncation
    INFO("dim " << y.dim << " base " << y.base << " factor " << y.factor);
    const std::vector<double> want = yarn_reference(y);
    // f32 as transformers computes: the exponent 2i/d rounded to f32 moves base^(2i/d) by up to
    // ln(base) half-ulps relative, and each of the (at most 8) f32 operations by one more.
    const double bound = (std::log(y.base) + 8.0) * 0x1p-24;
    const std::vector<float> got = kernels::rope_inv_freq(y.dim, y.base, scaling_of(y));
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("i " << i);
      CHECK(std::abs(static_cast<double>(got[i]) - want[i]) <= bound * want[i]);
    }
  }
  // Qwen2.5-7B: the ramp runs from index 23 (floor 23.6) to 40 (ceil 39.65). Below it the
  // frequencies are the default ones bit for bit, above it they are divided by the factor.
  const Yarn q{128, 1e6, 4.0, 32768, 32, 1, true};
  const std::vector<float> plain = kernels::rope_inv_freq(128, 1e6);
  const std::vector<float> yarn = kernels::rope_inv_freq(128, 1e6, scaling_of(q));
  for (std::size_t i = 0; i <= 23; ++i)
    CHECK(yarn[i] == plain[i]);
  for (std::size_t i = 24; i < 40; ++i) {
    CHECK(yarn[i] < plain[i]);
    CHECK(yarn[i] > plain[i] / 4.0f);
  }
  for (std::size_t i = 40; i < 64; ++i) {
    const float p =
        static_cast<float>(std::pow(1e6, static_cast<double>(static_cast<float>(2 * i) / 128.0f)));
    CHECK(yarn[i] == 1.0f / (4.0f * p));
  }
}

TEST_CASE("the attention factor scales cos and sin in f32", "[rope][yarn]") {
  RopeScaling s = scaling_of({64, 1e6, 4.0, 32768, 32, 1, true});
  const kernels::RopeTables one = kernels::build_rope_tables(40, 64, 1e6, s);
  s.attention_factor = 0.1 * std::log(4.0) + 1.0;
  const kernels::RopeTables scaled = kernels::build_rope_tables(40, 64, 1e6, s);
  const auto a = static_cast<float>(s.attention_factor);
  REQUIRE(scaled.cos.size() == one.cos.size());
  for (std::size_t i = 0; i < one.cos.size(); ++i) {
    CHECK(scaled.cos[i] == one.cos[i] * a);
    CHECK(scaled.sin[i] == one.sin[i] * a);
  }
  s.attention_factor = 0;
  CHECK_THROWS(kernels::build_rope_tables(4, 64, 1e6, s));
}

namespace rope_scaling_test {

/// A llama GGUF's metadata with the given rope scaling keys and a token_embd tensor.
GgufFile yarn_gguf(const std::function<void(GgufWriter&)>& keys, std::vector<std::byte>& image) {
  GgufWriter w({}, OutputOptions{.fsync = false});
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 64);
  w.set_u32("llama.feed_forward_length", 128);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.attention.head_count", 2);
  w.set_u32("llama.context_length", 32768);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32("llama.rope.freq_base", 1e6f);
  keys(w);
  w.add_tensor("token_embd.weight", GgmlType::f32, {64, 8}, std::vector<std::byte>(64 * 8 * 4));
  image = w.image();
  return GgufFile::parse(image, nullptr, "yarn.gguf");
}

} // namespace rope_scaling_test

TEST_CASE("GGUF yarn keys as llama.cpp writes them", "[rope][yarn][gguf]") {
  std::vector<std::byte> img;
  HfConfig c = gguf_config(yarn_gguf(
      [](GgufWriter& w) {
        w.set_string("llama.rope.scaling.type", "yarn");
        w.set_f32("llama.rope.scaling.factor", 4.0f);
        w.set_u32("llama.rope.scaling.original_context_length", 32768);
      },
      img));
  CHECK(c.rope.type == RopeType::yarn);
  CHECK(c.rope.factor == 4.0);
  CHECK(c.rope.original_max_position_embeddings == 32768);
  CHECK(c.rope.beta_fast == 32.0);
  CHECK(c.rope.beta_slow == 1.0);
  CHECK(c.rope.attention_factor == Approx(0.1 * std::log(4.0) + 1.0).epsilon(1e-12));
  CHECK(describe_config(c).dims.max_position == 131072);

  c = gguf_config(yarn_gguf(
      [](GgufWriter& w) {
        w.set_string("llama.rope.scaling.type", "yarn");
        w.set_f32("llama.rope.scaling.factor", 4.0f);
        w.set_f32("llama.rope.scaling.yarn_beta_fast", 16.0f);
        w.set_f32("llama.rope.scaling.attn_factor", 0.5f);
      },
      img));
  CHECK(c.rope.beta_fast == 16.0);
  CHECK(c.rope.original_max_position_embeddings == 32768); // the context length
  CHECK(c.rope.attention_factor == Approx(0.5 * (0.1 * std::log(4.0) + 1.0)).epsilon(1e-12));

  REQUIRE_THROWS_WITH(gguf_config(yarn_gguf(
                          [](GgufWriter& w) {
                            w.set_string("llama.rope.scaling.type", "yarn");
                            w.set_f32("llama.rope.scaling.factor", 40.0f);
                            w.set_f32("llama.rope.scaling.yarn_log_multiplier", 0.0707f);
                          },
                          img)),
                      Contains("(DeepSeek-style YaRN attention scaling) is not supported"));
  REQUIRE_THROWS_WITH(
      gguf_config(
          yarn_gguf([](GgufWriter& w) { w.set_string("llama.rope.scaling.type", "yarn"); }, img)),
      Contains("'llama.rope.scaling.factor' must be given and > 0 for yarn"));
}
