// Stage modules (embedding, block_i, block_kv_i, block_cache_i_S, lm_head) built from the real
// checkpoints: their signatures, and their logits through the Top interpreter against the
// transformers goldens in all three scenarios.
#include "small_compile.hpp"
#include <catch2/catch.hpp>

#include "frontend_test_util.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/ir/ir.hpp"
#include "tpullm/runtime/interpreted_stages.hpp"
#include "tpullm/verify/golden_check.hpp"

using namespace tpullm;

namespace {

frontend::StageParams test_params() {
  return tpullm_test::halving_params(512, 64, 128); // decode variants halving down to the last
}

runtime::SessionDims dims_of(const frontend::ModelDesc& d) {
  return {d.dims.layers, d.dims.hidden, d.dims.kv_heads, d.dims.head_dim, d.dims.vocab};
}

const ir::Function& only_function(const ir::Module& m) {
  REQUIRE(m.functions().size() == 1);
  return *m.functions().front();
}

} // namespace

TEST_CASE("decode chunk list halves from seq_length down to the chunk", "[frontend][stages]") {
  frontend::StageParams p;
  p.seq_length = 2048;
  p.decode_chunk = 256;
  CHECK(p.decode_lengths() == std::vector<std::int64_t>{2048, 1024, 512, 256});
  p.decode_chunk = 0;
  CHECK(p.decode_lengths() == std::vector<std::int64_t>{2048});
  p.seq_length = 8192;
  p.decode_chunk = 1024;
  CHECK(p.decode_lengths() == std::vector<std::int64_t>{8192, 4096, 2048, 1024});
}

TEST_CASE("stage parameters are validated with the offending name", "[frontend][stages]") {
  frontend::StageParams p = test_params();
  p.max_input_length = 600;
  REQUIRE_THROWS_WITH(p.validate(4096), Catch::Contains("max_input_length"));
  p = test_params();
  REQUIRE_THROWS_WITH(p.validate(256),
                      Catch::Contains("exceeds the model's max_position_embeddings 256"));
  p.max_input_length = p.seq_length;
  REQUIRE_THROWS_WITH(p.validate(4096), Catch::Contains("prefill_kv needs history room"));
}

TEST_CASE("every stage module verifies and has the paper's signatures", "[frontend][stages]") {
  const auto name = GENERATE(from_range(fe_test::model_names()));
  INFO(name);
  const auto d = frontend::load_model(fe_test::model_dir(name));
  const auto p = test_params();
  auto modules = frontend::build_top_modules(d, p);
  const std::size_t per_layer = 2 + p.decode_lengths().size();
  // embedding, embedding_cache, lm_head, lm_head_greedy, final_norm
  REQUIRE(modules.size() == 5 + static_cast<std::size_t>(d.dims.layers) * per_layer);
  std::map<std::string, const ir::Module*> by_name;
  for (const auto& m : modules) {
    INFO(m.name());
    REQUIRE(ir::verify_module(m).empty());
    // The IR holds no HuggingFace names.
    for (const auto& [wname, w] : m.weights())
      CHECK(wname.find("model.") == std::string::npos);
    // Text round trip of real modules.
    const std::string text = ir::text::print_module(m);
    CHECK(ir::text::print_module(ir::text::parse_module(text)) == text);
    by_name[m.name()] = &m;
  }
  const auto H = d.dims.hidden, KVH = d.dims.kv_heads, D = d.dims.head_dim;
  const auto& block = only_function(*by_name.at("block_1"));
  REQUIRE(block.num_arguments() == 2);
  CHECK(block.argument(0)->type() == ir::TensorType({1, 64, H}, ir::DType::f32));
  CHECK(block.argument(1)->type() == ir::TensorType({1, 64}, ir::DType::i32));
  CHECK(block.result_types() ==
        std::vector<ir::TensorType>{ir::TensorType({1, 64, H}, ir::DType::f32),
                                    ir::TensorType({1, 64, KVH, D}, ir::DType::f32),
                                    ir::TensorType({1, 64, KVH, D}, ir::DType::f32)});
  const auto& kv = only_function(*by_name.at("block_kv_1"));
  REQUIRE(kv.num_arguments() == 4);
  CHECK(kv.argument_name(2) == "history_k");
  CHECK(kv.argument(2)->type() == ir::TensorType({1, 512 - 64, KVH, D}, ir::DType::f32));
  const auto& dec = only_function(*by_name.at("block_cache_1_256"));
  CHECK(dec.argument(0)->type() == ir::TensorType({1, 1, H}, ir::DType::f32));
  CHECK(dec.argument(3)->type() == ir::TensorType({1, 256, KVH, D}, ir::DType::f32));
  const auto& head = only_function(*by_name.at("lm_head_greedy"));
  CHECK(head.result_types() ==
        std::vector<ir::TensorType>{ir::TensorType({1, 1, 1}, ir::DType::i32)});
  const auto& norm = only_function(*by_name.at("final_norm"));
  REQUIRE(norm.num_arguments() == 1);
  CHECK(norm.argument(0)->type() == ir::TensorType({1, 1, H}, ir::DType::f32));
  CHECK(norm.result_types() ==
        std::vector<ir::TensorType>{ir::TensorType({1, 1, H}, ir::DType::f32)});
  const auto& emb = only_function(*by_name.at("embedding"));
  CHECK(emb.result_types() ==
        std::vector<ir::TensorType>{ir::TensorType({1, 64, H}, ir::DType::f32)});
  // block_kv uses Concat + FAttention with history; prefill does not concat.
  auto count = [](const ir::Function& f, ir::OpKind k) {
    return std::count_if(f.ops().begin(), f.ops().end(),
                         [&](const auto& op) { return op->kind() == k; });
  };
  CHECK(count(block, ir::OpKind::top_Concat) == 0);
  CHECK(count(kv, ir::OpKind::top_Concat) == 2);
  CHECK(count(kv, ir::OpKind::top_FAttention) == 1);
  CHECK(count(block, ir::OpKind::top_RMSNorm) == (d.qk_norm ? 4 : 2));
  CHECK(count(norm, ir::OpKind::top_RMSNorm) == 1);
  CHECK(count(norm, ir::OpKind::top_MatMul) == 0);
}

