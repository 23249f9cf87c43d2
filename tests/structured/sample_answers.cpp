// Constrained answers over noise, for the validator property test (test_structured.cjs): for
// each case (a JSON Schema or --json-object, and a first seed), runs runtime::Generation with the
// schema's grammar over random logits rows for ANSWERS seeds, as a random-weight model's free
// output is noise, and prints one JSON line per answer: {"case" (its index among the cases),
// "seed", "stop" (to_string(StopReason)), "text"}. The tokenizer is loaded once for all cases
// (under the sanitizers, loading the 151k-token Qwen3 tokenizer is most of a case's time).
//
// The rows: a fixed table of N(0, 2) values over the vocabulary, rotated by a random offset at
// each step, plus a bias of +12 on the tokens whose text is one structural byte ( " { } [ ] , : )
// and on the stop ids, so that answers tend to close their strings and containers within the
// budget; which continuation wins is still noise. The grammar, not the logits, is what keeps an
// answer valid: the bias changes how many answers end within the budget, never their validity.
//
// Usage: tpullm-structured-sample TOKENIZER_DIR ANSWERS MAX_TOKENS [--timing]
//        FIRST_SEED:(SCHEMA.json | --json-object)...
// --timing also writes to stderr, per case, the time per step with the grammar and, on the same
// rows, of a free Generation stepped beside it: the difference is the mask's cost per token for
// that schema (a measurement, never an assertion).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tpullm/grammar/grammar.hpp"
#include "tpullm/runtime/generation.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/text/tokenizer.hpp"

using namespace tpullm;

namespace {

/// The rows' fixed parts for one tokenizer: the noise table and the biased token ids.
struct Rows {
  std::vector<float> noise;
  std::vector<std::size_t> biased; // tokens that get +12
};

/// Prints ANSWERS constrained answers of case `index` (its grammar, seeds first, first + 1, ...).
void sample_case(const text::Tokenizer& tok, const Rows& rows,
                 const std::vector<std::int32_t>& stops,
                 std::shared_ptr<const grammar::Grammar> grammar, std::size_t index,
                 std::uint64_t first, int answers, int max_tokens, bool timing) {
  const std::size_t vocab = rows.noise.size();
  std::vector<float> row(vocab);
  using clock = std::chrono::steady_clock;
  clock::duration with_grammar{}, free_text{};
  std::int64_t steps = 0;
  for (int a = 0; a < answers; ++a) {
    const std::uint64_t seed = first + static_cast<std::uint64_t>(a);
    runtime::GenerateOptions o;
    o.sampling.temperature = 1.0f;
    o.sampling.seed = seed;
    o.stop.eos_ids = stops;
    o.stop.max_new_tokens = max_tokens;
    o.grammar = grammar;
    runtime::Generation gen(o, &tok, {});
    runtime::GenerateOptions free_options = o;
    free_options.grammar = nullptr;
    free_options.stop.max_new_tokens = 1 << 20;
    free_options.stop.eos_ids.clear();
    // A free answer stepped on the same rows beside the constrained one (warm like it): the
    // sampler's and the detokenizer's share of a step, without the mask.
    runtime::Generation free_gen(free_options, &tok, {});
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
    while (!gen.done()) {
      // The noise table rotated by a random offset, then the bias.
      const auto off = static_cast<std::ptrdiff_t>(rng() % vocab);
      std::copy(rows.noise.begin() + off, rows.noise.end(), row.begin());
      std::copy(rows.noise.begin(), rows.noise.begin() + off, row.end() - off);
      for (std::size_t i : rows.biased)
        row[i] += 12.0f;
      const auto t0 = clock::now();
      (void)gen.step(row, 0, 1 << 20);
      const auto t1 = clock::now();
      if (timing) {
        (void)free_gen.step(row, 0, 1 << 20);
        free_text += clock::now() - t1;
        with_grammar += t1 - t0;
        ++steps;
      }
    }
    std::cout << nlohmann::json{{"case", index},
                                {"seed", seed},
                                {"stop", std::string(runtime::to_string(*gen.stop_reason()))},
                                {"text", std::string(gen.text())}}
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  }
  if (timing && steps > 0)
    std::cerr << "case " << index << ": steps " << steps << ", us per step with the grammar "
              << std::chrono::duration<double, std::micro>(with_grammar).count() /
                     static_cast<double>(steps)
              << ", without "
              << std::chrono::duration<double, std::micro>(free_text).count() /
                     static_cast<double>(steps)
              << "\n";
}

} // namespace

int main(int argc, char** argv) {
  const bool timing = argc > 4 && std::string_view(argv[4]) == "--timing";
  const int first_case = timing ? 5 : 4;
  if (argc <= first_case) {
    std::cerr << "usage: tpullm-structured-sample TOKENIZER_DIR ANSWERS MAX_TOKENS [--timing] "
                 "FIRST_SEED:(SCHEMA.json | --json-object)...\n";
    return 2;
  }
  try {
    const text::Tokenizer tok = text::Tokenizer::from_dir(argv[1]);
    const int answers = std::stoi(argv[2]);
    const int max_tokens = std::stoi(argv[3]);
    if (answers < 1 || answers > 100000 || max_tokens < 1 || max_tokens > 4096)
      throw std::runtime_error("ANSWERS in [1, 100000], MAX_TOKENS in [1, 4096]");

    std::vector<std::int32_t> stops;
    for (const char* s : {"<|im_end|>", "<|endoftext|>"})
      if (auto id = tok.token_to_id(s))
        stops.push_back(*id);
    const auto table = tok.token_table();
    const std::size_t vocab = table->bytes.size();
    Rows rows;
    for (std::size_t i = 0; i < vocab; ++i) {
      const std::string& b = table->bytes[i];
      if (b.size() == 1 && std::string_view("\"{}[],:").find(b[0]) != std::string_view::npos)
        rows.biased.push_back(i);
    }
    for (auto s : stops)
      rows.biased.push_back(static_cast<std::size_t>(s));
    std::mt19937_64 noise_rng(12345);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    rows.noise.resize(vocab);
    for (auto& x : rows.noise)
      x = normal(noise_rng);

    for (int c = first_case; c < argc; ++c) {
      const std::string_view arg = argv[c];
      const auto colon = arg.find(':');
      if (colon == std::string_view::npos)
        throw std::runtime_error("a case is FIRST_SEED:SCHEMA, got '" + std::string(arg) + "'");
      const std::uint64_t first = std::stoull(std::string(arg.substr(0, colon)));
      const std::string which(arg.substr(colon + 1));
      const auto grammar =
          which == "--json-object"
              ? grammar::json_object_grammar()
              : grammar::grammar_from_json_schema(nlohmann::json::parse(read_regular_file(which)));
      sample_case(tok, rows, stops, grammar, static_cast<std::size_t>(c - first_case), first,
                  answers, max_tokens, timing);
    }
  } catch (const std::exception& e) {
    std::cerr << "tpullm-structured-sample: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
