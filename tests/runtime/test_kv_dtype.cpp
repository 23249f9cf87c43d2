// The KV cache in f16 / bf16 / int8 (--kv-dtype, conversion::LowerOptions::kv_dtype): the cache
// geometry and the stage programs carry the dtype (half the bytes of an f32 cache, a little over
// a quarter for int8), the default follows the mode (f32 for f32, f16 for every other mode), and
// the runtime paths that read the cache (decode, batched decode over KV slots, the prompt cache's
// prefill_kv) give the f32 cache's logits within the documented KV bound (docs/guarantees.md);
// batched decode on a 16-bit or int8 cache equals decoding alone on the same cache within the
// f32 bound (both read the same stored keys and values).
#include "small_compile.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/kernels/sampling.hpp"
#include "tpullm/runtime/batched_decode.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/prompt_cache.hpp"
#include "tpullm/verify/golden_check.hpp"

using namespace tpullm;

namespace kv_dtype_test {

/// The documented bound of an f16 KV cache on f32 weights (docs/guarantees.md, verify's
/// bounds_for_kv_dtype): |logits - f32-cache logits| <= 5e-3 x max|logits| per row.
constexpr double kF16KvBound = 5e-3;
/// The same for a bf16 cache (8 significant bits instead of 11): 5e-2.
constexpr double kBf16KvBound = 5e-2;
/// The same for an int8 cache (codes and a scale per position and head): 8e-2.
constexpr double kInt8KvBound = 8e-2;

frontend::StageParams kv_params() {
  return tpullm_test::small_params(128, 32, {64}, {1, 2});
}

std::vector<std::int32_t> ids(std::size_t n, std::size_t seed) {
  return tpullm_test::test_ids(n, seed, 53, 97, 3);
}

struct Compiled {
  frontend::ModelDesc desc;
  codegen::CompiledModel cm;
  runtime::SessionDims dims;
};

Compiled compile_with(const std::string& model, const std::string& mode,
                      const std::string& kv_dtype,
                      const frontend::StageParams& params = kv_params()) {
  Compiled c{
      frontend::load_model(std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / model), {}, {}};
  compiler::CompileOptions o;
  o.target.cores = 2;
  o.lower.mode = mode;
  o.lower.kv_dtype = kv_dtype;
  o.lower.group_size = 32; // divides llama-gqa's intermediate 352 (w8a16)
  c.cm = compiler::compile(frontend::build_top_modules(c.desc, params), o);
  c.dims = runtime::session_dims(bundle::make_model_info(c.desc, params, mode));
  return c;
}

const codegen::Program& program(const codegen::CompiledModel& cm, const std::string& name) {
  for (const auto& p : cm.programs)
    if (p.name == name)
      return p;
  FAIL("no program " << name);
  throw 0;
}

} // namespace kv_dtype_test

using namespace kv_dtype_test;

TEST_CASE("the KV cache takes the chosen dtype, the mode's by default", "[kv-dtype]") {
  struct Case {
    std::string mode, kv;
    ir::DType want;
  };
  const Case c = GENERATE(Case{"f32", "", ir::DType::f32}, Case{"f32", "f16", ir::DType::f16},
                          Case{"bf16", "", ir::DType::f16}, Case{"w8a16", "", ir::DType::f16},
                          Case{"bf16", "bf16", ir::DType::bf16}, Case{"f16", "f32", ir::DType::f32},
                          Case{"f32", "int8", ir::DType::i8});
  INFO("mode " << c.mode << " kv-dtype '" << c.kv << "'");
  const auto m = compile_with("llama-gqa", c.mode, c.kv);
  const auto& d = m.desc.dims;
  CHECK(m.cm.kv.dtype == c.want);
  CHECK(m.cm.kv.row_bytes == (c.want == ir::DType::i8
                                  ? d.kv_heads * (d.head_dim + 4) // codes, then a scale per head
                                  : d.kv_heads * d.head_dim * (c.want == ir::DType::f32 ? 4 : 2)));
  // The decode program's history arguments and stored rows are the cache, in its dtype.
  const auto& p = program(m.cm, frontend::StageNames::block_cache(0, 64));
  REQUIRE(p.args.size() == 4);
  CHECK(p.args[2].type.dtype == c.want);
  CHECK(p.args[3].type.dtype == c.want);
  CHECK(p.args[2].buffer.region == ir::Region::kv);
  // The layer's planned geometry is the model's.
  REQUIRE(p.info.memory);
  CHECK(p.info.memory->kv_row == m.cm.kv.row_bytes);
}

