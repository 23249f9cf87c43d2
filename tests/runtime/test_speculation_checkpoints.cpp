// Greedy speculative decoding on every shared checkpoint (tests/data/models: llama, qwen2 with
// tied embeddings and biases, qwen3 with q/k norms, GPTQ and AWQ weights, two mixtures of
// experts): the answer is plain decoding's token for token, with drafts from the context
// (prompt lookup), from the checkpoint itself as a draft model, from the plain answer (every
// draft right) and from the plain answer with every third draft wrong, ended by the budget, an
// eos id met mid-answer and the end of the compiled sequence mid-draft. The checkpoints compile
// with int8-input linears (w8a16, --act-quant dynamic, a w8 lm_head), where a verify row's logits
// are the decode step's bit for bit on every ISA (test_speculation.cpp), so a greedy tie cannot
// go another way and the comparison is exact.
#include "small_compile.hpp"
#include "speculation_answers.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/draft_model.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/runtime/speculation.hpp"

using namespace tpullm;

TEST_CASE("greedy speculation answers as plain decoding on every shared checkpoint",
          "[speculation]") {
  const char* const checkpoints[] = {
      "llama-gqa",          "qwen2-tied-bias",         "qwen3-headdim",
      "llama-gqa-gptq-g32", "qwen2-tied-bias-awq-g32", "mixtral-e8k2",
      "qwen3moe-e16k4"};
  // 96 positions; verify segments of up to 8 rows (draft_max 7) through the 4- and 8-row
  // prefill variants and batched lm_heads.
  auto p = tpullm_test::small_params(96, 16, {64, 32}, {4, 8});
  p.verify_lengths = {4, 8};
  // A prompt that repeats itself, so that prompt lookup finds drafts (ids below every
  // checkpoint's vocabulary).
  std::vector<std::int32_t> prompt;
  for (int r = 0; r < 3; ++r)
    prompt.insert(prompt.end(), {3, 17, 42, 9, 250, 11});
  prompt.insert(prompt.end(), {3, 17});
  enum class Source { lookup, self_model, oracle, wrong_third };
  struct End {
    const char* what;
    int max_new;
    bool eos;
  };
  const End ends[] = {
      {"40 tokens", 40, false}, {"the end of the sequence", 200, false}, {"an eos id", 40, true}};
  for (const char* name : checkpoints) {
    const auto desc = frontend::load_model(tpullm_test::model_dir(name));
    compiler::CompileOptions o;
    o.target.cores = 2;
    o.lower.mode = "w8a16";
    o.lower.act_quant = "dynamic";
    o.lower.lm_head = "w8";
    o.lower.group_size = 32;
    const auto cm = compiler::compile(frontend::build_top_modules(desc, p), o);
    // Slot 0: plain decoding; 1: speculative; 2: the checkpoint as its own draft model.
    auto exec = runtime::make_executor(cm, 0, 3);
    runtime::CompiledStages st[3] = {runtime::CompiledStages{*exec, 0},
                                     runtime::CompiledStages{*exec, 1},
                                     runtime::CompiledStages{*exec, 2}};
    const auto dims = runtime::session_dims(bundle::make_model_info(desc, p, o.lower.mode));
    const std::int32_t vocab = static_cast<std::int32_t>(desc.dims.vocab);
    for (const End& e : ends)
      for (Source src : {Source::lookup, Source::self_model, Source::oracle, Source::wrong_third}) {
        INFO(name << ": ended by " << e.what << ", source " << static_cast<int>(src));
        runtime::GenerateOptions g;
        g.stop.max_new_tokens = e.max_new;
        runtime::Session plain_s(st[0], dims, p);
        const auto plain = tpullm_test::plain_answer(plain_s, prompt, g, e.eos);
        if (e.max_new == 200)
          CHECK(plain.reason == runtime::StopReason::sequence_end);
        const auto answer = plain.tokens;
        auto sg = g;
        sg.speculation.draft_max = 7;
        runtime::Session draft_s(st[2], dims, p);
        runtime::DraftModel drafts(draft_s);
        if (src == Source::self_model) {
          sg.speculation.draft = drafts.source();
          sg.speculation.prepare = drafts.preparer();
        } else if (src != Source::lookup) {
          sg.speculation.draft =
              tpullm_test::answer_drafts(answer, prompt.size(), src == Source::wrong_third, vocab);
        }
        runtime::Session spec_s(st[1], dims, p);
        const auto spec = spec_s.generate(prompt, sg);
        tpullm_test::check_same_answer(spec, plain, spec_s.length(), plain_s.length());
        const auto& sp = spec.speculation;
        if (src != Source::lookup) // a random model's answer rarely repeats its context
          CHECK(sp.verify_calls > 0);
        // the same arithmetic: kept (but for the drafts past an eos, which end the answer)
        if ((src == Source::oracle || src == Source::self_model) && !e.eos)
          CHECK(sp.accepted * 10 >= sp.drafted * 8);
        if (src == Source::wrong_third)
          CHECK(sp.accepted <= 2 * sp.verify_calls);
      }
  }
}
