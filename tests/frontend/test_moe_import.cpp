// Mixture-of-experts import: config.json fields of qwen3_moe and mixtral, the ModelDesc of the
// two shared MoE checkpoints (which layers are sparse, the router and experts), the Top block
// holding one fused top.MoE, and the refusals (other MoE shapes by name, quantized MoE, missing
// or mis-shaped expert tensors, a router of the wrong width, top-k above the expert count).
#include "frontend_test_util.hpp"

#include "tpullm/devtools/make_model.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/safetensors_writer.hpp"
#include "tpullm/frontend/stage_builder.hpp"

#include <catch2/catch.hpp>

using namespace tpullm;
using namespace tpullm::frontend;
using namespace fe_test;
using Catch::Contains;
using nlohmann::json;
using Shape = std::vector<std::int64_t>;

namespace {

json config_of(const std::string& model) {
  return json::parse(read_file(model_dir(model) / "config.json"));
}

/// `model`'s checkpoint with `config` and without the tensors named in `drop`, in `dir`.
void write_variant(const fs::path& dir, const std::string& model, const json& config,
                   const std::vector<std::string>& drop = {}) {
  write_file(dir / "config.json", config.dump());
  if (drop.empty()) {
    fs::create_symlink(model_dir(model) / "model.safetensors", dir / "model.safetensors");
    return;
  }
  const Checkpoint ck = Checkpoint::open(model_dir(model));
  SafetensorsWriter w(dir / "model.safetensors");
  std::vector<std::string> kept;
  for (const auto& n : ck.names())
    if (std::find(drop.begin(), drop.end(), n) == drop.end())
      kept.push_back(n);
  for (const auto& n : kept)
    w.declare(n, ck.at(n).dtype, ck.at(n).shape);
  for (const auto& n : kept)
    w.write(n, ck.at(n).bytes);
  w.finish();
}

} // namespace

TEST_CASE("hf_config: qwen3_moe and mixtral MoE fields", "[moe][hf_config]") {
  const HfConfig q = load_hf_config(model_dir("qwen3moe-e16k4"));
  CHECK(q.family == ModelFamily::qwen3_moe);
  CHECK(q.qk_norm);
  CHECK(q.moe.layout == MoeLayout::qwen3_moe);
  CHECK(q.moe.experts == 16);
  CHECK(q.moe.top_k == 4);
  CHECK(q.moe.expert_intermediate == 32);
  CHECK_FALSE(q.moe.renormalize);
  CHECK(q.moe.dense_layers == std::vector<std::int64_t>{1});
  CHECK(q.moe.sparse_layer(0));
  CHECK_FALSE(q.moe.sparse_layer(1));

  const HfConfig m = load_hf_config(model_dir("mixtral-e8k2"));
  CHECK(m.family == ModelFamily::mixtral);
  CHECK_FALSE(m.qk_norm);
  CHECK(m.moe.experts == 8);
  CHECK(m.moe.top_k == 2);
  CHECK(m.moe.expert_intermediate == 96); // Mixtral's experts are intermediate_size wide
  CHECK(m.moe.renormalize);
  CHECK(m.moe.sparse_layer(0));
  CHECK(m.moe.sparse_layer(1));

  // decoder_sparse_step 2: layers 1, 3, ... are sparse
  json c = config_of("qwen3moe-e16k4");
  c["decoder_sparse_step"] = 2;
  c["mlp_only_layers"] = json::array();
  const HfConfig s = parse_hf_config(c.dump());
  CHECK_FALSE(s.moe.sparse_layer(0));
  CHECK(s.moe.sparse_layer(1));
  CHECK_FALSE(load_hf_config(model_dir("qwen3-headdim")).moe.enabled());
}

TEST_CASE("the expert count is read under either spelling, as transformers' attribute maps do",
          "[moe][hf_config]") {
  // Qwen3-MoE as transformers 5 writes it: num_local_experts (Mixtral's name).
  json q = config_of("qwen3moe-e16k4");
  q["num_local_experts"] = q["num_experts"];
  q.erase("num_experts");
  CHECK(parse_hf_config(q.dump()).moe.experts == 16);
  q["num_experts"] = 16; // both, equal
  CHECK(parse_hf_config(q.dump()).moe.experts == 16);
  // Mixtral under the other spelling, and Mixtral's default when neither is given.
  json m = config_of("mixtral-e8k2");
  m["num_experts"] = m["num_local_experts"];
  m.erase("num_local_experts");
  CHECK(parse_hf_config(m.dump()).moe.experts == 8);
  m.erase("num_experts");
  CHECK(parse_hf_config(m.dump()).moe.experts == 8);
}

