// Speculative decoding with prompt-lookup drafts (runtime/speculation.hpp): the drafts, the
// adaptive draft length, and on the compiled llama-gqa checkpoint the answers of plain and
// speculative decoding compared token for token: greedy and sampled (several seeds), ended by
// the budget, an eos id and the end of the sequence mid-draft, with the verify rows through a
// batched lm_head and one by one, with drafts from the context, from a draft model and from
// the plain answer itself (right, and every third token wrong); afterwards both caches continue
// alike; and speculative sampling against plain sampling by a chi-square test.
#include "llama_gqa.hpp"
#include "small_compile.hpp"
#include "speculation_answers.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/draft_model.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/runtime/speculation.hpp"

using namespace tpullm;
using runtime::SpeculationOptions;

TEST_CASE("prompt lookup drafts what followed the latest earlier n-gram", "[speculation]") {
  SpeculationOptions o; // n-grams of 3 then 2
  const std::vector<std::int32_t> c{5, 6, 7, 8, 9, 1, 5, 6, 7, 4, 2, 9, 5, 6, 7};
  // "5 6 7" occurs at 6 (latest earlier) and 0: the draft follows the one at 6, unless only the
  // one at 0 has k tokens after it.
  CHECK(runtime::prompt_lookup_draft(c, o, 3) == std::vector<std::int32_t>{4, 2, 9});
  CHECK(runtime::prompt_lookup_draft(c, o, 8) == std::vector<std::int32_t>{8, 9, 1, 5, 6, 7, 4, 2});
  CHECK(runtime::prompt_lookup_draft(std::span(c).first(10), o, 3).empty());
  // In a loop the latest occurrence is right behind the suffix: one with k tokens after it wins.
  const std::vector<std::int32_t> loop{9, 7, 7, 7, 7, 7, 7};
  CHECK(runtime::prompt_lookup_draft(loop, o, 3) == std::vector<std::int32_t>{7, 7, 7});
  CHECK(runtime::prompt_lookup_draft(c, o, 0).empty());
  // No earlier "3 8 2", but "8 2" and then the bigram's continuation.
  const std::vector<std::int32_t> d{8, 2, 4, 4, 3, 8, 2};
  CHECK(runtime::prompt_lookup_draft(d, o, 2) == std::vector<std::int32_t>{4, 4});
  // Nothing repeats: no draft; a unigram is not looked up unless allowed.
  const std::vector<std::int32_t> e{1, 2, 3, 4, 2};
  CHECK(runtime::prompt_lookup_draft(e, o, 4).empty());
  o.ngram_min = 1;
  CHECK(runtime::prompt_lookup_draft(e, o, 4) == std::vector<std::int32_t>{3, 4, 2});
  CHECK(runtime::prompt_lookup_draft(std::vector<std::int32_t>{7}, o, 4).empty());
  CHECK(runtime::prompt_lookup_draft(std::vector<std::int32_t>{}, o, 4).empty());
}

namespace {

/// Verify calls a DraftLength asks for over `steps` decode steps when each call keeps
/// `keep(k)` of its k drafts; `lengths` gets the draft lengths asked for.
int verify_calls(runtime::DraftLength& n, int steps, const std::function<int(int)>& keep,
                 std::vector<int>* lengths = nullptr) {
  int calls = 0;
  for (int s = 0; s < steps; ++s)
    if (const int k = n.next(); k > 0) {
      ++calls;
      if (lengths)
        lengths->push_back(k);
      n.record(k, keep(k));
    }
  return calls;
}

} // namespace

