// Tokenizer encode speed, single thread: MB/s of a multi-MB mixed-language text (English, CJK,
// Cyrillic, Arabic, code, emoji, digits, whitespace runs). The text is the file named by
// TPULLM_BENCH_TEXT, else built here deterministically; the tokenizer is the folder named by
// TPULLM_BENCH_TOKENIZER, else ~/.cache/tpullm/tokenizers/qwen3. bench/tokenizer_vs_hf.sh runs
// this and HuggingFace's Rust tokenizer on the same text.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "tpullm/text/tokenizer.hpp"

namespace {

std::string env_or(const char* name, const std::string& dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : dflt;
}

// About `bytes` of text: sentences of several scripts drawn by a fixed-seed generator, with
// numbers mixed in so that not every word repeats.
std::string mixed_text(std::size_t bytes) {
  static const char* const sentences[] = {
      "The compiler lowers each transformer layer into a small module and plans its memory. ",
      "Large language models convert the input text into tokens before the first prefill. ",
      "大型语言模型首先把输入文本转换成词元，然后进行预填充和解码。",
      "東京の天気は晴れ、気温は二十三度です。カタカナとひらがなも混ざります。",
      "Привет, мир! Это проверка токенизатора на кириллице и цифрах. ",
      "مرحبا بالعالم، هذا اختبار للنص العربي. ",
      "def encode(text):\n    return [vocab[w] for w in text.split()]  # O(n)\n",
      "    if (a && b) { c += d[i]; }\n\n",
      "Emoji 👋🌍 and families 👨\u200d👩\u200d👧 appear in chats. ",
      "I'm sure they'll say it's fine, but we've seen THE DIFFERENCE. ",
      "한국어 문장도 포함되어 있습니다. ",
      "Ελληνικά: ΣΊΣΥΦΟΣ και ς. ",
      "\n\n   \t  whitespace runs\r\n",
  };
  std::mt19937_64 rng(20261201);
  std::string out;
  out.reserve(bytes + 256);
  while (out.size() < bytes) {
    out += sentences[rng() % std::size(sentences)];
    if (rng() % 4 == 0)
      out += std::to_string(rng() % 1000000) + " ";
  }
  return out;
}

std::string bench_text() {
  const std::string file = env_or("TPULLM_BENCH_TEXT", "");
  if (file.empty())
    return mixed_text(4u << 20);
  std::ifstream f(file, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The tokenizer and the text, loaded once.
struct Setup {
  std::unique_ptr<tpullm::text::Tokenizer> tok;
  std::string text, error;
  std::vector<std::string_view> lines; // the text cut after each '\n'
};
const Setup& setup() {
  static const Setup s = [] {
    Setup r;
    const std::string home = env_or("HOME", ".");
    const std::string dir =
        env_or("TPULLM_BENCH_TOKENIZER", home + "/.cache/tpullm/tokenizers/qwen3");
    if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
      r.error = "no tokenizer.json in " + dir + " (scripts/fetch-tokenizers.sh)";
      return r;
    }
    r.tok = std::make_unique<tpullm::text::Tokenizer>(tpullm::text::Tokenizer::from_dir(dir));
    r.text = bench_text();
    for (std::size_t i = 0; i < r.text.size();) {
      const std::size_t j = std::min(r.text.find('\n', i), r.text.size() - 1) + 1;
      r.lines.emplace_back(r.text.data() + i, j - i);
      i = j;
    }
    return r;
  }();
  return s;
}

// The whole text in one encode call.
void BM_TokenizerEncode(benchmark::State& state) {
  const Setup& s = setup();
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  std::size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = s.tok->encode(s.text, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * s.text.size()));
  state.counters["text_bytes"] = static_cast<double>(s.text.size());
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_TokenizerEncode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// One encode call per line (prompt-sized inputs).
void BM_TokenizerEncodeLines(benchmark::State& state) {
  const Setup& s = setup();
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  std::size_t tokens = 0;
  for (auto _ : state) {
    tokens = 0;
    for (const auto line : s.lines) {
      const auto ids = s.tok->encode(line, false);
      tokens += ids.size();
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * s.text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_TokenizerEncodeLines)->Unit(benchmark::kMillisecond)->MinTime(2.0);

} // namespace

BENCHMARK_MAIN();
