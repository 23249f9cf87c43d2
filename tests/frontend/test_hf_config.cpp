#include "frontend_test_util.hpp"

#include "tpullm/frontend/hf_config.hpp"
#include "tpullm/frontend/model_desc.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace tpullm;
using namespace tpullm::frontend;
using namespace fe_test;
using Catch::Contains;
using nlohmann::json;

namespace {

json base_config() {
  return json::parse(read_file(model_dir("llama-gqa") / "config.json"));
}

HfConfig parse(const json& j) {
  return parse_hf_config(j.dump(), "cfg.json");
}

} // namespace

TEST_CASE("the five real configs", "[hf_config]") {
  const HfConfig llama = load_hf_config(model_dir("llama-gqa"));
  CHECK(llama.family == ModelFamily::llama);
  CHECK(llama.hidden_size == 128);
  CHECK(llama.intermediate_size == 352);
  CHECK(llama.num_hidden_layers == 3);
  CHECK(llama.num_attention_heads == 4);
  CHECK(llama.num_key_value_heads == 2);
  CHECK(llama.head_dim == 32);
  CHECK(llama.vocab_size == 512);
  CHECK(llama.max_position_embeddings == 2048);
  CHECK(llama.rms_norm_eps == 1e-5);
  CHECK(llama.rope.type == RopeType::default_);
  CHECK(llama.rope.theta == 10000.0);
  CHECK_FALSE(llama.tie_word_embeddings);
  CHECK_FALSE(llama.qkv_bias);
  CHECK_FALSE(llama.qk_norm);
  CHECK(llama.torch_dtype == DType::f32);
  CHECK(llama.bos_token_id == 1);
  CHECK(llama.eos_token_ids == std::vector<std::int64_t>{2});
  CHECK(llama.quant.method == QuantMethod::none);

  const HfConfig qwen2 = load_hf_config(model_dir("qwen2-tied-bias") / "config.json");
  CHECK(qwen2.family == ModelFamily::qwen2);
  CHECK(qwen2.num_key_value_heads == 1);
  CHECK(qwen2.head_dim == 32);
  CHECK_FALSE(qwen2.head_dim_explicit);
  CHECK(qwen2.qkv_bias);
  CHECK_FALSE(qwen2.o_bias);
  CHECK(qwen2.tie_word_embeddings);
  CHECK(qwen2.rope.theta == 1e6);
  CHECK(qwen2.rms_norm_eps == 1e-6);
  CHECK(qwen2.torch_dtype == DType::bf16);

  const HfConfig qwen3 = load_hf_config(model_dir("qwen3-headdim"));
  CHECK(qwen3.family == ModelFamily::qwen3);
  CHECK(qwen3.head_dim == 64);
  CHECK(qwen3.head_dim_explicit);
  CHECK(qwen3.head_dim * qwen3.num_attention_heads != qwen3.hidden_size);
  CHECK(qwen3.qk_norm);
  CHECK_FALSE(qwen3.qkv_bias);
  CHECK(qwen3.rope.theta == 1e6); // from rope_parameters (transformers 5)
  CHECK(qwen3.rope.type == RopeType::default_);
  CHECK(qwen3.torch_dtype == DType::f32); // from "dtype"
  CHECK(qwen3.vocab_size == 640);

  const HfConfig gptq = load_hf_config(model_dir("llama-gqa-gptq-g32"));
  CHECK(gptq.quant.method == QuantMethod::gptq);
  CHECK(gptq.quant.bits == 4);
  CHECK(gptq.quant.group_size == 32);
  CHECK(gptq.quant.sym);
  CHECK_FALSE(gptq.quant.desc_act);
  CHECK(gptq.quant.format == "gptq");
  CHECK(gptq.quant.zero_offset == 1);
  CHECK(gptq.torch_dtype == DType::f16);

  const HfConfig awq = load_hf_config(model_dir("qwen2-tied-bias-awq-g32"));
  CHECK(awq.quant.method == QuantMethod::awq);
  CHECK(awq.quant.bits == 4);
  CHECK(awq.quant.group_size == 32);
  CHECK(awq.quant.zero_point);
  CHECK(awq.quant.format == "gemm");
  CHECK(awq.quant.zero_offset == 0);
}