TEST_CASE("the draft length weighs acceptance against the cost of drafting", "[speculation]") {
  // Free drafts (prompt lookup) kept whole: the longest drafts, every step.
  runtime::DraftLength all(6);
  std::vector<int> lengths;
  CHECK(verify_calls(
            all, 50, [](int k) { return k; }, &lengths) == 50);
  CHECK(lengths.front() == 6);
  CHECK(lengths.back() == 6);
  CHECK(all.acceptance() > 0.95);
  // One token of each draft kept (p = 1/2): shorter drafts, still every step.
  runtime::DraftLength one(6);
  lengths.clear();
  CHECK(verify_calls(
            one, 50, [](int) { return 1; }, &lengths) == 50);
  CHECK(lengths.back() < 6);
  CHECK(lengths.back() >= 2);
  // Nothing kept: a few calls, then pauses that double up to kMaxPause, so that over 2000
  // steps the calls are a handful (each costs about a verify row more than a decode step).
  runtime::DraftLength none(6);
  const int calls = verify_calls(none, 2000, [](int) { return 0; });
  CHECK(calls <= 40);
  CHECK(none.acceptance() < 0.05);
  // The same for a draft model costing half a decode step per token: it stops drafting after
  // fewer calls, and for good (a probe would first feed the draft model the whole pause).
  runtime::DraftLength costly(6, 0.5);
  const int costly_calls = verify_calls(costly, 2000, [](int) { return 0; });
  CHECK(costly_calls < calls);
  CHECK(costly_calls <= 3);
  CHECK(verify_calls(costly, 2000, [](int k) { return k; }) == 0);
  // ... but drafts it while they are kept, shorter than free drafts would be, after two plain
  // steps (the second timed, to price its drafts against).
  runtime::DraftLength kept_costly(6, 0.5);
  lengths.clear();
  CHECK(verify_calls(
            kept_costly, 50, [](int k) { return k; }, &lengths) == 48);
  CHECK(lengths.back() == 6);
  // Each draft token kept with probability 1/2 (a fixed coin sequence): a costly draft does
  // not pay (expected 1.5 tokens for 1.55 steps at one token), so it backs off; free drafts go on.
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  const auto coin = [&](int k) {
    int kept = 0;
    for (; kept < k; ++kept) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      if (x & 1)
        break;
    }
    return kept;
  };
  runtime::DraftLength half_costly(6, 0.5), half_free(6);
  CHECK(verify_calls(half_costly, 400, coin) < 100);
  CHECK(verify_calls(half_free, 400, coin) == 400);
  // A draft that costs more than the model is never worth a call.
  runtime::DraftLength dear(6, 1.5);
  CHECK(verify_calls(dear, 500, [](int k) { return k; }) <= 3);
  // Acceptance that comes back ends the backing off: calls resume within a pause.
  runtime::DraftLength back(4);
  verify_calls(back, 300, [](int) { return 0; });
  int s = 0;
  while (back.next() == 0 && s < runtime::DraftLength::kMaxPause + 1)
    ++s;
  back.record(1, 1);
  CHECK(verify_calls(back, 20, [](int k) { return k; }) >= 15);
  // Measured costs correct a draft model's estimate: drafts that take longer than the bytes
  // said (here each draft token as long as a whole verify call) stop paying and back off; free
  // drafts ignore the clock.
  runtime::DraftLength slow(3, 0.3), free_draft(3);
  int slow_calls = 0;
  for (int step = 0; step < 200; ++step)
    if (const int k = slow.next(); k > 0) {
      ++slow_calls;
      slow.observe(k * 0.02, 0.02, k);
      slow.record(k, k);
    }
  CHECK(slow.draft_cost() > 0.8);
  CHECK(slow_calls < 20);
  free_draft.observe(1.0, 0.01, 3);
  CHECK(free_draft.draft_cost() == 0);
  // A verify call dearer than modelled: a plain step of 0.1 s, a verify call of 0.2 s (2 steps,
  // not 1 + 0.05 k) and drafts of 0.09 s a token, every one kept. At most 3 drafts never pay
  // (4 tokens for 2 + 3 * 0.9 steps). Priced against the verify call alone, the step looks like
  // 0.17 s and the drafts like 0.5 steps, so drafting goes on; with the plain steps timed (the
  // first two are plain for that, the first one, cold after a prefill, left out: 1 s here) the
  // draft length backs off.
  const auto dear_verify = [](bool time_steps) {
    runtime::DraftLength len(3, 0.3);
    int calls = 0;
    for (int step = 0; step < 200; ++step)
      if (const int k = len.next(); k > 0) {
        ++calls;
        len.observe(0.09 * k, 0.2, k);
        len.record(k, k);
      } else if (time_steps) {
        len.observe_step(step == 0 ? 1.0 : 0.1);
      }
    return std::pair{calls, len.row_cost()};
  };
  const auto [untimed_calls, untimed_rows] = dear_verify(false);
  const auto [timed_calls, timed_rows] = dear_verify(true);
  CHECK(untimed_calls > 100);
  CHECK(untimed_rows == runtime::DraftLength::kRowCost);
  CHECK(timed_calls < 20);
  CHECK(timed_rows > 0.2);
  // free drafts ignore step times as they ignore the rest of the clock
  runtime::DraftLength free_steps(3);
  CHECK(free_steps.next() == 3);
  free_steps.observe_step(0.1);
  free_steps.observe_step(0.1);
  free_steps.observe(0, 1.0, 3);
  CHECK(free_steps.row_cost() == runtime::DraftLength::kRowCost);
  CHECK(runtime::DraftLength(0).next() == 0);
  SpeculationOptions bad;
  bad.draft_max = 33;
  CHECK_THROWS_AS(bad.validate(), Error);
  bad.draft_max = 4;
  bad.ngram_min = 4;
  CHECK_THROWS_AS(bad.validate(), Error);
  bad.ngram_min = 2;
  bad.draft_cost = -1;
  CHECK_THROWS_AS(bad.validate(), Error);
  // 1 + draft_max rows verify as decode steps: at most kDecodeArithmeticRows
  bad.draft_cost = 0;
  bad.draft_max = static_cast<int>(kernels::kDecodeArithmeticRows);
  CHECK_THROWS_AS(bad.validate(), Error);
  // ... through a prefill variant that short: the draft length is capped to the longest one
  auto vp = tpullm_test::small_params(96, 64, {});
  CHECK(runtime::verify_draft_max(vp, 0) == 0);
  CHECK_THROWS_WITH(runtime::verify_draft_max(vp, 3),
                    Catch::Contains("runs through a prefill length of 2 to 16 tokens, and this "
                                    "bundle has none (its shortest is 64)"));
  vp.prefill_chunks = {8, 32};
  CHECK(runtime::verify_draft_max(vp, 3) == 3);
  CHECK(runtime::verify_draft_max(vp, 15) == 7);
  vp.prefill_chunks = {16};
  CHECK(runtime::verify_draft_max(vp, 15) == 15);
  vp.with_history = false;
  CHECK_THROWS_WITH(runtime::verify_draft_max(vp, 3), Catch::Contains("--no-history"));
}

