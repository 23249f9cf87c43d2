// quantization_config parsing: AutoRound, compressed-tensors, the per-module rules (which
// linears stay float, which change bits / group), and the refusals by name.
#include "tpullm/frontend/quant_config.hpp"

#include <catch2/catch.hpp>

using namespace tpullm;
using namespace tpullm::frontend;
using Catch::Contains;
using nlohmann::json;

namespace {

QuantConfig parse(const json& q) {
  return parse_quant_config(q, "cfg.json");
}

const std::string q0 = "model.layers.0.self_attn.q_proj";
const std::string d1 = "model.layers.1.mlp.down_proj";

} // namespace

TEST_CASE("auto-round packing formats map to the GPTQ or AWQ layout", "[quant_config]") {
  json q = {{"quant_method", "auto-round"}, {"bits", 4}, {"group_size", 128}, {"sym", true}};
  // no packing_format: auto_round:auto_gptq, GPTQ layout with v1 zeros (stored zero - 1)
  QuantConfig c = parse(q);
  CHECK(c.method == QuantMethod::auto_round);
  CHECK(c.layout == QuantLayout::gptq);
  CHECK(c.zero_offset == 1);
  CHECK(c.format == "auto_round:auto_gptq");
  for (const char* f : {"auto_round", "auto_round:gptqmodel"}) {
    q["packing_format"] = f;
    c = parse(q);
    CHECK(c.layout == QuantLayout::gptq);
    CHECK(c.zero_offset == 0);
  }
  q["packing_format"] = "auto_round:auto_awq";
  q["sym"] = false;
  q["quant_method"] = "intel/auto-round";
  c = parse(q);
  CHECK(c.layout == QuantLayout::awq);
  CHECK(c.zero_offset == 0);
  const auto lq = linear_quant(c, q0);
  REQUIRE(lq);
  CHECK(lq->zero_point);
  CHECK(lq->layout == QuantLayout::awq);
  CHECK_FALSE(linear_quant(c, "lm_head")); // the head stays float unless the config says so
}

TEST_CASE("per-module rules: float layers and bit / group overrides", "[quant_config]") {
  SECTION("auto-round extra_config: exact names before regexes, bits 16 = float") {
    const QuantConfig c = parse({{"quant_method", "auto-round"},
                                 {"bits", 4},
                                 {"group_size", 32},
                                 {"sym", true},
                                 {"extra_config",
                                  {{R"(model\.layers\.0\..*)", {{"bits", 8}, {"group_size", 64}}},
                                   {q0, {{"bits", 16}, {"data_type", "float"}}},
                                   {"lm_head", {{"bits", 8}}}}}});
    CHECK_FALSE(linear_quant(c, q0)); // the exact name wins over the regex: float
    const auto k0 = linear_quant(c, "model.layers.0.self_attn.k_proj");
    REQUIRE(k0);
    CHECK(k0->bits == 8);
    CHECK(k0->group_size == 64);
    const auto other = linear_quant(c, d1);
    REQUIRE(other);
    CHECK(other->bits == 4);
    CHECK(other->group_size == 32);
    CHECK(c.lm_head);
    REQUIRE(linear_quant(c, "lm_head"));
    CHECK(linear_quant(c, "lm_head")->bits == 8);
  }
  SECTION("auto-round block_name_to_quantize (string or list; older to_quant_block_names)") {
    json q = {{"quant_method", "auto-round"},
              {"bits", 4},
              {"group_size", 32},
              {"block_name_to_quantize", "model.layers.1,model.layers.2"}};
    QuantConfig c = parse(q);
    CHECK_FALSE(linear_quant(c, q0));
    CHECK(linear_quant(c, d1));
    CHECK_FALSE(linear_quant(c, "model.layers.10.mlp.up_proj")); // a prefix is a whole name part
    q.erase("block_name_to_quantize");
    q["to_quant_block_names"] = {"model.layers.0"};
    c = parse(q);
    CHECK(linear_quant(c, q0));
    CHECK_FALSE(linear_quant(c, d1));
  }
  SECTION("GPTQModel dynamic: -: leaves float, +: overrides, first rule wins") {
    const QuantConfig c = parse({{"quant_method", "gptq"},
                                 {"bits", 4},
                                 {"group_size", 32},
                                 {"dynamic",
                                  {{R"(-:model\.layers\.0\.self_attn\..*)", json::object()},
                                   {R"(+:.*\.mlp\.down_proj)", {{"bits", 8}, {"sym", true}}}}}});
    CHECK_FALSE(linear_quant(c, q0));
    const auto d = linear_quant(c, d1);
    REQUIRE(d);
    CHECK(d->bits == 8);
    CHECK(d->zero_offset == 1);
    REQUIRE(linear_quant(c, "model.layers.0.mlp.up_proj"));
    CHECK(linear_quant(c, "model.layers.0.mlp.up_proj")->bits == 4);
  }
  SECTION("AWQ modules_to_not_convert: substrings") {
    const QuantConfig c = parse({{"quant_method", "awq"},
                                 {"bits", 4},
                                 {"group_size", 32},
                                 {"modules_to_not_convert", {"layers.1.mlp"}}});
    CHECK(linear_quant(c, q0));
    CHECK_FALSE(linear_quant(c, d1));
  }
  SECTION("gptq lm_head: true quantizes the head") {
    const QuantConfig c =
        parse({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}, {"lm_head", true}});
    CHECK(linear_quant(c, "lm_head"));
  }
}

