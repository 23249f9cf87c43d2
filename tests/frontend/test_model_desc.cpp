#include "frontend_test_util.hpp"

#include "tpullm/frontend/model_desc.hpp"

#include <catch2/catch.hpp>

using namespace tpullm;
using namespace tpullm::frontend;
using namespace fe_test;
using Catch::Contains;
using nlohmann::json;
using Shape = std::vector<std::int64_t>;

TEST_CASE("load_model: llama-gqa (f32, GQA, untied)", "[model_desc]") {
  const ModelDesc d = load_model(model_dir("llama-gqa"));
  CHECK(d.family == ModelFamily::llama);
  CHECK(d.dims.hidden == 128);
  CHECK(d.dims.heads == 4);
  CHECK(d.dims.kv_heads == 2);
  CHECK(d.dims.head_dim == 32);
  CHECK(d.dims.q_dim() == 128);
  CHECK(d.dims.kv_dim() == 64);
  CHECK(d.dims.layers == 3);
  CHECK(d.layers.size() == 3);
  CHECK(d.norm_eps == 1e-5);
  CHECK_FALSE(d.tie_word_embeddings);
  CHECK_FALSE(d.qkv_bias);
  CHECK_FALSE(d.qk_norm);
  CHECK(d.quant.method == QuantMethod::none);
  CHECK(d.unused_tensors.empty());
  const LayerWeights& L = d.layers[1];
  CHECK(L.k.plain().layout == WeightLayout::out_in);
  CHECK(L.k.tensor().shape == Shape{64, 128});
  CHECK(L.k.tensor().to_f32()[1] == -0.015598447062075138f);
  CHECK(L.down.tensor().shape == Shape{128, 352});
  CHECK_FALSE(L.q_bias.present());
  CHECK_FALSE(L.q_norm.present());
  CHECK(d.embedding.plain().layout == WeightLayout::table);
  CHECK(d.lm_head.tensor().name == "lm_head.weight");
  CHECK(d.final_norm.tensor().to_f32()[0] == 0.8748636841773987f);
  REQUIRE_THROWS_WITH(L.q.quantized(), Contains("not a quantized weight"));
}

TEST_CASE("load_model: qwen2-tied-bias (bf16, MQA, tied, biases)", "[model_desc]") {
  const ModelDesc d = load_model(model_dir("qwen2-tied-bias"));
  CHECK(d.family == ModelFamily::qwen2);
  CHECK(d.dims.kv_heads == 1);
  CHECK(d.tie_word_embeddings);
  CHECK(d.qkv_bias);
  CHECK_FALSE(d.o_bias);
  CHECK(d.lm_head.tensor().name == d.embedding.tensor().name);
  CHECK(d.lm_head.plain().layout == WeightLayout::out_in);
  const LayerWeights& L = d.layers[0];
  CHECK(L.q_bias.tensor().dtype == DType::bf16);
  CHECK(L.q_bias.tensor().to_f32()[0] == 0.032958984375f);
  CHECK(L.k_bias.tensor().shape == Shape{32});
  CHECK_FALSE(L.o_bias.present());
  CHECK(d.torch_dtype == DType::bf16);
}

TEST_CASE("load_model: qwen3-headdim (explicit head_dim, q/k norm)", "[model_desc]") {
  const ModelDesc d = load_model(model_dir("qwen3-headdim"));
  CHECK(d.family == ModelFamily::qwen3);
  CHECK(d.dims.head_dim == 64);
  CHECK(d.dims.q_dim() == 256);
  CHECK(d.dims.vocab == 640);
  CHECK(d.qk_norm);
  CHECK(d.rope.theta == 1e6);
  const LayerWeights& L = d.layers[2];
  CHECK(L.q.tensor().shape == Shape{256, 128});
  CHECK(L.o.tensor().shape == Shape{128, 256});
  CHECK(L.q_norm.tensor().shape == Shape{64});
  CHECK(L.q_norm.tensor().to_f32()[1] == 1.102387547492981f);
  CHECK(L.k_norm.present());
}