namespace {

/// llama-gqa compiled with 96 positions, prefill variants of 4 and 8 rows (the verify segments)
/// and, when `batched`, lm_heads of 4 and 8 rows.
struct Model : tpullm_test::CompiledLlamaGqa {
  explicit Model(bool batched)
      : CompiledLlamaGqa([batched] {
          auto p = tpullm_test::small_params(96, 16, {64, 32},
                                             batched ? std::vector<std::int64_t>{4, 8}
                                                     : std::vector<std::int64_t>{});
          p.prefill_chunks = {4, 8};
          return p;
        }()) {}
  /// Two KV slots: plain decoding in one, speculative decoding in the other.
  std::unique_ptr<runtime::Executor> exec = runtime::make_executor(cm, 0, 2);
  runtime::CompiledStages stages[2] = {runtime::CompiledStages{*exec, 0},
                                       runtime::CompiledStages{*exec, 1}};
  runtime::Session session(int slot) {
    return runtime::Session(stages[slot], dims(), stage_params);
  }
};

} // namespace

TEST_CASE("speculative decoding answers as plain decoding, token for token", "[speculation]") {
  // A prompt that repeats itself, so that prompt lookup finds drafts.
  std::vector<std::int32_t> prompt;
  for (int r = 0; r < 3; ++r)
    prompt.insert(prompt.end(), {3, 17, 42, 9, 250, 11});
  prompt.insert(prompt.end(), {3, 17});
  struct Case {
    const char* what;
    int max_new = 40;
    float temperature = 0;
    std::uint64_t seed = 0;
    bool eos = false;
  };
  const Case cases[] = {{"greedy", 40},
                        {"greedy to the end of the sequence", 200},
                        {"greedy to an eos id", 40, 0, 0, true},
                        {"sampled, seed 1", 40, 0.8f, 1},
                        {"sampled, seed 2", 40, 0.8f, 2},
                        {"sampled, seed 3", 40, 1.2f, 3}};
  // Draft sources: prompt lookup; the plain answer itself (every draft right); the plain answer
  // with every third draft token wrong (at most two kept per call).
  // A draft model, asked at its first call to catch up on the prompt (model) or prepared with
  // it after the prefill (model_prepared); a prepare step that throws (prepare_throws).
  enum class Source { lookup, oracle, wrong_third, model, model_prepared, prepare_throws };
  for (bool batched : {true, false}) {
    Model m(batched), draft_model(false);
    for (const auto& c : cases)
      for (Source src : {Source::lookup, Source::oracle, Source::wrong_third, Source::model,
                         Source::model_prepared, Source::prepare_throws}) {
        INFO("batched lm_head: " << batched << "; " << c.what << "; source "
                                 << static_cast<int>(src));
        runtime::GenerateOptions g;
        g.stop.max_new_tokens = c.max_new;
        g.sampling.temperature = c.temperature;
        g.sampling.seed = c.seed;
        auto plain_s = m.session(0);
        const auto plain = tpullm_test::plain_answer(plain_s, prompt, g, c.eos);
        if (c.max_new == 200)
          CHECK(plain.reason == runtime::StopReason::sequence_end);
        auto sg = g;
        sg.speculation.draft_max = 7; // segments of up to 8 rows
        const auto answer = plain.tokens;
        const auto n_prompt = prompt.size();
        // The same checkpoint as its own draft model (greedy drafts: kept when greedy).
        auto draft_session = draft_model.session(0);
        runtime::DraftModel drafts(draft_session);
        const bool from_model =
            src == Source::model || src == Source::model_prepared || src == Source::prepare_throws;
        if (from_model)
          sg.speculation.draft = drafts.source();
        if (src == Source::model_prepared)
          sg.speculation.prepare = drafts.preparer();
        if (src == Source::prepare_throws)
          sg.speculation.prepare = [](std::span<const std::int32_t>) {
            throw Error(ErrorKind::internal, "test", "a draft that cannot prepare");
          };
        else if (src != Source::lookup)
          sg.speculation.draft =
              tpullm_test::answer_drafts(answer, n_prompt, src == Source::wrong_third, 512);
        auto spec_s = m.session(1);
        const auto spec = spec_s.generate(prompt, sg);
        tpullm_test::check_same_answer(spec, plain, spec_s.length(), plain_s.length());
        const auto& st = spec.speculation;
        if (src != Source::lookup) // the random model's answer rarely repeats its context
          CHECK(st.verify_calls > 0);
        if (src == Source::oracle || (from_model && c.temperature == 0))
          CHECK(st.accepted * 10 >= st.drafted * 8);
        CHECK((spec.draft_prefill_seconds > 0) ==
              (src == Source::model_prepared || src == Source::prepare_throws));
        CHECK(spec.draft_prefill_seconds <= spec.prefill_seconds);
        if (src == Source::wrong_third)
          CHECK(st.accepted <= 2 * st.verify_calls);
        // The caches hold the same history: the next step agrees.
        if (plain.reason != runtime::StopReason::sequence_end) {
          const auto a = plain_s.decode(plain.tokens.back());
          const auto b = spec_s.decode(spec.tokens.back());
          float worst = 0, top = 0;
          for (std::size_t i = 0; i < a.size(); ++i) {
            worst = std::max(worst, std::abs(a[i] - b[i]));
            top = std::max(top, std::abs(a[i]));
          }
          CHECK(worst <= 1e-4f * top);
        }
      }
  }
}