TEST_CASE("RoPE: transformers-4 and -5 styles, linear and llama3", "[hf_config][rope]") {
  json j = base_config();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  HfConfig c = parse(j);
  CHECK(c.rope.type == RopeType::linear);
  CHECK(c.rope.factor == 2.0);
  CHECK(c.rope.theta == 10000.0);

  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  j["rope_theta"] = 500000.0;
  c = parse(j);
  CHECK(c.rope.type == RopeType::llama3);
  CHECK(c.rope.theta == 500000.0);
  CHECK(c.rope.factor == 8.0);
  CHECK(c.rope.high_freq_factor == 4.0);
  CHECK(c.rope.original_max_position_embeddings == 8192);

  json v5 = base_config();
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 5e5}, {"factor", 4.0}};
  c = parse(v5);
  CHECK(c.rope.type == RopeType::linear);
  CHECK(c.rope.theta == 5e5);
  CHECK(c.rope.factor == 4.0);

  j = base_config();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  REQUIRE_THROWS_WITH(parse(j), Contains("llama3 RoPE scaling needs \"low_freq_factor\""));
}

TEST_CASE("RoPE: yarn as transformers 5 reads it, dynamic NTK", "[hf_config][rope]") {
  // Qwen2.5's long-context recipe: factor 4 over its 32768 positions.
  json j = base_config();
  j["max_position_embeddings"] = 32768;
  j["rope_scaling"] = {
      {"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  HfConfig c = parse(j);
  CHECK(c.rope.type == RopeType::yarn);
  CHECK(c.rope.factor == 4.0);
  CHECK(c.rope.original_max_position_embeddings == 32768);
  CHECK(c.rope.attention_factor == Approx(0.1 * std::log(4.0) + 1.0).epsilon(1e-15));
  CHECK(c.rope.beta_fast == 32.0);
  CHECK(c.rope.beta_slow == 1.0);
  CHECK(c.rope.truncate);
  // The model's context is the original one times the factor (bounds --seq-length).
  CHECK(describe_config(c).dims.max_position == 131072);

  // Explicit betas and attention factor; 0 betas mean the defaults (Python's `or`).
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0},     {"beta_fast", 16.0},
                       {"beta_slow", 0},      {"truncate", false}, {"attention_factor", 0.5}};
  c = parse(j);
  CHECK(c.rope.beta_fast == 16.0);
  CHECK(c.rope.beta_slow == 1.0);
  CHECK_FALSE(c.rope.truncate);
  CHECK(c.rope.attention_factor == 0.5);
  CHECK(c.rope.original_max_position_embeddings == 32768); // max_position_embeddings

  // DeepSeek's mscale / mscale_all_dim; the factor from the two context lengths when absent.
  j["max_position_embeddings"] = 163840;
  j["rope_scaling"] = {{"rope_type", "yarn"},
                       {"original_max_position_embeddings", 4096},
                       {"mscale", 0.707},
                       {"mscale_all_dim", 1.0}};
  c = parse(j);
  CHECK(c.rope.factor == 40.0);
  const double m = 0.1 * 0.707 * std::log(40.0) + 1.0, m_all = 0.1 * std::log(40.0) + 1.0;
  CHECK(c.rope.attention_factor == Approx(m / m_all).epsilon(1e-15));
  CHECK(describe_config(c).dims.max_position == 163840);

  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", -2.0}};
  REQUIRE_THROWS_WITH(parse(j), Contains("yarn RoPE \"factor\" must be > 0"));

  // dynamic: the default frequencies within max_position_embeddings, which bounds seq_length.
  j = base_config();
  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 1e4}, {"factor", 2.0}};
  c = parse(j);
  CHECK(c.rope.type == RopeType::dynamic);
  CHECK(c.rope.factor == 2.0);
  CHECK(describe_config(c).dims.max_position == c.max_position_embeddings);
  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 1e4}};
  REQUIRE_THROWS_WITH(parse(j), Contains("dynamic RoPE scaling needs \"factor\""));
}