TEST_CASE("a 16-bit KV cache refuses a bad dtype", "[kv-dtype]") {
  CHECK_THROWS_WITH(compile_with("llama-gqa", "f32", "f8"),
                    Catch::Contains("kv-dtype") && Catch::Contains("f8"));
  compiler::CompileOptions o;
  o.lower.kv_dtype = "i8";
  CHECK_THROWS_AS(conversion::kv_cache_dtype(o.lower), Error);
}

TEST_CASE("decode and batched decode on an f16 / bf16 / int8 cache follow the f32 cache",
          "[kv-dtype][batched-decode]") {
  const std::string kv = GENERATE("f16", "bf16", "int8");
  const double bound = kv == "f16" ? kF16KvBound : kv == "bf16" ? kBf16KvBound : kInt8KvBound;
  INFO("kv-dtype " << kv);
  const auto f32 = compile_with("llama-gqa", "f32", "f32");
  const auto k16 = compile_with("llama-gqa", "f32", kv);
  const auto p = kv_params();
  auto e32 = runtime::make_executor(f32.cm, 0, 2);
  auto e16 = runtime::make_executor(k16.cm, 0, 2);
  auto e16_alone = runtime::make_executor(k16.cm, 0, 2);
  std::vector<std::unique_ptr<runtime::CompiledStages>> st;
  std::vector<std::unique_ptr<runtime::Session>> s32, s16, alone;
  for (int i = 0; i < 2; ++i) {
    st.push_back(std::make_unique<runtime::CompiledStages>(*e32, i));
    s32.push_back(std::make_unique<runtime::Session>(*st.back(), f32.dims, p));
    st.push_back(std::make_unique<runtime::CompiledStages>(*e16, i));
    s16.push_back(std::make_unique<runtime::Session>(*st.back(), k16.dims, p));
    st.push_back(std::make_unique<runtime::CompiledStages>(*e16_alone, i));
    alone.push_back(std::make_unique<runtime::Session>(*st.back(), k16.dims, p));
  }
  // Two conversations of different lengths; prompts longer than max_input_length go through
  // prefill_kv onto the rounded history.
  const std::vector<std::size_t> lengths{45, 9};
  std::vector<std::int32_t> next(2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto pr = ids(lengths[i], i);
    const auto l32 = s32[i]->prefill(pr, false);
    const auto l16 = s16[i]->prefill(pr, false);
    CHECK(tpullm_test::row_rel_err(alone[i]->prefill(pr, false), l16) < 1e-6);
    INFO("prefill of conversation " << i);
    CHECK(tpullm_test::row_rel_err(l16, l32) <= bound);
    CHECK(tpullm_test::row_rel_err(l16, l32) > 0); // the cache really is rounded
    next[i] = static_cast<std::int32_t>(kernels::argmax(std::span<const float>(l32)));
  }
  runtime::BatchedDecoder dec(*e16, k16.dims, p);
  REQUIRE(dec.batched());
  const auto V = static_cast<std::size_t>(k16.dims.vocab);
  for (int step = 0; step < 5; ++step) {
    std::vector<runtime::DecodeRow> rows;
    for (std::size_t i = 0; i < 2; ++i)
      rows.push_back({s16[i].get(), static_cast<std::int32_t>(i), next[i]});
    const auto logits = dec.decode(rows);
    REQUIRE(logits.size() == 2 * V);
    for (std::size_t i = 0; i < 2; ++i) {
      INFO("step " << step << " conversation " << i);
      const std::span<const float> got(logits.data() + i * V, V);
      const auto ref16 = alone[i]->decode(next[i]);
      const auto ref32 = s32[i]->decode(next[i]); // teacher-forced: the same token
      CHECK(tpullm_test::row_rel_err(got, ref16) < 1e-4);
      CHECK(tpullm_test::row_rel_err(got, ref32) <= bound);
      next[i] = static_cast<std::int32_t>(kernels::argmax(std::span<const float>(ref32)));
    }
  }
}

