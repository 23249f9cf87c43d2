// Tensor-parallel stage modules (frontend/tensor_parallel.hpp) on the real checkpoints: the
// ranks' attention and MLP partial sums, added as the runtime adds them, give the whole block's
// hidden state, each rank's keys / values are the whole block's heads it keeps, and what cannot
// be split is refused with its numbers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "frontend_test_util.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/frontend/tensor_parallel.hpp"
#include "tpullm/ir/ir.hpp"
#include "tpullm/runtime/interpreted_stages.hpp"

using namespace tpullm;

namespace {

/// Small shapes: one prefill length 8, seq_length 32 (prefill_kv history 24), one decode
/// length, batched decode of 2 rows.
frontend::StageParams tp_params() {
  frontend::StageParams p;
  p.seq_length = 32;
  p.max_input_length = 8;
  p.decode_batches = {1, 2};
  return p;
}

std::vector<float> tp_random(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = u(rng);
  return v;
}

/// The kv heads [h0, h0 + n) of a [rows, heads, D] tensor.
std::vector<float> tp_heads_of(const std::vector<float>& t, std::int64_t heads, std::int64_t D,
                               std::int64_t h0, std::int64_t n) {
  const std::int64_t rows = static_cast<std::int64_t>(t.size()) / (heads * D);
  std::vector<float> out;
  for (std::int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), t.begin() + (r * heads + h0) * D, t.begin() + (r * heads + h0 + n) * D);
  return out;
}

float tp_max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v)
    m = std::max(m, std::fabs(x));
  return m;
}

float tp_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

/// One block call: B rows of L tokens at positions pos0.. (each row the same), history of S
/// slots.
struct TpCall {
  std::string name; ///< the whole block's function
  std::int64_t layer, B, L, S, pos0;
};

/// Runs `c` whole and split over `ranks`, and checks x + sum(attention) + sum(MLP) against the
/// whole block's hidden, and each rank's keys / values against the whole block's heads.
void tp_check_call(runtime::InterpretedStages& whole, runtime::InterpretedStages& split,
                   const frontend::ModelDesc& d, std::int64_t ranks, const TpCall& c) {
  INFO(c.name << " over " << ranks << " ranks");
  const std::int64_t H = d.dims.hidden, D = d.dims.head_dim, KVH = d.dims.kv_heads;
  const std::int64_t tkv = frontend::tp_kv_heads(KVH, ranks), rows = c.B * c.L;
  const auto x = tp_random(static_cast<std::size_t>(rows * H), 7);
  std::vector<std::int32_t> pos;
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t l = 0; l < c.L; ++l)
      pos.push_back(static_cast<std::int32_t>(c.pos0 + l));
  const std::size_t hist_n = static_cast<std::size_t>(c.B * c.S * KVH * D);
  const auto hk = tp_random(hist_n, 11), hv = tp_random(hist_n, 13);
  const std::size_t kv_n = static_cast<std::size_t>(rows * KVH * D);
  std::vector<float> out(x.size()), k(kv_n), v(kv_n);
  std::vector<runtime::ConstBytes> in{runtime::cbytes(x.data(), rows * H),
                                      runtime::cbytes(pos.data(), rows)};
  if (c.S > 0) {
    in.push_back(runtime::cbytes(hk.data(), static_cast<std::int64_t>(hist_n)));
    in.push_back(runtime::cbytes(hv.data(), static_cast<std::int64_t>(hist_n)));
  }
  std::vector<runtime::MutBytes> res{runtime::mbytes(out.data(), rows * H),
                                     runtime::mbytes(k.data(), rows * KVH * D),
                                     runtime::mbytes(v.data(), rows * KVH * D)};
  whole.run(c.name, in, res);

  std::vector<float> h = x;
  for (std::int64_t r = 0; r < ranks; ++r) {
    // This rank's kv heads: its share, or the one head its query heads read.
    const std::int64_t h0 = KVH % ranks == 0 ? r * tkv : r / (ranks / KVH);
    const auto rk = tp_heads_of(hk, KVH, D, h0, tkv), rv = tp_heads_of(hv, KVH, D, h0, tkv);
    const std::size_t rkv_n = static_cast<std::size_t>(rows * tkv * D);
    std::vector<float> part(x.size()), pk(rkv_n), pv(rkv_n);
    std::vector<runtime::ConstBytes> rin{in[0], in[1]};
    if (c.S > 0) {
      rin.push_back(runtime::cbytes(rk.data(), static_cast<std::int64_t>(rk.size())));
      rin.push_back(runtime::cbytes(rv.data(), static_cast<std::int64_t>(rv.size())));
    }
    std::vector<runtime::MutBytes> rres{
        runtime::mbytes(part.data(), rows * H),
        runtime::mbytes(pk.data(), static_cast<std::int64_t>(rkv_n)),
        runtime::mbytes(pv.data(), static_cast<std::int64_t>(rkv_n))};
    split.run(frontend::StageNames::tp_attention(r, c.name), rin, rres);
    for (std::size_t j = 0; j < h.size(); ++j)
      h[j] += part[j];
    INFO("rank " << r << " keeps kv heads [" << h0 << ", " << h0 + tkv << ")");
    CHECK(tp_max_diff(pk, tp_heads_of(k, KVH, D, h0, tkv)) <= 1e-5f * tp_max_abs(k));
    CHECK(tp_max_diff(pv, tp_heads_of(v, KVH, D, h0, tkv)) <= 1e-5f * tp_max_abs(v));
  }
  std::vector<float> y = h;
  for (std::int64_t r = 0; r < ranks; ++r) {
    std::vector<float> part(x.size());
    std::vector<runtime::ConstBytes> rin{runtime::cbytes(h.data(), rows * H)};
    std::vector<runtime::MutBytes> rres{runtime::mbytes(part.data(), rows * H)};
    split.run(frontend::StageNames::tp_mlp(r, c.layer, rows), rin, rres);
    for (std::size_t j = 0; j < y.size(); ++j)
      y[j] += part[j];
  }
  CHECK(tp_max_diff(y, out) <= 1e-5f * tp_max_abs(out));
}