namespace {

/// Compiles `desc` for `p` with `o`, then feeds segments of 1, 4 and 8 rows after histories of
/// 20 and 505 tokens (the rows' key chunks go from 1 to 2 at 512) as one verify call in one KV
/// slot and as decode steps in another: each row's logits equal the step's bit for bit when
/// `exact`, else within 1e-4 of the largest logit.
void check_verify_rows(const frontend::ModelDesc& desc, const frontend::StageParams& p,
                       const compiler::CompileOptions& o, bool exact) {
  const auto cm = compiler::compile(frontend::build_top_modules(desc, p), o);
  auto exec = runtime::make_executor(cm, 0, 2);
  runtime::CompiledStages st0(*exec, 0), st1(*exec, 1);
  const auto dims = runtime::session_dims(bundle::make_model_info(desc, p, o.lower.mode));
  for (std::size_t history : {std::size_t{20}, std::size_t{505}})
    for (std::size_t rows : {std::size_t{1}, std::size_t{4}, std::size_t{8}}) {
      INFO("history " << history << ", " << rows << " rows");
      const auto prompt = tpullm_test::test_ids(history, rows);
      const auto segment = tpullm_test::test_ids(rows, 7 + rows, 13);
      runtime::Session plain(st0, dims, p), spec(st1, dims, p);
      (void)plain.prefill(prompt, false);
      (void)spec.prefill(prompt, false);
      const auto all = spec.verify(segment);
      const std::size_t V = all.size() / rows;
      REQUIRE(V * rows == all.size());
      for (std::size_t i = 0; i < rows; ++i) {
        const auto step = plain.decode(segment[i]);
        REQUIRE(step.size() == V);
        INFO("row " << i);
        const std::span<const float> row(all.data() + i * V, V);
        if (exact)
          CHECK(std::memcmp(step.data(), row.data(), V * sizeof(float)) == 0);
        else
          CHECK(tpullm_test::row_rel_err(row, step) <= 1e-4);
      }
    }
}

} // namespace