TEST_CASE("config fields: defaults, eos lists, head_dim", "[hf_config]") {
  json j = base_config();
  j.erase("num_key_value_heads");
  j.erase("head_dim");
  j["eos_token_id"] = {2, 5};
  j.erase("bos_token_id");
  j["model_type"] = "mistral";
  j["sliding_window"] = nullptr;
  const HfConfig c = parse(j);
  CHECK(c.family == ModelFamily::mistral);
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.head_dim == 32);
  CHECK(c.eos_token_ids == std::vector<std::int64_t>{2, 5});
  CHECK_FALSE(c.bos_token_id.has_value());

  j = base_config();
  j["attention_bias"] = true;
  CHECK(parse(j).qkv_bias);
  CHECK(parse(j).o_bias);

  j = base_config();
  j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 8},
                              {"group_size", -1},       {"desc_act", true},
                              {"sym", false},           {"checkpoint_format", "gptq_v2"}};
  const HfConfig g = parse(j);
  CHECK(g.quant.bits == 8);
  CHECK(g.quant.group_size == -1);
  CHECK(g.quant.desc_act);
  CHECK_FALSE(g.quant.sym);
  CHECK(g.quant.zero_offset == 0);
}

TEST_CASE("unsupported and invalid configs are refused by name", "[hf_config][neg]") {
  json j = base_config();
  SECTION("unknown model_type") {
    j["model_type"] = "gpt2";
    REQUIRE_THROWS_WITH(parse(j), "unsupported: cfg.json: model_type 'gpt2' is not supported "
                                  "(supported: llama, qwen2, qwen3, mistral, qwen3_moe, mixtral)");
  }
  SECTION("unsupported rope type") {
    j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
    REQUIRE_THROWS_WITH(parse(j), Contains("RoPE type 'longrope' is not supported (supported: "
                                           "default, linear, llama3, yarn, dynamic)"));
  }
  SECTION("partial rotary") {
    j["partial_rotary_factor"] = 0.5;
    REQUIRE_THROWS_WITH(parse(j), Contains("partial_rotary_factor 0.5 is not supported"));
  }
  SECTION("gptq bits=3") {
    j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 128}};
    REQUIRE_THROWS_WITH(parse(j), "unsupported: cfg.json: gptq bits=3 is not supported "
                                  "(supported: 4, 8)");
  }
  SECTION("awq other than gemm, awq 8-bit") {
    j["quantization_config"] = {
        {"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemv"}};
    REQUIRE_THROWS_WITH(parse(j), Contains("awq version 'gemv' is not supported"));
    j["quantization_config"]["bits"] = 8;
    j["quantization_config"]["version"] = "gemm";
    REQUIRE_THROWS_WITH(parse(j), Contains("awq bits=8 is not supported"));
  }
  SECTION("other quant methods") {
    j["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
    REQUIRE_THROWS_WITH(parse(j), Contains("quant_method 'bitsandbytes' is not supported"));
  }
  SECTION("another method's per-module key") {
    // AWQ's modules_to_not_convert is honoured (test_quant_config.cpp); GPTQModel's dynamic
    // means nothing to AWQ and is refused rather than ignored.
    j["quantization_config"] = {{"quant_method", "awq"},
                                {"bits", 4},
                                {"group_size", 128},
                                {"dynamic", {{"-:.*", json::object()}}}};
    REQUIRE_THROWS_WITH(parse(j), Contains("\"dynamic\" = {\"-:.*\":{}} is not supported for awq"));
  }
  SECTION("activation and mlp bias") {
    j["hidden_act"] = "gelu";
    REQUIRE_THROWS_WITH(parse(j), Contains("hidden_act 'gelu' is not supported (only silu)"));
    j["hidden_act"] = "silu";
    j["mlp_bias"] = true;
    REQUIRE_THROWS_WITH(parse(j), Contains("mlp_bias=true is not supported"));
  }
  SECTION("missing and malformed dims") {
    j.erase("hidden_size");
    REQUIRE_THROWS_WITH(parse(j), "invalid input: cfg.json: missing \"hidden_size\"");
    j["hidden_size"] = "128";
    REQUIRE_THROWS_WITH(parse(j), Contains("\"hidden_size\" must be an integer, got \"128\""));
    j["hidden_size"] = -4;
    REQUIRE_THROWS_WITH(parse(j), Contains("\"hidden_size\" = -4 is out of range"));
  }
  SECTION("head counts") {
    j["num_key_value_heads"] = 3;
    REQUIRE_THROWS_WITH(parse(j), Contains("num_attention_heads 4 is not a multiple of "
                                           "num_key_value_heads 3"));
    j["num_key_value_heads"] = 2;
    j["head_dim"] = 33;
    REQUIRE_THROWS_WITH(parse(j), Contains("head_dim 33 must be even"));
  }
  SECTION("sliding window") {
    // transformers' rules: Mistral windows every layer; Qwen only under use_sliding_window, on
    // layers >= max_window_layers; layer_types decides per layer where given
    const auto n = static_cast<std::size_t>(j["num_hidden_layers"].get<std::int64_t>());
    REQUIRE(n >= 2);
    j["model_type"] = "mistral";
    j["sliding_window"] = 512;
    CHECK(parse(j).sliding_windows == std::vector<std::int64_t>(n, 512));
    j["sliding_window"] = nullptr;
    CHECK(parse(j).sliding_windows.empty());
    j.erase("sliding_window"); // absent: MistralConfig's default
    CHECK(parse(j).sliding_windows == std::vector<std::int64_t>(n, 4096));
    j["model_type"] = "mixtral"; // MixtralConfig's default is none
    CHECK(parse(j).sliding_windows.empty());
    j["model_type"] = "mistral";
    j["sliding_window"] = 0;
    REQUIRE_THROWS_WITH(parse(j), Contains("\"sliding_window\" must be > 0, got 0"));
    j["model_type"] = "qwen2";
    j["sliding_window"] = 64;
    CHECK(parse(j).sliding_windows.empty()); // use_sliding_window defaults to false
    j["use_sliding_window"] = true;
    j["max_window_layers"] = 1;
    std::vector<std::int64_t> want(n, 64);
    want[0] = 0;
    CHECK(parse(j).sliding_windows == want);
    j.erase("sliding_window"); // absent: Qwen2Config's default 4096
    std::fill(want.begin() + 1, want.end(), 4096);
    CHECK(parse(j).sliding_windows == want);
    j["sliding_window"] = 64;
    std::fill(want.begin() + 1, want.end(), 64);
    j["max_window_layers"] = 28; // every layer below it is full: no window anywhere
    CHECK(parse(j).sliding_windows.empty());
    json types = json::array();
    for (std::size_t i = 0; i < n; ++i)
      types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    for (std::size_t i = 0; i < n; ++i)
      want[i] = i % 2 == 0 ? 64 : 0;
    CHECK(parse(j).sliding_windows == want);
    j["use_sliding_window"] = false; // a sliding layer without a window attends to everything
    CHECK(parse(j).sliding_windows.empty());
    j["layer_types"] = json::array({"full_attention"});
    REQUIRE_THROWS_WITH(parse(j), Contains("\"layer_types\" must be an array of"));
    types[0] = "chunked_attention";
    j["layer_types"] = types;
    REQUIRE_THROWS_WITH(parse(j), Contains("layer type \"chunked_attention\" is not supported"));
    types[0] = 3;
    j["layer_types"] = types;
    REQUIRE_THROWS_WITH(parse(j), Contains("\"layer_types\" must be a string, got 3"));
  }
  SECTION("not JSON, not an object, duplicate keys") {
    REQUIRE_THROWS_WITH(parse_hf_config("{\"model_type\": ", "x.json"),
                        Contains("invalid input: x.json: invalid JSON"));
    REQUIRE_THROWS_WITH(parse_hf_config("[1]", "x.json"), Contains("config is not a JSON object"));
    REQUIRE_THROWS_WITH(parse_hf_config(R"({"model_type":"llama","model_type":"qwen2"})", "x.json"),
                        Contains("duplicate key 'model_type'"));
  }
  SECTION("missing file") {
    TempDir t;
    REQUIRE_THROWS_WITH(load_hf_config(t.path), Contains("config.json: no such file"));
  }
}
