// The streaming safetensors writer against the reader (and the tests' own in-memory writer),
// and random checkpoints from the model presets through load_model (their run through the
// interpreter is in tests/unit/test_interpreter_make_model.cpp, which compiles it anyway).
#include "frontend_test_util.hpp"

#include "tpullm/conversion/rtn_quantize.hpp"
#include "tpullm/devtools/make_model.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/safetensors_writer.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

using namespace tpullm;
using namespace tpullm::frontend;
using namespace fe_test;
using Catch::Contains;

namespace {

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

/// Mean and standard deviation of a float tensor.
std::pair<double, double> moments(const TensorView& v) {
  const auto x = v.to_f32();
  const double mean = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
  double var = 0;
  for (float f : x)
    var += (f - mean) * (f - mean);
  return {mean, std::sqrt(var / static_cast<double>(x.size()))};
}

} // namespace

TEST_CASE("SafetensorsWriter writes what the reader reads, byte for byte like the test writer",
          "[safetensors][writer]") {
  TempDir t;
  // Declared in name order with {"format": "pt"}: the file must equal make_safetensors'.
  std::map<std::string, Entry> tensors;
  tensors["a.bf16"] = make_entry("BF16", {5}, 1); // 10 bytes: the next tensor is misaligned
  tensors["b.empty"] = Entry{"I32", {0, 3}, ""};
  tensors["c.f32"] = make_entry("F32", {2, 3}, 2);
  tensors["d.i32"] = make_entry("I32", {3}, 3);
  tensors["e.u8"] = make_entry("U8", {7}, 4);
  SafetensorsWriter w(t / "out.safetensors");
  w.set_metadata("format", "pt");
  for (const auto& [name, e] : tensors)
    w.declare(name, *parse_dtype(e.dtype), e.shape);
  CHECK(w.size() == 5);
  CHECK(w.data_size() == 10 + 0 + 24 + 12 + 7);
  for (const auto& [name, e] : tensors) {
    // Two chunks per tensor (the first may be empty).
    const std::size_t half = e.bytes.size() / 2;
    w.write(name, bytes_of(e.bytes.substr(0, half)));
    w.write(name, bytes_of(e.bytes.substr(half)));
  }
  w.finish();
  const std::string written = read_file(t / "out.safetensors");
  CHECK(written == make_safetensors(tensors));
  std::uint64_t n = 0;
  std::memcpy(&n, written.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(written.size() == 8 + n + w.data_size());
  CHECK(written.substr(0, 8 + n) == w.header());

  const SafetensorsFile f = SafetensorsFile::open(t / "out.safetensors");
  CHECK(f.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(f.size() == tensors.size());
  for (const auto& [name, e] : tensors) {
    INFO(name);
    const TensorView& v = f.at(name);
    CHECK(dtype_name(v.dtype) == e.dtype);
    CHECK(v.shape == e.shape);
    CHECK(std::string(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size()) == e.bytes);
  }
}

TEST_CASE("SafetensorsWriter refuses misuse, naming the file and tensor",
          "[safetensors][writer][neg]") {
  TempDir t;
  const std::string four(4, 'x');
  SafetensorsWriter w(t / "w.safetensors");
  w.declare("x", DType::f32, {1});
  w.declare("y", DType::f32, {2});
  REQUIRE_THROWS_WITH(w.declare("x", DType::f32, {1}), Contains("tensor 'x': declared twice"));
  REQUIRE_THROWS_WITH(w.declare("__metadata__", DType::f32, {1}), Contains("invalid tensor name"));
  REQUIRE_THROWS_WITH(w.declare("z", DType::f32, {-1}), Contains("negative dimension"));
  REQUIRE_THROWS_WITH(w.write("y", bytes_of(four)),
                      Contains("tensor 'y': written out of order: tensor 'x'"));
  REQUIRE_THROWS_WITH(w.write("x", bytes_of(four + four)),
                      Contains("8 more bytes than its remaining 4"));
  w.write("x", bytes_of(four));
  REQUIRE_THROWS_WITH(w.declare("late", DType::f32, {1}), Contains("declared after writing"));
  w.write("y", bytes_of(four));
  REQUIRE_THROWS_WITH(w.finish(), Contains("tensor 'y': finished before all its bytes"));
  w.write("y", bytes_of(four));
  REQUIRE_THROWS_WITH(w.write("y", bytes_of(four)), Contains("after every declared tensor"));
  CHECK_FALSE(std::filesystem::exists(t / "w.safetensors")); // staged until finish()
  w.finish();
  CHECK(SafetensorsFile::open(t / "w.safetensors").size() == 2);

  SafetensorsWriter bad(t / "no-such-dir" / "w.safetensors");
  bad.declare("x", DType::u8, {1});
  REQUIRE_THROWS_WITH(bad.finish(), Contains("cannot create a temporary file"));

  // A failed write is reported, and an abandoned writer leaves the target as it was.
  SafetensorsWriter full("/dev/full");
  full.declare("x", DType::u8, {1});
  full.write("x", bytes_of(std::string(1, 'x')));
  REQUIRE_THROWS_WITH(full.finish(), Contains("/dev/full: write failed"));
  fe_test::write_file(t / "kept.safetensors", "earlier");
  {
    SafetensorsWriter abandoned(t / "kept.safetensors");
    abandoned.declare("x", DType::u8, {1});
    abandoned.write("x", bytes_of(std::string(1, 'x')));
  }
  CHECK(fe_test::read_file(t / "kept.safetensors") == "earlier");
}

TEST_CASE("model presets have the real architectures' config.json and parameter counts",
          "[make-model]") {
  const ModelPreset q = find_preset("qwen2.5-0.5b");
  CHECK(q.parameters() == 494032768); // Qwen2.5-0.5B
  HfConfig c = parse_hf_config(preset_config_json(q, DType::bf16).dump());
  CHECK(c.family == ModelFamily::qwen2);
  CHECK(c.hidden_size == 896);
  CHECK(c.num_hidden_layers == 24);
  CHECK(c.num_attention_heads == 14);
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.head_dim == 64);
  CHECK(c.intermediate_size == 4864);
  CHECK(c.vocab_size == 151936);
  CHECK(c.max_position_embeddings == 32768);
  CHECK(c.tie_word_embeddings);
  CHECK(c.qkv_bias);
  CHECK_FALSE(c.o_bias);
  CHECK(c.rope.type == RopeType::default_);
  CHECK(c.rope.theta == 1e6);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.torch_dtype == DType::bf16);
  CHECK(c.bos_token_id == 151643);

  const ModelPreset l = find_preset("llama3.2-1b");
  CHECK(l.parameters() == 1235814400); // Llama-3.2-1B
  c = parse_hf_config(preset_config_json(l, DType::f32).dump());
  CHECK(c.family == ModelFamily::llama);
  CHECK(c.hidden_size == 2048);
  CHECK(c.num_hidden_layers == 16);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 64);
  CHECK(c.head_dim_explicit);
  CHECK(c.intermediate_size == 8192);
  CHECK(c.vocab_size == 128256);
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.qkv_bias);
  CHECK(c.rope.type == RopeType::llama3);
  CHECK(c.rope.theta == 5e5);
  CHECK(c.rope.factor == 32);
  CHECK(c.rope.low_freq_factor == 1);
  CHECK(c.rope.high_freq_factor == 4);
  CHECK(c.rope.original_max_position_embeddings == 8192);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.torch_dtype == DType::f32);

  // A smaller vocabulary drops token ids it cannot hold rather than writing invalid ones.
  ModelPreset small = q;
  small.vocab = 1000;
  c = parse_hf_config(preset_config_json(small, DType::bf16).dump());
  CHECK_FALSE(c.bos_token_id.has_value());
  CHECK(c.eos_token_ids.empty());

  REQUIRE_THROWS_WITH(find_preset("gpt2"), Contains("unknown preset 'gpt2' (known: qwen2.5-0.5b"));
  small.kv_heads = 3;
  REQUIRE_THROWS_WITH(small.validate(), Contains("heads 14 is not a multiple of kv_heads 3"));
  REQUIRE_THROWS_WITH(preset_config_json(q, DType::i32), Contains("cannot be stored as I32"));
}