TEST_CASE("a verify call's rows are bit for bit the decode steps they stand for, in int8-input "
          "modes",
          "[speculation]") {
  // Greedy speculation gives plain decoding's answer only if a verify row's logits are the
  // decode step's: attention of up to kDecodeArithmeticRows rows runs as decode steps, and a
  // linear whose inputs are rounded to int8 (--act-quant dynamic, the GGUF default) sums a row
  // the same in a batch as alone. Float linears sum M rows in another order than one (the GEMV's
  // accumulator sets differ with the rows of a 4-row block): there a row agrees to rounding only
  // (at most 2.1e-6 of the largest logit seen on AVX-512, 1.2e-5 on AVX2, since 8 rows run the
  // GEMVs too; 2.6e-4 when they ran the GEMM). Through the batched lm_head (4, 8) and row by
  // row.
  struct Mode {
    const char* mode;
    const char* act_quant;
    const char* kv;
    const char* lm_head;
    bool exact; ///< every linear takes int8 inputs
  };
  for (const Mode md :
       {Mode{"w8a16", "dynamic", "f16", "w8", true}, Mode{"w4a16", "dynamic", "int8", "w8", true},
        Mode{"w4a16", "dynamic", "bf16", "w4", true}, Mode{"w4a16", "dynamic", "f16", "", false},
        Mode{"w4a16", "none", "f16", "w8", false}, Mode{"f32", "", "", "", false}}) {
    for (bool batched : {true, false}) {
      auto p = tpullm_test::small_params(
          544, 64, {}, batched ? std::vector<std::int64_t>{4, 8} : std::vector<std::int64_t>{});
      p.prefill_chunks = {4, 8};
      const auto desc = frontend::load_model(tpullm_test::model_dir("llama-gqa"));
      compiler::CompileOptions o;
      o.target.cores = 2;
      o.lower.mode = md.mode;
      o.lower.act_quant = md.act_quant;
      o.lower.kv_dtype = md.kv;
      o.lower.lm_head = md.lm_head;
      o.lower.group_size = 32;
      INFO("mode " << md.mode << " act_quant '" << md.act_quant << "' kv '" << md.kv
                   << "' lm_head '" << md.lm_head << "', batched lm_head " << batched);
      check_verify_rows(desc, p, o, md.exact);
    }
  }
}