TEST_CASE("compressed-tensors pack-quantized", "[quant_config]") {
  json q = json::parse(R"({
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "quantization_status": "compressed", "ignore": ["lm_head", "re:.*layers\\.2\\..*"],
    "config_groups": {
      "group_0": {"targets": ["Linear"], "input_activations": null, "output_activations": null,
                  "weights": {"num_bits": 4, "type": "int", "symmetric": false,
                              "strategy": "group", "group_size": 32, "actorder": null,
                              "dynamic": false, "observer": "minmax"}},
      "group_1": {"targets": ["re:.*down_proj$"],
                  "weights": {"num_bits": 8, "type": "int", "symmetric": true,
                              "strategy": "channel"}}}})");
  QuantConfig c = parse(q);
  CHECK(c.layout == QuantLayout::ct_packed);
  const auto a = linear_quant(c, q0);
  REQUIRE(a);
  CHECK(a->bits == 4);
  CHECK(a->group_size == 32);
  CHECK_FALSE(a->sym);
  CHECK(a->zero_offset == 0);
  CHECK_FALSE(linear_quant(c, "lm_head"));
  CHECK_FALSE(linear_quant(c, "model.layers.2.mlp.up_proj")); // ignored by regex
  // a regex target wins over the "Linear" class target
  const auto d = linear_quant(c, d1);
  REQUIRE(d);
  CHECK(d->bits == 8);
  CHECK(d->group_size == -1);
  CHECK(d->sym);
  q["config_groups"].erase("group_0");
  c = parse(q);
  REQUIRE(linear_quant(c, d1));
  CHECK_FALSE(linear_quant(c, q0)); // no group targets it: float
}

TEST_CASE("quantization_config refusals name the key and value", "[quant_config][neg]") {
  const json gptq = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}};
  const auto refuse = [](json q, const std::string& what) {
    REQUIRE_THROWS_WITH(parse(q), Contains(what));
  };
  json q = gptq;
  q["bits"] = 2;
  refuse(q, "gptq bits=2 is not supported");
  q = gptq;
  q["checkpoint_format"] = "marlin";
  refuse(q, "gptq checkpoint_format 'marlin' is not supported");
  q = gptq;
  q["dynamic"] = {{"+:.*", {{"bits", 3}}}};
  refuse(q, "dynamic \"+:.*\" bits=3 is not supported");
  q["dynamic"] = {{"-:(unclosed", json::object()}};
  refuse(q, "pattern '(unclosed' is not a valid regular expression");
  q["dynamic"] = {{"+:" + std::string(300, 'a'), json::object()}};
  refuse(q, "pattern of 300 characters is too long");

  json ar = {{"quant_method", "auto-round"}, {"bits", 4}, {"group_size", 32}};
  q = ar;
  q["packing_format"] = "auto_round:marlin";
  refuse(q, "auto-round packing_format 'auto_round:marlin' is not supported");
  q["packing_format"] = "ipex_gptq";
  refuse(q, "auto-round packing_format 'ipex_gptq' is not supported");
  q = ar;
  q["data_type"] = "nv_fp";
  refuse(q, "auto-round data_type 'nv_fp' is not supported");
  q = ar;
  q["act_bits"] = 8;
  refuse(q, "auto-round act_bits=8 is not supported");
  q = ar;
  q["extra_config"] = {{"model.layers.0.mlp.up_proj", {{"bits", 2}}}};
  refuse(q, "extra_config \"model.layers.0.mlp.up_proj\" bits=2 is not supported");
  q = ar;
  q["packing_format"] = "auto_round:auto_awq";
  q["bits"] = 8;
  refuse(q, "auto-round bits=8 with packing_format auto_round:auto_awq is not supported");

  const json ct = json::parse(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"g": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group",
                  "group_size": 128}}}})");
  q = ct;
  q["format"] = "float-quantized";
  refuse(q, "compressed-tensors format 'float-quantized' is not supported");
  q = ct;
  q["format"] = "naive-quantized";
  refuse(q, "compressed-tensors format 'naive-quantized' is not supported");
  q = ct;
  q["config_groups"]["g"]["weights"]["type"] = "float";
  q["config_groups"]["g"]["weights"]["num_bits"] = 8;
  refuse(q, "weights type 'float' is not supported");
  q = ct;
  q["config_groups"]["g"]["input_activations"] = {{"num_bits", 8}, {"type", "int"}};
  refuse(q, "\"input_activations\" = {\"num_bits\":8,\"type\":\"int\"} is not supported");
  q = ct;
  q["config_groups"]["g"]["weights"]["strategy"] = "tensor";
  refuse(q, "strategy 'tensor' is not supported");
  q = ct;
  q["config_groups"]["g"]["weights"]["num_bits"] = 3;
  refuse(q, "config_groups \"g\" bits=3 is not supported");
  q = ct;
  q["kv_cache_scheme"] = {{"num_bits", 8}};
  refuse(q, "\"kv_cache_scheme\" = {\"num_bits\":8} is not supported");
  q = ct;
  q["sparsity_config"] = {{"format", "sparse-24-bitmask"}};
  refuse(q, "\"sparsity_config\" format \"sparse-24-bitmask\" is not supported");
  q = ct;
  q.erase("config_groups");
  refuse(q, "needs a non-empty \"config_groups\"");
}