TEST_CASE("hf_config refuses other MoE shapes and bad MoE fields by name",
          "[moe][hf_config][neg]") {
  json c = config_of("qwen3moe-e16k4");
  SECTION("qwen2_moe: shared expert") {
    c["model_type"] = "qwen2_moe";
    REQUIRE_THROWS_WITH(parse_hf_config(c.dump()),
                        Contains("model_type 'qwen2_moe' is not supported: a shared expert"));
  }
  SECTION("deepseek_v3: grouped top-k, sigmoid router with bias") {
    c["model_type"] = "deepseek_v3";
    REQUIRE_THROWS_WITH(parse_hf_config(c.dump()),
                        Contains("model_type 'deepseek_v3' is not supported: grouped top-k") &&
                            Contains("sigmoid router"));
  }
  SECTION("top-k larger than the expert count") {
    c["num_experts_per_tok"] = 17;
    REQUIRE_THROWS_WITH(parse_hf_config(c.dump()),
                        Contains("num_experts_per_tok 17 is larger than the expert count 16"));
  }
  SECTION("missing num_experts") {
    c.erase("num_experts");
    REQUIRE_THROWS_WITH(parse_hf_config(c.dump()), Contains("missing \"num_experts\""));
  }
  SECTION("num_experts and num_local_experts that differ") {
    c["num_local_experts"] = 8;
    REQUIRE_THROWS_WITH(parse_hf_config(c.dump()),
                        Contains("\"num_experts\" = 16 and \"num_local_experts\" = 8 name the "
                                 "same expert count"));
    json m = config_of("mixtral-e8k2");
    m["num_experts"] = 4;
    REQUIRE_THROWS_WITH(parse_hf_config(m.dump()),
                        Contains("\"num_experts\" = 4 and \"num_local_experts\" = 8"));
  }
  SECTION("neither spelling") {
    c.erase("num_experts");
    REQUIRE_THROWS_WITH(parse_hf_config(c.dump()),
                        Contains("missing \"num_experts\" (or its other spelling "
                                 "\"num_local_experts\")"));
  }
  SECTION("a dense layer index out of range") {
    c["mlp_only_layers"] = {5};
    REQUIRE_THROWS_WITH(parse_hf_config(c.dump()),
                        Contains("\"mlp_only_layers\" entry 5 is outside [0, 2)"));
  }
  SECTION("a shared expert on qwen3_moe") {
    c["shared_expert_intermediate_size"] = 64;
    REQUIRE_THROWS_WITH(parse_hf_config(c.dump()), Contains("a shared expert is not supported"));
  }
  SECTION("grouped top-k") {
    c["n_group"] = 4;
    REQUIRE_THROWS_WITH(parse_hf_config(c.dump()), Contains("grouped top-k routing"));
  }
  SECTION("mixtral top-k") {
    json m = config_of("mixtral-e8k2");
    m["num_experts_per_tok"] = 9;
    REQUIRE_THROWS_WITH(parse_hf_config(m.dump()),
                        Contains("num_experts_per_tok 9 is larger than the expert count 8"));
  }
}

TEST_CASE("load_model: the shared MoE checkpoints", "[moe][model_desc]") {
  const ModelDesc q = load_model(model_dir("qwen3moe-e16k4"));
  REQUIRE(q.layers.size() == 2);
  CHECK(q.layers[0].sparse());
  CHECK(q.layers[0].moe.experts.size() == 16);
  CHECK_FALSE(q.layers[0].gate.present());
  CHECK(q.layers[0].moe.router.tensor().shape == Shape{16, 128});
  CHECK(q.layers[0].moe.experts[15].down.tensor().name ==
        "model.layers.0.mlp.experts.15.down_proj.weight");
  CHECK(q.layers[0].moe.experts[3].gate.tensor().shape == Shape{32, 128});
  CHECK_FALSE(q.layers[1].sparse());
  CHECK(q.layers[1].gate.tensor().shape == Shape{192, 128}); // mlp_only_layers: dense MLP

  const ModelDesc m = load_model(model_dir("mixtral-e8k2"));
  for (const auto& L : m.layers) {
    CHECK(L.sparse());
    CHECK(L.moe.experts.size() == 8);
  }
  CHECK(m.layers[1].moe.experts[7].up.tensor().name ==
        "model.layers.1.block_sparse_moe.experts.7.w3.weight");
  CHECK(m.layers[1].moe.experts[7].down.tensor().name ==
        "model.layers.1.block_sparse_moe.experts.7.w2.weight");
  CHECK(m.layers[0].moe.router.tensor().name == "model.layers.0.block_sparse_moe.gate.weight");
}

TEST_CASE("the block of a sparse layer holds one fused top.MoE", "[moe][stage]") {
  const ModelDesc d = load_model(model_dir("qwen3moe-e16k4"));
  StageParams p;
  p.seq_length = 64;
  p.max_input_length = 16;
  const RopeWeights rope = rope_weights(d, p.seq_length);
  auto count = [](const ir::Module& m, ir::OpKind k) {
    std::int64_t n = 0;
    for (const auto& f : m.functions())
      for (const auto& op : f->ops())
        n += op->kind() == k ? 1 : 0;
    return n;
  };
  const ir::Module sparse = build_block(d, {0, 16, 0}, rope, "block_0");
  CHECK(count(sparse, ir::OpKind::top_MoE) == 1);
  CHECK(count(sparse, ir::OpKind::top_MLP) == 0);
  for (const auto& op : sparse.functions().front()->ops())
    if (const auto* moe = op->as<ir::top::MoEOp>()) {
      CHECK(moe->experts == 16);
      CHECK(moe->top_k == 4);
      CHECK_FALSE(moe->renormalize);
      CHECK(op->num_operands() == 2 + 3 * 16);
    }
  const ir::Module dense = build_block(d, {1, 16, 0}, rope, "block_1");
  CHECK(count(dense, ir::OpKind::top_MoE) == 0);
  CHECK(count(dense, ir::OpKind::top_MLP) == 1);
}