const std::vector<std::string>& tp_models() {
  static const std::vector<std::string> names = {"llama-gqa", "qwen2-tied-bias", "qwen3-headdim"};
  return names;
}

} // namespace

TEST_CASE("tensor-parallel halves add up to the whole block", "[frontend][tensor_parallel]") {
  const auto name = GENERATE(from_range(tp_models()));
  const auto d = frontend::load_model(fe_test::model_dir(name));
  // 2 ranks everywhere; 4 on llama-gqa splits 2 kv heads as one replicated head per rank.
  for (const std::int64_t ranks :
       name == "llama-gqa" ? std::vector<std::int64_t>{2, 4} : std::vector<std::int64_t>{2}) {
    INFO(name << " over " << ranks << " ranks");
    REQUIRE(frontend::tensor_parallel_refusal(d, ranks).empty());
    const auto p = tp_params();
    runtime::InterpretedStages whole(frontend::build_top_modules(d, p));
    runtime::InterpretedStages split(frontend::build_tensor_parallel_modules(d, p, ranks));
    const std::int64_t last = d.dims.layers - 1;
    tp_check_call(whole, split, d, ranks, {"block_0", 0, 1, 8, 0, 0});
    tp_check_call(whole, split, d, ranks, {"block_kv_" + std::to_string(last), last, 1, 8, 24, 24});
    tp_check_call(whole, split, d, ranks, {"block_cache_1_32", 1, 1, 1, 32, 20});
    tp_check_call(whole, split, d, ranks, {"block_cache_0_32_b2", 0, 2, 1, 32, 17});
  }
}