TEST_CASE("a random tiny checkpoint round-trips through load_model, deterministically",
          "[make-model]") {
  TempDir t;
  const ModelPreset p = find_preset("tiny");
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    const auto dir = t / std::string(dtype_name(dt));
    fs::create_directories(dir);
    RandomWeights w;
    w.seed = 42;
    w.dtype = dt;
    std::size_t calls = 0;
    const MakeModelReport r =
        write_random_model(p, w, dir, [&](std::size_t, std::size_t) { ++calls; });
    CHECK(r.parameters == p.parameters());
    CHECK(calls == preset_tensors(p).size());
    CHECK(r.file_bytes == fs::file_size(dir / "model.safetensors"));

    const ModelDesc d = load_model(dir); // the frontend's full validation
    CHECK(d.family == ModelFamily::llama);
    CHECK(d.dims.hidden == 64);
    CHECK(d.dims.layers == 2);
    CHECK(d.dims.heads == 4);
    CHECK(d.dims.kv_heads == 2);
    CHECK(d.dims.head_dim == 16);
    CHECK(d.dims.intermediate == 128);
    CHECK(d.dims.vocab == 512);
    CHECK_FALSE(d.tie_word_embeddings);
    CHECK(d.lm_head.tensor().name == "lm_head.weight");
    CHECK(d.torch_dtype == dt);
    CHECK(d.embedding.tensor().dtype == dt);

    // Values are the documented function of (seed, name, index).
    const TensorView& gate = d.layers[1].gate.tensor();
    const std::uint64_t key = tensor_key(42, gate.name);
    const auto vals = gate.to_f32();
    for (std::uint64_t i : {0u, 1u, 777u}) {
      const auto v = static_cast<float>(0.02 * random_normal(key, i));
      CHECK(vals[i] == (dt == DType::bf16 ? bf16_to_f32(f32_to_bf16(v)) : v));
    }
    // Scale of a real model: linears ~ N(0, 0.02), norms ~ 1.
    const auto [gm, gs] = moments(gate);
    CHECK(std::abs(gm) < 0.001);
    CHECK(gs == Approx(0.02).epsilon(0.03));
    const auto [nm, ns] = moments(d.layers[0].attn_norm.tensor());
    CHECK(nm == Approx(1.0).epsilon(0.01));
    CHECK(ns < 0.05);
  }
  // Same seed: byte-identical files; another seed: other weights, same config.
  const auto again = t / "again";
  const auto other = t / "other";
  fs::create_directories(again);
  fs::create_directories(other);
  write_random_model(p, {42, DType::bf16, 0.02}, again);
  write_random_model(p, {43, DType::bf16, 0.02}, other);
  CHECK(read_file(again / "model.safetensors") == read_file(t / "BF16" / "model.safetensors"));
  CHECK(read_file(again / "config.json") == read_file(t / "BF16" / "config.json"));
  CHECK(read_file(other / "model.safetensors") != read_file(again / "model.safetensors"));
  CHECK(read_file(other / "config.json") == read_file(again / "config.json"));
}