TEST_CASE("under a sliding window a verify call's rows are bit for bit the decode steps",
          "[speculation]") {
  // Each row of a verify call starts its keys at its own window's first position, as the decode
  // step at that position does: windows shorter than both histories (8) and between them (300).
  for (const std::int64_t window : {std::int64_t{8}, std::int64_t{300}}) {
    INFO("window " << window);
    auto p = tpullm_test::small_params(544, 64, {}, {4, 8});
    p.prefill_chunks = {4, 8};
    auto desc = frontend::load_model(tpullm_test::model_dir("llama-gqa"));
    desc.sliding_windows.assign(static_cast<std::size_t>(desc.dims.layers), window);
    compiler::CompileOptions o;
    o.target.cores = 2;
    o.lower.mode = "w8a16";
    o.lower.act_quant = "dynamic";
    o.lower.kv_dtype = "f16";
    o.lower.lm_head = "w8";
    o.lower.group_size = 32;
    check_verify_rows(desc, p, o, true);
  }
}

TEST_CASE("a verify call's rows are bit for bit decode steps on GGUF files, in their default",
          "[speculation]") {
  // The files users download (tests/data/models-gguf, written and quantized by llama.cpp's
  // tools) compile with --act-quant dynamic: every block type's integer-dot kernels (Q4_0, Q4_K,
  // Q6_K, Q8_0, their lm_heads) sum a verify row as a decode step's. An F16 file's float
  // linears agree to rounding.
  struct File {
    const char* name;
    bool exact;
  };
  for (const File f :
       {File{"llama-q4_0", true}, File{"llama-q4_k_m", true}, File{"qwen2-q6_k", true},
        File{"qwen2-q8_0", true}, File{"llama-f16", false}}) {
    auto p = tpullm_test::small_params(544, 64, {}, {4, 8});
    p.prefill_chunks = {4, 8};
    const auto desc =
        frontend::load_model(std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models-gguf" / f.name);
    compiler::CompileOptions o;
    o.target.cores = 2;
    o.lower.act_quant = "dynamic"; // what compile sets for a GGUF file
    INFO(f.name);
    check_verify_rows(desc, p, o, f.exact);
  }
}

TEST_CASE("a verify call from a bundle takes the batched lm_head in one run", "[speculation]") {
  // A bundle does not record --decode-batches: the session finds lm_head_b4 by name. Without it
  // the 4 rows went through lm_head one by one, reading the vocabulary's weights 4 times.
  Model m(true);
  const auto path = std::filesystem::temp_directory_path() / "tpullm-test-verify-head.bundle";
  {
    std::ofstream os(path, std::ios::binary);
    bundle::write_bundle(m.cm, bundle::make_model_info(m.desc, m.stage_params, "f32"), os);
  }
  runtime::BundleSession e(path);
  std::filesystem::remove(path);
  auto& s = e.session();
  (void)s.prefill({3, 17, 42, 9, 250, 11}, false);
  const std::vector<std::int32_t> segment{5, 6, 7, 8};
  const auto runs0 = e.executor().stats().runs;
  const auto rows = s.verify(segment);
  // embedding, one prefill_kv function per layer, one batched lm_head
  CHECK(e.executor().stats().runs - runs0 == 2 + m.desc.dims.layers);
  // the same logits as the in-memory stages, whose parameters list the batch
  auto ref_s = m.session(0);
  (void)ref_s.prefill({3, 17, 42, 9, 250, 11}, false);
  const auto ref = ref_s.verify(segment);
  REQUIRE(rows.size() == ref.size());
  float worst = 0, top = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, std::abs(rows[i] - ref[i]));
    top = std::max(top, std::abs(ref[i]));
  }
  CHECK(worst <= 1e-5f * top);
}