TEST_CASE("tensor-parallel modules: names, signatures and weight names",
          "[frontend][tensor_parallel]") {
  const auto d = frontend::load_model(fe_test::model_dir("qwen2-tied-bias"));
  const auto p = tp_params();
  const auto top = frontend::build_top_modules(d, p);
  const auto tp = frontend::build_tensor_parallel_modules(d, p, 2);
  std::vector<std::string> want{"embedding", "embedding_cache"};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i) {
      const std::string li = std::to_string(i), pre = "tp" + std::to_string(r) + "_";
      for (const std::string& b : {"block_" + li, "block_kv_" + li, "block_cache_" + li + "_32",
                                   "block_cache_" + li + "_32_b2"})
        want.push_back(pre + b);
      for (const char* rows : {"1", "2", "8"})
        want.push_back(pre + "mlp_" + li + "_" + rows);
    }
  for (const char* n : {"lm_head", "lm_head_greedy", "lm_head_b2", "final_norm", "tp0_lm_head",
                        "tp0_lm_head_b2", "tp1_lm_head", "tp1_lm_head_b2"})
    want.push_back(n);
  std::vector<std::string> names;
  std::map<std::string, const ir::Module*> by_name;
  for (const auto& m : tp) {
    names.push_back(m.name());
    by_name[m.name()] = &m;
    INFO(m.name());
    REQUIRE(ir::verify_module(m).empty());
  }
  CHECK(names == want);

  // The ordinary modules are untouched: no tp name, no suffixed weight.
  for (const auto& m : top) {
    CHECK(m.name().rfind("tp", 0) != 0);
    for (const auto& [w, _] : m.weights())
      CHECK(w.find(".tp") == std::string::npos);
  }

  const auto H = d.dims.hidden, D = d.dims.head_dim;
  const auto& attn = *by_name.at("tp1_block_kv_2")->functions().front();
  CHECK(attn.info().stage == ir::StageKind::prefill_kv);
  CHECK(attn.info().layer == 2);
  REQUIRE(attn.num_arguments() == 4);
  CHECK(attn.argument(2)->type() == ir::TensorType({1, 24, 1, D}, ir::DType::f32));
  CHECK(attn.result_types() ==
        std::vector<ir::TensorType>{ir::TensorType({1, 8, H}, ir::DType::f32),
                                    ir::TensorType({1, 8, 1, D}, ir::DType::f32),
                                    ir::TensorType({1, 8, 1, D}, ir::DType::f32)});
  const auto& mlp = *by_name.at("tp0_mlp_1_8")->functions().front();
  CHECK(mlp.info().stage == ir::StageKind::prefill);
  CHECK(mlp.info().layer == 1);
  REQUIRE(mlp.num_arguments() == 1);
  CHECK(mlp.argument(0)->type() == ir::TensorType({1, 8, H}, ir::DType::f32));
  CHECK(mlp.result_types() ==
        std::vector<ir::TensorType>{ir::TensorType({1, 8, H}, ir::DType::f32)});
  CHECK(by_name.at("tp0_mlp_1_1")->functions().front()->info().stage == ir::StageKind::decode);

  // Sliced weights carry the rank's suffix; shared ones their ordinary names.
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto* m : {by_name.at("tp1_block_kv_2"), by_name.at("tp1_mlp_2_8")})
    for (const auto& [w, weight] : m->weights())
      shapes[w] = weight.type.shape;
  const auto I = d.dims.intermediate;
  CHECK(shapes.at("layers.2.q.tp1") == std::vector<std::int64_t>{2 * D, H});
  CHECK(shapes.at("layers.2.q_bias.tp1") == std::vector<std::int64_t>{2 * D});
  CHECK(shapes.at("layers.2.k.tp1") == std::vector<std::int64_t>{D, H});
  CHECK(shapes.at("layers.2.v_bias.tp1") == std::vector<std::int64_t>{D});
  CHECK(shapes.at("layers.2.o.tp1") == std::vector<std::int64_t>{H, 2 * D});
  CHECK(shapes.at("layers.2.gate.tp1") == std::vector<std::int64_t>{I / 2, H});
  CHECK(shapes.at("layers.2.down.tp1") == std::vector<std::int64_t>{H, I / 2});
  CHECK(shapes.count("layers.2.attn_norm") == 1);
  CHECK(shapes.count("layers.2.mlp_norm") == 1);
  CHECK(shapes.count("rope.cos") == 1);
  CHECK(shapes.count("layers.2.o_bias.tp1") == 0);

  // A rank's lm_head slice: the final norm and its half of the (tied) table's rows.
  const auto V = d.dims.vocab;
  const auto& head = *by_name.at("tp1_lm_head_b2")->functions().front();
  CHECK(head.info().stage == ir::StageKind::lm_head);
  REQUIRE(head.num_arguments() == 1);
  CHECK(head.argument(0)->type() == ir::TensorType({2, 1, H}, ir::DType::f32));
  CHECK(head.result_types() ==
        std::vector<ir::TensorType>{ir::TensorType({2, 1, V / 2}, ir::DType::f32)});
  REQUIRE(d.tie_word_embeddings);
  CHECK(by_name.at("tp1_lm_head_b2")->weights().at("embedding.tp1").type.shape ==
        std::vector<std::int64_t>{V / 2, H});
  CHECK(frontend::tp_vocab_rows(7, 3) == std::vector<std::int64_t>{0, 2, 4, 7});
}