TEST_CASE("load_model refuses bad MoE checkpoints naming the tensor", "[moe][model_desc][neg]") {
  TempDir t;
  SECTION("a missing expert tensor") {
    write_variant(t.path, "qwen3moe-e16k4", config_of("qwen3moe-e16k4"),
                  {"model.layers.0.mlp.experts.5.up_proj.weight"});
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("missing tensor 'model.layers.0.mlp.experts.5.up_proj.weight' "
                                 "(expert up [expert_intermediate, hidden])"));
  }
  SECTION("a missing mixtral expert") {
    write_variant(t.path, "mixtral-e8k2", config_of("mixtral-e8k2"),
                  {"model.layers.1.block_sparse_moe.experts.7.w2.weight"});
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("missing tensor "
                                 "'model.layers.1.block_sparse_moe.experts.7.w2.weight'"));
  }
  SECTION("expert tensors of the wrong shape") {
    json c = config_of("qwen3moe-e16k4");
    c["moe_intermediate_size"] = 48;
    write_variant(t.path, "qwen3moe-e16k4", c);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("tensor 'model.layers.0.mlp.experts.0.gate_proj.weight': shape "
                                 "[32, 128], expected [48, 128]"));
  }
  SECTION("a router of the wrong width") {
    json c = config_of("mixtral-e8k2");
    c["num_local_experts"] = 6;
    write_variant(t.path, "mixtral-e8k2", c);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("tensor 'model.layers.0.block_sparse_moe.gate.weight': shape "
                                 "[8, 128], expected [6, 128] (router [experts, hidden])"));
  }
  SECTION("a quantized MoE checkpoint") {
    json c = config_of("qwen3moe-e16k4");
    c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}};
    write_variant(t.path, "qwen3moe-e16k4", c);
    REQUIRE_THROWS_WITH(load_model(t.path),
                        Contains("quantized (gptq) qwen3_moe checkpoints are not supported"));
  }
}

TEST_CASE("make-model preset qwen3-30b-a3b: the real model's size, loadable", "[moe][make_model]") {
  const ModelPreset p = find_preset("qwen3-30b-a3b");
  // Qwen3-30B-A3B's model card: 30.5B parameters in total, 3.3B activated.
  CHECK(static_cast<double>(p.parameters()) == Approx(30.5e9).epsilon(0.005));
  const double attention = 2048.0 * (32 + 2 * 4) * 128 + 32 * 128 * 2048.0;
  const double active =
      48 * (attention + 128 * 2048.0 + 8 * 3 * 768 * 2048.0) + 2 * 151936 * 2048.0;
  CHECK(active == Approx(3.3e9).epsilon(0.02));
  const HfConfig c = parse_hf_config(preset_config_json(p, DType::bf16).dump());
  CHECK(c.family == ModelFamily::qwen3_moe);
  CHECK(c.moe.experts == 128);
  CHECK(c.moe.top_k == 8);
  CHECK(c.moe.expert_intermediate == 768);
  CHECK(c.moe.renormalize);
  CHECK(c.head_dim == 128);
  for (std::int64_t i = 0; i < 48; ++i)
    CHECK(c.moe.sparse_layer(i));

  // The same writer at a small width: what it writes, load_model accepts as a qwen3_moe model.
  ModelPreset small = p;
  small.hidden = 64;
  small.heads = 4;
  small.kv_heads = 2;
  small.head_dim = 16;
  small.layers = 2;
  small.vocab = 256;
  small.experts = 4;
  small.top_k = 2;
  small.moe_intermediate = 32;
  TempDir t;
  write_random_model(small, RandomWeights{7, DType::bf16, 0.02}, t.path);
  const ModelDesc d = load_model(t.path);
  CHECK(d.layers[1].sparse());
  CHECK(d.layers[1].moe.experts.size() == 4);
  CHECK(d.layers[1].moe.experts[3].down.tensor().shape == Shape{64, 32});
}

TEST_CASE("the memory estimate counts every expert's weights", "[moe][memory]") {
  // The executor's converted weights (at most f32 per element) cover the whole checkpoint: all
  // E experts of each sparse layer, not the dense intermediate_size MLP of the config.
  for (const char* name : {"qwen3moe-e16k4", "mixtral-e8k2"}) {
    INFO(name);
    const ModelDesc d = load_model(model_dir(name));
    double elements = 0;
    for (const auto& n : d.checkpoint->names())
      elements += static_cast<double>(d.checkpoint->at(n).numel());
    StageParams p;
    p.seq_length = 64;
    p.max_input_length = 16;
    const MemoryEstimate e = estimate_memory(d, p, Workload::run);
    CHECK(e.weights >= 4 * elements);
    CHECK(e.weights <= 4 * elements * 1.05);
  }
}