TEST_CASE("a draft model prepared with the prompt only decodes at its first draft call",
          "[speculation]") {
  Model m(false);
  std::vector<std::int32_t> prompt;
  for (int r = 0; r < 5; ++r)
    prompt.insert(prompt.end(), {3, 17, 42, 9, 250, 11});
  auto cold_s = m.session(0), warm_s = m.session(1);
  runtime::DraftModel cold(cold_s), warm(warm_s);
  warm.prepare(prompt);
  CHECK(warm_s.length() == static_cast<std::int64_t>(prompt.size()));
  warm.prepare(prompt); // again: the last token is fed again, nothing else
  CHECK(warm_s.length() == static_cast<std::int64_t>(prompt.size()));
  auto ctx = prompt;
  ctx.push_back(5);
  // The first call after prepare feeds one token and decodes k - 1: the cache grows by k.
  const auto a = warm.draft(ctx, 3);
  CHECK(warm_s.length() == static_cast<std::int64_t>(prompt.size()) + 3);
  const auto b = cold.draft(ctx, 3); // the same drafts without preparing
  CHECK(a == b);
  CHECK(a.size() == 3);
  // A context that does not fit the draft model's sequence is not fed.
  runtime::DraftModel fresh(cold_s);
  const std::vector<std::int32_t> too_long(static_cast<std::size_t>(m.stage_params.seq_length) + 1,
                                           3);
  cold_s.reset();
  fresh.prepare(too_long);
  CHECK(cold_s.length() == 0);
}

TEST_CASE("a draft model on its target's worker threads drafts what it drafts on its own",
          "[speculation]") {
  Model target(false), alone(false), shared(false);
  shared.exec->share_workers(*target.exec);
  CHECK(shared.exec->threads() == target.exec->threads());
  std::vector<std::int32_t> ctx;
  for (int r = 0; r < 4; ++r)
    ctx.insert(ctx.end(), {3, 17, 42, 9, 250, 11});
  auto a_s = alone.session(0), s_s = shared.session(0), t_s = target.session(0);
  runtime::DraftModel a(a_s), s(s_s);
  for (int step = 0; step < 3; ++step) { // the target runs between the drafts, as it does
    const auto da = a.draft(ctx, 4);
    const auto ds = s.draft(ctx, 4);
    CHECK(da == ds);
    t_s.reset();
    (void)t_s.prefill(ctx, false);
    ctx.push_back(da.front());
  }
  auto other = runtime::make_executor(target.cm, target.exec->threads() + 1, 1);
  CHECK_THROWS_AS(other->share_workers(*target.exec), Error);
}

namespace {

/// Two-sample chi-square statistic of homogeneity for two samples of equal size over the token
/// values they hold (bins holding fewer than 10 draws in both samples together are merged into
/// one); `df` receives the degrees of freedom (bins - 1).
double chi_square_two_sample(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b,
                             int& df) {
  std::map<std::int32_t, std::pair<int, int>> bins;
  for (auto t : a)
    ++bins[t].first;
  for (auto t : b)
    ++bins[t].second;
  std::vector<std::pair<int, int>> kept;
  std::pair<int, int> rest{0, 0};
  for (const auto& [t, c] : bins)
    if (c.first + c.second >= 10) {
      kept.push_back(c);
    } else {
      rest.first += c.first;
      rest.second += c.second;
    }
  if (rest.first + rest.second > 0)
    kept.push_back(rest);
  double x2 = 0;
  for (const auto& [x, y] : kept) // equal sample sizes: sum (x - y)^2 / (x + y)
    x2 += static_cast<double>(x - y) * (x - y) / (x + y);
  df = static_cast<int>(kept.size()) - 1;
  return x2;
}

/// The chi-square distribution's 0.999 quantile (significance 0.001): tabulated for 1..20
/// degrees of freedom, beyond by the Wilson-Hilferty approximation (within 0.5% there).
double chi_square_critical_0001(int df) {
  static const double q[] = {10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59,
                             31.26, 32.91, 34.53, 36.12, 37.70, 39.25, 40.79, 42.31, 43.82, 45.31};
  REQUIRE(df >= 1);
  if (df <= 20)
    return q[df - 1];
  const double k = df, z = 3.0902; // the standard normal's 0.999 quantile
  const double c = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * c * c * c;
}

} // namespace

