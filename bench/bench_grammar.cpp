// Grammar-constrained decoding: the cost per token of the mask (runtime::Generation::step with a
// grammar against the same step without one) over the Qwen3 tokenizer (151k tokens), for
// json_object and a nested JSON schema. Each answer is a new Generation (a new Matcher), forced
// to a fixed JSON document by its logits. "Cold": a new Grammar per answer (built outside the
// timing), so no cache helps, as for the first request with a schema; "Warm": the same Grammar
// for every answer, whose cut masks the matchers share, as for repeated requests.
// The tokenizer is the folder named by TPULLM_BENCH_TOKENIZER, else
// ~/.cache/tpullm/tokenizers/qwen3. Reported: us_per_token (counter).
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "tpullm/grammar/grammar.hpp"
#include "tpullm/runtime/generation.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace {

using namespace tpullm;

const text::Tokenizer& tok() {
  static const text::Tokenizer t = [] {
    const char* env = std::getenv("TPULLM_BENCH_TOKENIZER");
    std::filesystem::path dir;
    if (env != nullptr && *env != '\0') {
      dir = env;
    } else {
      const char* home = std::getenv("HOME");
      dir = std::filesystem::path(home ? home : "") / ".cache/tpullm/tokenizers/qwen3";
    }
    return text::Tokenizer::from_dir(dir);
  }();
  return t;
}

const char* const kObjectDoc =
    R"({"name": "Alice Martin", "age": 30, "tags": ["admin", "ops", "on-call"], "address": )"
    R"({"city": "Paris", "zip": "75001", "lines": ["12 rue de la Paix", "3e étage"]}, )"
    R"("scores": [1.5, -2e3, 0.25], "active": true, "manager": null, "note": )"
    R"("中文 text with an emoji 😀 and \"quotes\" inside"})";

const char* const kSchema = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string"},"maxItems":8},
  "address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"},
     "lines":{"type":"array","items":{"type":"string"}}},"required":["city","zip"],"additionalProperties":false},
  "scores":{"type":"array","items":{"type":"number"}},"active":{"type":"boolean"},
  "manager":{"anyOf":[{"type":"string"},{"type":"null"}]},"note":{"type":"string"}},
  "required":["name","age","tags","address","scores","active","manager","note"],"additionalProperties":false})";

// The schema's document: nlohmann orders keys, so the properties come sorted.
std::string schema_doc() {
  return nlohmann::json::parse(kObjectDoc).dump();
}

using MakeGrammar = std::shared_ptr<const grammar::Grammar> (*)();

std::shared_ptr<const grammar::Grammar> no_grammar() {
  return nullptr;
}
std::shared_ptr<const grammar::Grammar> object_grammar() {
  return grammar::grammar_from_json_schema(nlohmann::json{{"type", "object"}});
}
std::shared_ptr<const grammar::Grammar> schema_grammar() {
  return grammar::grammar_from_json_schema(nlohmann::json::parse(kSchema));
}

void run(benchmark::State& state, MakeGrammar make, bool cold, const std::string& doc) {
  const auto& t = tok();
  const auto ids = t.encode(doc, false);
  const auto eos = *t.token_to_id("<|im_end|>");
  std::vector<float> logits(static_cast<std::size_t>(t.vocab_size()), 0.0f);
  t.token_table(); // built once per tokenizer, not per answer
  std::shared_ptr<const grammar::Grammar> g = make();
  std::size_t tokens = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      g = make();
      state.ResumeTiming();
    }
    runtime::GenerateOptions o;
    o.grammar = g;
    o.stop.eos_ids = {eos};
    o.stop.max_new_tokens = 100000;
    runtime::Generation gen(o, &t, {});
    for (std::size_t i = 0; i <= ids.size(); ++i) {
      const auto want = i < ids.size() ? ids[i] : eos;
      logits[static_cast<std::size_t>(want)] = 1.0f;
      const auto s = gen.step(logits, static_cast<std::int64_t>(i) + 1, 1 << 20);
      logits[static_cast<std::size_t>(want)] = 0.0f;
      if (s.token != want)
        state.SkipWithError("the grammar refused the document");
    }
    tokens += ids.size() + 1;
  }
  state.counters["us_per_token"] = benchmark::Counter(
      static_cast<double>(tokens) / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_StepFreeText(benchmark::State& state) {
  run(state, no_grammar, false, kObjectDoc);
}
void BM_StepJsonObjectCold(benchmark::State& state) {
  run(state, object_grammar, true, kObjectDoc);
}
void BM_StepJsonObjectWarm(benchmark::State& state) {
  run(state, object_grammar, false, kObjectDoc);
}
void BM_StepNestedSchemaCold(benchmark::State& state) {
  run(state, schema_grammar, true, schema_doc());
}
void BM_StepNestedSchemaWarm(benchmark::State& state) {
  run(state, schema_grammar, false, schema_doc());
}

// The worst single step: the first mask inside a string, where nearly every token is allowed and
// the walk visits the whole trie (a new grammar and matcher each time: nothing cached).
void BM_FirstMaskInString(benchmark::State& state) {
  const auto table = tok().token_table();
  std::vector<std::uint64_t> allowed;
  for (auto _ : state) {
    state.PauseTiming();
    const auto g = object_grammar();
    state.ResumeTiming();
    grammar::Matcher m(g, table);
    m.accept_bytes(R"({"key": ")");
    m.fill_mask(allowed);
    benchmark::DoNotOptimize(allowed.data());
  }
  state.counters["trie_nodes"] = static_cast<double>(table->nodes.size());
}

} // namespace

BENCHMARK(BM_FirstMaskInString)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepFreeText)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepJsonObjectCold)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepJsonObjectWarm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepNestedSchemaCold)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepNestedSchemaWarm)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