namespace {

/// Largest distance, over every group of `group` input values of HF weight `t` [N, K], between a
/// weight and compile's symmetric RTN of it (conversion::rtn_quantize), over the group's largest
/// |w|: near 0 for weights on that grid, about 1 / 28 at 4 bits for weights off it.
double rtn_distance(const TensorView& t, int bits, std::int64_t group) {
  const std::int64_t N = t.shape.at(0), K = t.shape.at(1);
  const auto hf = t.to_f32();
  std::vector<float> w(hf.size()); // [K, N], as the quantizer takes it
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t k = 0; k < K; ++k)
      w[static_cast<std::size_t>(k * N + n)] = hf[static_cast<std::size_t>(n * K + k)];
  const auto q = conversion::rtn_quantize(w, K, N, {bits, group, true});
  double worst = 0;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t g = 0; g < K / group; ++g) {
      const float scale = q.scales[static_cast<std::size_t>(g * N + n)];
      double top = 0, err = 0;
      for (std::int64_t k = g * group; k < (g + 1) * group; ++k) {
        const auto i = static_cast<std::size_t>(k * N + n);
        const double back = (static_cast<int>(q.q[i]) - (1 << (bits - 1))) * double{scale};
        top = std::max(top, std::abs(double{w[i]}));
        err = std::max(err, std::abs(back - w[i]));
      }
      if (top > 0)
        worst = std::max(worst, err / top);
    }
  return worst;
}

} // namespace