TEST_CASE("tensor parallel refuses what it cannot split, with the numbers",
          "[frontend][tensor_parallel]") {
  const auto llama = frontend::load_model(fe_test::model_dir("llama-gqa"));
  CHECK_THAT(frontend::tensor_parallel_refusal(llama, 3),
             Catch::Contains("4 heads do not divide over 3 ranks"));
  CHECK_THAT(frontend::tensor_parallel_refusal(llama, 1), Catch::Contains("2 to 64 ranks, got 1"));
  CHECK_THAT(frontend::tensor_parallel_refusal(llama, 128),
             Catch::Contains("2 to 64 ranks, got 128"));
  CHECK_THROWS_WITH(frontend::build_tensor_parallel_modules(llama, tp_params(), 3),
                    Catch::Contains("4 heads do not divide over 3 ranks"));
  auto odd = llama;
  odd.dims.kv_heads = 3;
  CHECK_THAT(frontend::tensor_parallel_refusal(odd, 2),
             Catch::Contains("3 kv heads neither divide over 2 ranks nor divide 2"));
  odd = llama;
  odd.dims.intermediate = 351;
  CHECK_THAT(frontend::tensor_parallel_refusal(odd, 2),
             Catch::Contains("intermediate 351 does not divide over 2 ranks"));
  const auto gptq = frontend::load_model(fe_test::model_dir("llama-gqa-gptq-g32"));
  CHECK_THAT(frontend::tensor_parallel_refusal(gptq, 2),
             Catch::Contains("not GPTQ / AWQ packing") && Catch::Contains("layers.0.q (") &&
                 Catch::Contains("is packed"));
  // GGUF blocks are cut only at their edges: o has 256 columns (4 heads of 64) on these files,
  // 128 a rank, a Q4_K block 256 values; Q4_0's and Q8_0's blocks of 32 split whole.
  const auto gguf = fe_test::data_dir() / "models-gguf";
  CHECK_THAT(frontend::tensor_parallel_refusal(frontend::load_model(gguf / "llama-q4_k_m"), 2),
             Catch::Contains("cuts GGUF blocks only at their edges") &&
                 Catch::Contains("layers.0.o (Q4_K, 256 values a block)") &&
                 Catch::Contains("shares of 128"));
  CHECK(frontend::tensor_parallel_refusal(frontend::load_model(gguf / "llama-q4_0"), 2).empty());
  CHECK(frontend::tensor_parallel_refusal(frontend::load_model(gguf / "qwen2-q8_0"), 2).empty());
  const auto moe = frontend::load_model(fe_test::model_dir("mixtral-e8k2"));
  CHECK_THAT(frontend::tensor_parallel_refusal(moe, 2),
             Catch::Contains("mixture-of-experts") && Catch::Contains("8 experts"));
}