TEST_CASE("load_model: GPTQ and AWQ quantized linears", "[model_desc][quant]") {
  const ModelDesc g = load_model(model_dir("llama-gqa-gptq-g32"));
  CHECK(g.quant.method == QuantMethod::gptq);
  const QuantizedWeight& q = g.layers[0].q.quantized();
  CHECK(q.format == QuantFormat::gptq);
  CHECK(q.bits == 4);
  CHECK(q.in_features == 128);
  CHECK(q.out_features == 128);
  CHECK(q.group_size == 32);
  CHECK(q.groups == 4);
  CHECK(q.zero_offset == 1);
  CHECK(q.qweight.shape == Shape{16, 128});
  CHECK(q.scales.shape == Shape{4, 128});
  REQUIRE(q.qzeros.has_value());
  CHECK(q.qzeros->shape == Shape{4, 16});
  CHECK(static_cast<std::uint32_t>(q.qzeros->to_i32()[0]) == 0x77777777u);
  REQUIRE(q.g_idx.has_value());
  CHECK(q.g_idx_trivial);
  const QuantizedWeight& down = g.layers[2].down.quantized();
  CHECK(down.in_features == 352);
  CHECK(down.groups == 11);
  CHECK(down.qweight.shape == Shape{44, 128});
  CHECK(g.layers[0].q.is_quantized());
  CHECK(g.layers[0].q.name() == "model.layers.0.self_attn.q_proj.qweight");
  CHECK(g.embedding.tensor().dtype == DType::f16);
  CHECK_FALSE(g.lm_head.is_quantized());

  const ModelDesc a = load_model(model_dir("qwen2-tied-bias-awq-g32"));
  CHECK(a.quant.method == QuantMethod::awq);
  const QuantizedWeight& aq = a.layers[0].gate.quantized();
  CHECK(aq.format == QuantFormat::awq);
  CHECK(aq.in_features == 128);
  CHECK(aq.out_features == 320);
  CHECK(aq.qweight.shape == Shape{128, 40});
  CHECK(aq.qzeros->shape == Shape{4, 40});
  CHECK(aq.scales.shape == Shape{4, 320});
  CHECK(aq.zero_offset == 0);
  CHECK_FALSE(aq.g_idx.has_value());
  CHECK(a.layers[0].q_bias.tensor().dtype == DType::f16);
  CHECK(a.tie_word_embeddings);
  CHECK(a.layers[0].q.quantized().scales.to_f32()[0] == 0.041656494140625f);
}