TEST_CASE("make-model --qat-grid puts the linears, embedding and lm_head on compile's RTN grid",
          "[make-model]") {
  TempDir t;
  const ModelPreset p = find_preset("tiny");
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (int bits : {4, 8}) {
      if (dt == DType::bf16 && bits == 8)
        continue; // refused below
      INFO(dtype_name(dt) << " int" << bits);
      const auto on = t / (std::string(dtype_name(dt)) + "-on" + std::to_string(bits));
      const auto off = t / (std::string(dtype_name(dt)) + "-off" + std::to_string(bits));
      fs::create_directories(on);
      fs::create_directories(off);
      RandomWeights w;
      w.seed = 7;
      w.dtype = dt;
      write_random_model(p, w, off);
      w.grid = {bits, 32};
      write_random_model(p, w, on);
      const ModelDesc a = load_model(on), b = load_model(off);
      // f32 keeps the grid; a 16-bit dtype rounds each value and so the group's scale (2 x its
      // unit roundoff: 2^-8 for bf16, 2^-11 for f16), far inside half a code step.
      const double bound = dt == DType::f32 ? 1e-6 : dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
      for (auto pick : {+[](const ModelDesc& d) { return d.layers[1].gate.tensor(); },
                        +[](const ModelDesc& d) { return d.layers[0].o.tensor(); },
                        +[](const ModelDesc& d) { return d.layers[0].down.tensor(); },
                        +[](const ModelDesc& d) { return d.embedding.tensor(); },
                        +[](const ModelDesc& d) { return d.lm_head.tensor(); }}) {
        INFO(pick(a).name);
        CHECK(rtn_distance(pick(a), bits, 32) <= bound);
        // the same draw off the grid is far from it: the check above can fail
        CHECK(rtn_distance(pick(b), bits, 32) > (bits == 4 ? 0.02 : 0.002));
      }
      // norms are not rounded: the same bytes as without the grid
      const auto na = a.layers[0].attn_norm.tensor().to_f32();
      const auto nb = b.layers[0].attn_norm.tensor().to_f32();
      CHECK(na == nb);
    }
  // A row length the group does not divide, bad values and --quantize are refused.
  RandomWeights bad;
  bad.grid = {4, 48};
  CHECK_THROWS_WITH(write_random_model(p, bad, t / "bad"), Contains("--group-size"));
  bad.grid = {3, 32};
  CHECK_THROWS_WITH(write_random_model(p, bad, t / "bad"), Contains("--qat-grid"));
  bad.grid = {8, 32};
  bad.dtype = DType::bf16;
  CHECK_THROWS_WITH(write_random_model(p, bad, t / "bad"), Contains("bf16's 8 significant bits"));
  bad.grid = {4, 32};
  bad.quant.method = "gptq";
  CHECK_THROWS_WITH(write_random_model(p, bad, t / "bad"), Contains("--quantize"));
}

TEST_CASE("reduced qwen2.5 and llama3.2 checkpoints load", "[make-model]") {
  TempDir t;
  ModelPreset q = find_preset("qwen2.5-0.5b");
  q.layers = 1;
  q.vocab = 256;
  fs::create_directories(t / "qwen");
  write_random_model(q, {7, DType::bf16, 0.02}, t / "qwen");
  const ModelDesc d = load_model(t / "qwen");
  CHECK(d.family == ModelFamily::qwen2);
  CHECK(d.qkv_bias);
  CHECK(d.tie_word_embeddings);
  CHECK(d.dims.q_dim() == 896);
  // Same seed and tensor name as the full model: layer 0 does not depend on the layer count.
  CHECK(d.layers[0].q.tensor().to_f32()[5] ==
        bf16_to_f32(f32_to_bf16(static_cast<float>(
            0.02 * random_normal(tensor_key(7, "model.layers.0.self_attn.q_proj.weight"), 5)))));

  ModelPreset l = find_preset("llama3.2-1b");
  l.layers = 1;
  l.vocab = 128;
  fs::create_directories(t / "llama");
  write_random_model(l, {7, DType::bf16, 0.02}, t / "llama");
  const ModelDesc ld = load_model(t / "llama");
  CHECK(ld.rope.type == RopeType::llama3);
  CHECK(ld.dims.intermediate == 8192);
}