TEST_CASE("the prompt cache on an f16 cache follows the f32 cache", "[kv-dtype][prompt-cache]") {
  const auto f32 = compile_with("llama-gqa", "f32", "f32");
  const auto k16 = compile_with("llama-gqa", "f32", "f16");
  const auto p = kv_params();
  auto e32 = runtime::make_executor(f32.cm);
  auto e16 = runtime::make_executor(k16.cm);
  runtime::CompiledStages st32(*e32), st16(*e16);
  runtime::Session s32(st32, f32.dims, p), s16(st16, k16.dims, p);
  runtime::PromptCache c32(s32), c16(s16);
  runtime::GenerateOptions g;
  g.stop.max_new_tokens = 6;
  const auto a = ids(40, 3);
  const auto r32 = c32.generate(a, g);
  const auto r16 = c16.generate(a, g);
  REQUIRE(r16.result.tokens.size() == 6);
  CHECK(r16.result.tokens == r32.result.tokens);
  // The second turn resends the conversation: the cached prefix is kept (rounded once), the
  // rest goes through prefill_kv onto it; the logits of one more token follow the f32 cache.
  auto second = a;
  second.insert(second.end(), r16.result.tokens.begin(), r16.result.tokens.end());
  const auto more = ids(5, 8);
  second.insert(second.end(), more.begin(), more.end());
  g.stop.max_new_tokens = 1;
  const auto t32 = c32.generate(second, g);
  const auto t16 = c16.generate(second, g);
  CHECK(t16.reused == static_cast<std::int64_t>(a.size()) + 5);
  CHECK(t16.reused == t32.reused);
  CHECK(s16.length() == s32.length());
  const std::int32_t probe = 17;
  CHECK(tpullm_test::row_rel_err(s16.decode(probe), s32.decode(probe)) <= kF16KvBound);
}

// The int8 cache's KL bound (verify's 4e-3, docs/guarantees.md) on a long prompt: 900 tokens
// through 1 prefill + 7 prefill_kv calls of 128 onto the quantized history, then 16 decode steps
// (teacher-forced with the f32 cache's argmax), each row's distribution against the f32 cache's.
TEST_CASE("an int8 cache keeps a long prompt's logits within its KL bound", "[kv-dtype]") {
  const auto params = tpullm_test::small_params(1024, 128, {512});
  const auto f32 = compile_with("llama-gqa", "f32", "f32", params);
  const auto k8 = compile_with("llama-gqa", "f32", "int8", params);
  auto e32 = runtime::make_executor(f32.cm, 0, 2);
  auto e8 = runtime::make_executor(k8.cm, 0, 2);
  runtime::CompiledStages st32(*e32), st8(*e8);
  runtime::Session s32(st32, f32.dims, params), s8(st8, k8.dims, params);
  const auto prompt = ids(900, 11);
  std::vector<float> l32 = s32.prefill(prompt, false), l8 = s8.prefill(prompt, false);
  double sum = 0, worst = 0;
  int rows = 0;
  for (int step = 0; step <= 16; ++step) {
    const double kl = verify::detail::kl_divergence(l32, l8);
    sum += kl;
    worst = std::max(worst, kl);
    ++rows;
    if (step == 16)
      break;
    const auto next = static_cast<std::int32_t>(kernels::argmax(std::span<const float>(l32)));
    l32 = s32.decode(next);
    l8 = s8.decode(next);
  }
  INFO("mean KL " << sum / rows << ", worst row " << worst);
  CHECK(sum / rows <= 4e-3);
  CHECK(worst > 0); // the cache really is quantized
}