TEST_CASE("speculative sampling keeps the target distribution (chi-square, 400 seeds per arm)",
          "[speculation][release-only]") {
  // 400 answers of 3 tokens sampled plainly (seeds 1..400) and 400 sampled with drafts (seeds
  // 401..800, so the two samples are independent draws, not the same draws twice). The drafts
  // are the greedy answer's tokens 2 and 3 whatever was sampled, so a verify call keeps some
  // draft tokens and resamples after others. For each of the 3 positions the two samples'
  // token counts must pass a two-sample chi-square test of homogeneity at significance 0.001;
  // the same test must reject two plain samples at top-k 6 and 5 (it can fail).
  constexpr int kTrials = 400;
  std::vector<std::int32_t> prompt;
  for (int r = 0; r < 3; ++r)
    prompt.insert(prompt.end(), {3, 17, 42, 9, 250, 11});
  Model m(false);
  runtime::GenerateOptions g;
  g.stop.max_new_tokens = 3;
  auto s = m.session(0);
  const auto greedy = s.generate(prompt, g).tokens;
  REQUIRE(greedy.size() == 3);
  g.sampling.temperature = 0.7f;
  g.sampling.top_k = 6;
  const auto sample = [&](int top_k, std::uint64_t seed0, bool speculate, std::int64_t& accepted,
                          std::int64_t& drafted) {
    std::vector<std::vector<std::int32_t>> pos(3);
    auto sg = g;
    sg.sampling.top_k = top_k;
    if (speculate) {
      sg.speculation.draft_max = 2;
      sg.speculation.draft = [&](std::span<const std::int32_t> ctx, int k) {
        std::vector<std::int32_t> d;
        for (std::size_t j = ctx.size() - prompt.size(); j < 3 && static_cast<int>(d.size()) < k;
             ++j)
          d.push_back(greedy[j]);
        return d;
      };
    }
    for (int t = 0; t < kTrials; ++t) {
      sg.sampling.seed = seed0 + static_cast<std::uint64_t>(t);
      s.reset();
      const auto r = s.generate(prompt, sg);
      REQUIRE(r.tokens.size() == 3);
      for (int i = 0; i < 3; ++i)
        pos[static_cast<std::size_t>(i)].push_back(r.tokens[static_cast<std::size_t>(i)]);
      accepted += r.speculation.accepted;
      drafted += r.speculation.drafted;
    }
    return pos;
  };
  std::int64_t acc_plain = 0, dr_plain = 0, acc = 0, dr = 0;
  const auto plain = sample(6, 1, false, acc_plain, dr_plain);
  const auto spec = sample(6, 1 + kTrials, true, acc, dr);
  INFO("draft tokens kept " << acc << " of " << dr);
  CHECK(dr_plain == 0);
  CHECK(acc > 0);  // some drafts kept...
  CHECK(acc < dr); // ...and some resampled
  for (int i = 0; i < 3; ++i) {
    int df = 0;
    const double x2 = chi_square_two_sample(plain[static_cast<std::size_t>(i)],
                                            spec[static_cast<std::size_t>(i)], df);
    INFO("token " << i + 1 << ": chi-square " << x2 << " with " << df << " degrees of freedom");
    REQUIRE(df >= 2); // the distribution is not a near-certainty, so the test has bins to judge
    CHECK(x2 < chi_square_critical_0001(df));
  }
  // The test's power: a slightly different distribution (top-k 5 instead of 6: the sixth most
  // likely token's draws move to the other five) is rejected at the same significance.
  const auto other = sample(5, 1 + 2 * kTrials, false, acc_plain, dr_plain);
  int df = 0;
  const double x2 = chi_square_two_sample(plain[0], other[0], df);
  INFO("top-k 6 against 5, first token: chi-square " << x2 << ", df " << df);
  CHECK(x2 > chi_square_critical_0001(df));
}
