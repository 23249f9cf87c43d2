// Constrained answers over noise, for the validator property test (test_structured.cjs): for one
// JSON Schema (or --json-object) and a range of seeds, runs runtime::Generation with the schema's
// grammar over random logits rows, as a random-weight model's free output is noise, and prints
// one JSON line per answer: {"seed", "stop" (to_string(StopReason)), "text"}.
//
// The rows: a fixed table of N(0, 2) values over the vocabulary, rotated by a random offset at
// each step, plus a bias of +12 on the tokens whose text is one structural byte ( " { } [ ] , : )
// and on the stop ids, so that answers tend to close their strings and containers within the
// budget; which continuation wins is still noise. The grammar, not the logits, is what keeps an
// answer valid: the bias changes how many answers end within the budget, never their validity.
//
// Usage: tpullm-structured-sample TOKENIZER_DIR (SCHEMA.json | --json-object) FIRST_SEED ANSWERS
//        MAX_TOKENS [--timing]
// --timing also writes to stderr the time per step with the grammar and, on the same rows, of a
// free Generation stepped beside it: the difference is the mask's cost per token for this schema
// (a measurement, never an assertion).
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

int main(int argc, char** argv) {
  const bool timing = argc == 7 && std::string_view(argv[6]) == "--timing";
  if (argc != 6 && !timing) {
    std::cerr << "usage: tpullm-structured-sample TOKENIZER_DIR (SCHEMA.json | --json-object) "
                 "FIRST_SEED ANSWERS MAX_TOKENS\n";
    return 2;
  }
  try {
    const text::Tokenizer tok = text::Tokenizer::from_dir(argv[1]);
    const std::string which = argv[2];
    const std::uint64_t first = std::stoull(argv[3]);
    const int answers = std::stoi(argv[4]);
    const int max_tokens = std::stoi(argv[5]);
    if (answers < 1 || answers > 100000 || max_tokens < 1 || max_tokens > 4096)
      throw std::runtime_error("ANSWERS in [1, 100000], MAX_TOKENS in [1, 4096]");
    const auto grammar =
        which == "--json-object"
            ? grammar::json_object_grammar()
            : grammar::grammar_from_json_schema(nlohmann::json::parse(read_regular_file(which)));

    std::vector<std::int32_t> stops;
    for (const char* s : {"<|im_end|>", "<|endoftext|>"})
      if (auto id = tok.token_to_id(s))
        stops.push_back(*id);
    const auto table = tok.token_table();
    const std::size_t vocab = table->bytes.size();
    std::vector<std::size_t> biased; // tokens that get +12
    for (std::size_t i = 0; i < vocab; ++i) {
      const std::string& b = table->bytes[i];
      if (b.size() == 1 && std::string_view("\"{}[],:").find(b[0]) != std::string_view::npos)
        biased.push_back(i);
    }
    for (auto s : stops)
      biased.push_back(static_cast<std::size_t>(s));
    std::mt19937_64 noise_rng(12345);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> noise(vocab);
    for (auto& x : noise)
      x = normal(noise_rng);

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
        std::copy(noise.begin() + off, noise.end(), row.begin());
        std::copy(noise.begin(), noise.begin() + off, row.end() - off);
        for (std::size_t i : biased)
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
      std::cout << nlohmann::json{{"seed", seed},
                                  {"stop", std::string(runtime::to_string(*gen.stop_reason()))},
                                  {"text", std::string(gen.text())}}
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    }
    if (timing && steps > 0)
      std::cerr << "steps " << steps << ", us per step with the grammar "
                << std::chrono::duration<double, std::micro>(with_grammar).count() /
                       static_cast<double>(steps)
                << ", without "
                << std::chrono::duration<double, std::micro>(free_text).count() /
                       static_cast<double>(steps)
                << "\n";
  } catch (const std::exception& e) {
    std::cerr << "tpullm-structured-sample: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