TEST_CASE("tiny synthetic models: variants load", "[model_desc]") {
  TempDir t;
  SECTION("float") {
    TinyModel m;
    m.write(t.path);
    const ModelDesc d = load_model(t.path);
    CHECK(d.dims.kv_dim() == 8);
  }
  SECTION("gptq act-order with g_idx") {
    TinyModel m;
    m.make_gptq(true, true);
    m.write(t.path);
    const ModelDesc d = load_model(t.path);
    const auto& q = d.layers[0].gate.quantized();
    CHECK(q.act_order);
    CHECK_FALSE(q.g_idx_trivial);
    CHECK(q.groups == 2);
  }
  SECTION("gptq without g_idx and no act-order") {
    TinyModel m;
    m.make_gptq(false);
    m.write(t.path);
    const ModelDesc d = load_model(t.path);
    CHECK_FALSE(d.layers[1].down.quantized().g_idx.has_value());
    CHECK(d.layers[1].down.quantized().g_idx_trivial);
  }
  SECTION("tied with a saved lm_head copy, and an ignorable inv_freq") {
    TinyModel m;
    m.config["tie_word_embeddings"] = true;
    m.tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = make_entry("F32", {2});
    m.write(t.path);
    const ModelDesc d = load_model(t.path);
    CHECK(d.lm_head.tensor().name == "model.embed_tokens.weight");
  }
  SECTION("sharded") {
    TinyModel m;
    m.write(t.path);
    std::map<std::string, Entry> s1, s2;
    json wm;
    for (const auto& [name, e] : m.tensors) {
      const bool first = name.find("layers.1.") == std::string::npos;
      (first ? s1 : s2)[name] = e;
      wm[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    fs::remove(t / "model.safetensors");
    write_file(t / "model-00001-of-00002.safetensors", make_safetensors(s1));
    write_file(t / "model-00002-of-00002.safetensors", make_safetensors(s2));
    write_file(t / "model.safetensors.index.json", json{{"weight_map", wm}}.dump());
    const ModelDesc d = load_model(t.path);
    CHECK(d.checkpoint->shards().size() == 2);
    CHECK(d.layers[1].up.tensor().source.find("model-00002-of-00002") != std::string::npos);
  }
}

TEST_CASE("load_model refuses inconsistent checkpoints with file, tensor and shapes",
          "[model_desc][neg]") {
  TempDir t;
  TinyModel m;
  SECTION("wrong shape vs config") {
    m.config["intermediate_size"] = 48;
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight': "
                                 "shape [32, 16], expected [48, 16] (gate_proj [intermediate, "
                                 "hidden])"));
  }
  SECTION("wrong shape vs config on a real checkpoint") {
    fs::create_symlink(model_dir("llama-gqa") / "model.safetensors", t / "model.safetensors");
    json c = json::parse(read_file(model_dir("llama-gqa") / "config.json"));
    c["num_key_value_heads"] = 4;
    write_file(t / "config.json", c.dump());
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("tensor 'model.layers.0.self_attn.k_proj.weight': shape "
                                 "[64, 128], expected [128, 128] (k_proj [kv_heads*head_dim, "
                                 "hidden])"));
  }
  SECTION("missing tensor") {
    m.tensors.erase("model.layers.1.self_attn.v_proj.weight");
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("missing tensor 'model.layers.1.self_attn.v_proj.weight' "
                                 "(v_proj [kv_heads*head_dim, hidden])"));
  }
  SECTION("missing lm_head when untied") {
    m.tensors.erase("lm_head.weight");
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path), Contains("missing tensor 'lm_head.weight'") &&
                                                Contains("tie_word_embeddings is false"));
  }
  SECTION("missing bias required by the config") {
    m.config["model_type"] = "qwen2";
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("missing tensor 'model.layers.0.self_attn.q_proj.bias'"));
  }
  SECTION("missing qwen3 q_norm") {
    m.config["model_type"] = "qwen3";
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("missing tensor 'model.layers.0.self_attn.q_norm.weight' "
                                 "(q_norm [head_dim])"));
  }
  SECTION("unexpected tensor") {
    m.tensors["model.layers.0.self_attn.q_proj.bias"] = make_entry("F32", {16});
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("tensor 'model.layers.0.self_attn.q_proj.bias': unexpected "
                                 "tensor: not used by a llama model"));
    LoadOptions o;
    o.allow_unused_tensors = true;
    CHECK(load_model(t.path, o).unused_tensors ==
          std::vector<std::string>{"model.layers.0.self_attn.q_proj.bias"});
  }
  SECTION("extra layer") {
    m.config["num_hidden_layers"] = 1;
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("'model.layers.1.") && Contains("unexpected tensor"));
  }
  SECTION("unsupported weight dtype") {
    m.tensors["model.norm.weight"] = make_entry("I8", {16});
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("tensor 'model.norm.weight': dtype I8 is not supported for a "
                                 "float weight"));
  }
  SECTION("config refusal surfaces through load_model") {
    m.config["model_type"] = "falcon";
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path), Contains("config.json: model_type 'falcon' is not "
                                                     "supported"));
  }
  SECTION("gptq act-order without g_idx") {
    m.make_gptq(false, true);
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("desc_act (act-order) checkpoint has no g_idx tensor") &&
                            Contains("model.layers.0.self_attn.q_proj.g_idx"));
  }
  SECTION("gptq qweight with the wrong shape or dtype") {
    m.make_gptq(true);
    m.tensors["model.layers.1.mlp.up_proj.qweight"] = make_entry("I32", {16, 32});
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("tensor 'model.layers.1.mlp.up_proj.qweight': shape [16, 32], "
                                 "expected [2, 32]"));
    m.tensors["model.layers.1.mlp.up_proj.qweight"] = make_entry("F32", {2, 32});
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path), Contains("dtype F32, expected I32"));
  }
  SECTION("gptq g_idx out of range") {
    m.make_gptq(true);
    std::string g(16 * 4, '\0');
    const std::int32_t bad = 7;
    std::memcpy(g.data() + 4 * 5, &bad, 4);
    m.tensors["model.layers.0.self_attn.k_proj.g_idx"] = Entry{"I32", {16}, g};
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path), Contains("g_idx[5] = 7 is outside [0, 2)"));
  }
  SECTION("plain weights under a quantized config") {
    m.config["quantization_config"] = {
        {"quant_method", "awq"}, {"bits", 4}, {"group_size", 8}, {"version", "gemm"}};
    m.write(t.path);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("missing tensor 'model.layers.0.self_attn.q_proj.qweight'"));
  }
  SECTION("no config.json") {
    m.write(t.path);
    fs::remove(t / "config.json");
    REQUIRE_THROWS_WITH(load_model(t.path), Contains("has no config.json and no GGUF file"));
  }
}