TEST_CASE("interpreted Top modules reproduce the transformers logits", "[frontend][golden]") {
  const auto name = GENERATE(from_range(fe_test::model_names()));
  INFO(name);
  const auto d = frontend::load_model(fe_test::model_dir(name));
  const auto p = test_params();
  runtime::InterpretedStages exec(frontend::build_top_modules(d, p));
  runtime::Session session(exec, dims_of(d), p);
  const auto goldens = frontend::load_goldens(fe_test::model_dir(name));
  for (const auto& r : verify::check_goldens(session, goldens)) {
    INFO("scenario " << r.name << ": max|err| " << r.max_abs_err << ", relative " << r.max_rel_err
                     << ", argmax " << r.argmax_agree << "/" << r.rows);
    CHECK(r.ok); // max|err| <= 1e-4 * max|golden| in every logits tensor
    CHECK(r.argmax_agree == r.rows);
  }
}

TEST_CASE("a prompt tail too close to the cache end goes through decode, with the same logits",
          "[frontend][session]") {
  // seq_length 308 with 64-token segments: the 300-token prompt's last segment would start at
  // 256 and need 64 slots where only 52 remain, so its 44 tokens run through decode; the last
  // logits must still match the goldens of scenario c.
  const auto d = frontend::load_model(fe_test::model_dir("llama-gqa"));
  const auto goldens = frontend::load_goldens(fe_test::model_dir("llama-gqa"));
  auto p = test_params();
  p.seq_length = 308;
  p.decode_chunk = 0;
  runtime::InterpretedStages exec(frontend::build_top_modules(d, p));
  runtime::Session session(exec, dims_of(d), p);
  const auto logits = session.prefill(goldens.c.prompt, false);
  const auto m = frontend::compare_logits(logits, goldens.c.prefill_logits);
  INFO("max|err| " << m.max_abs_err << " tolerance " << m.tolerance);
  CHECK(m.ok);
}

TEST_CASE("the golden check fails when the model is wrong", "[frontend][golden]") {
  // Same checkpoint, wrong RoPE base: the comparison must notice.
  auto d = frontend::load_model(fe_test::model_dir("llama-gqa"));
  d.rope.theta *= 2;
  const auto p = test_params();
  runtime::InterpretedStages exec(frontend::build_top_modules(d, p));
  runtime::Session session(exec, dims_of(d), p);
  const auto reports =
      verify::check_goldens(session, frontend::load_goldens(fe_test::model_dir("llama-gqa")));
  for (const auto& r : reports)
    CHECK_FALSE(r.ok);
}

TEST_CASE("a prompt longer than the compiled sequence is refused", "[frontend][session]") {
  const auto d = frontend::load_model(fe_test::model_dir("qwen3-headdim"));
  auto p = test_params();
  p.seq_length = 128;
  p.decode_chunk = 0;
  runtime::InterpretedStages exec(frontend::build_top_modules(d, p));
  runtime::Session session(exec, dims_of(d), p);
  std::vector<std::int32_t> prompt(129, 1);
  REQUIRE_THROWS_WITH(session.prefill(prompt, false),
                      Catch::Contains("exceeds the compiled sequence length 128"));
  prompt.resize(128);
  // The last 64-token segment would start at 64: fits. Then the cache is full.
  CHECK(session.prefill(prompt, false).size() == static_cast<std::size_t>(d.dims.vocab));
  CHECK(session.length() == 128);
  REQUIRE_THROWS_WITH(session.prefill({1}, false), Catch::Contains("exceeds the compiled"));
  REQUIRE_THROWS_WITH(session.decode(1), Catch::Contains("the KV cache is full"));
  session.reset();
  REQUIRE_THROWS_WITH(session.decode(static_cast<std::int32_t>(d.dims.vocab)),
                      Catch::Contains("outside the vocabulary"));
}
