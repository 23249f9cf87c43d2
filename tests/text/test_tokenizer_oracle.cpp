// Every real tokenizer x every oracle case (hand-written hard strings and generated ones) x
// add_special {false, true}: ids, pieces, decode, decode skipping special tokens and the streaming
// deltas all equal HuggingFace's Rust tokenizers (tests/data/text/tok/NAME.jsonl).
#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tokenizer_files.hpp"
#include "tpullm/text/stream_decoder.hpp"
#include "tpullm/text/tokenizer.hpp"

using tpullm::text::StreamDecoder;
using tpullm::text::Tokenizer;

namespace {

const Tokenizer& real(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& t = loaded[name];
  if (!t)
    t = std::make_unique<Tokenizer>(Tokenizer::from_dir(real_tokenizer_dir(name)));
  return *t;
}

std::vector<nlohmann::json> oracle_records(const std::string& name) {
  std::ifstream f(oracle_dir() / (name + ".jsonl"));
  REQUIRE(f.good());
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(f, line);)
    if (!line.empty())
      out.push_back(nlohmann::json::parse(line));
  return out;
}

std::string show(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Counts the records where `what` differs; reports the first few in full.
struct Mismatches {
  std::string name;
  int count = 0;
  std::ostringstream first;
  void add(const std::string& what, const nlohmann::json& rec, const nlohmann::json& got) {
    if (++count <= 5)
      first << name << " " << what << " of " << show(rec["text"])
            << " add_special=" << rec["add_special"] << "\n  expected " << show(rec[what])
            << "\n  got      " << show(got) << "\n";
  }
};

// pieces(ids) is convert_ids_to_tokens; the oracle's tokens are the Encoding's, which for an
// added token with lstrip / rstrip hold the whitespace it swallowed. Only there may they differ,
// by that whitespace.
bool same_pieces(const Tokenizer& tok, const std::vector<std::int32_t>& ids,
                 const nlohmann::json& expected) {
  const auto got = tok.pieces(ids);
  if (!expected.is_array() || expected.size() != got.size())
    return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::string e = expected[i].get<std::string>();
    if (e == got[i])
      continue;
    const auto b = e.find_first_not_of(" \t\n"), z = e.find_last_not_of(" \t\n");
    if (b == std::string::npos || e.substr(b, z - b + 1) != got[i] ||
        tok.token_to_id(got[i]) != ids[i])
      return false;
  }
  return true;
}

void check_against_oracle(const std::string& name, const Tokenizer& tok, std::size_t min_records) {
  const auto records = oracle_records(name);
  REQUIRE(records.size() >= min_records);
  Mismatches bad;
  bad.name = name;
  std::size_t streamed = 0;
  for (const auto& rec : records) {
    const std::string text = rec["text"].get<std::string>();
    const bool add = rec["add_special"].get<bool>();
    const auto ids = tok.encode(text, add);
    if (nlohmann::json(ids) != rec["ids"])
      bad.add("ids", rec, ids);
    const auto expected_ids = rec["ids"].get<std::vector<std::int32_t>>();
    if (!same_pieces(tok, expected_ids, rec["tokens"]))
      bad.add("tokens", rec, tok.pieces(expected_ids));
    if (tok.decode(expected_ids, false) != rec["decoded"].get<std::string>())
      bad.add("decoded", rec, tok.decode(expected_ids, false));
    if (tok.decode(expected_ids, true) != rec["decoded_skip"].get<std::string>())
      bad.add("decoded_skip", rec, tok.decode(expected_ids, true));
    if (rec.contains("stream_deltas")) {
      ++streamed;
      StreamDecoder sd(tok);
      std::vector<std::string> deltas;
      for (const auto id : expected_ids)
        deltas.push_back(sd.push(id));
      const std::string rest = sd.finish();
      if (!deltas.empty())
        deltas.back() += rest;
      else if (!rest.empty())
        deltas.push_back(rest);
      if (nlohmann::json(deltas) != rec["stream_deltas"])
        bad.add("stream_deltas", rec, deltas);
    }
  }
  INFO(bad.first.str());
  CHECK(streamed * 2 == records.size());
  CHECK(bad.count == 0);
}

} // namespace

TEST_CASE("qwen3 equals the Rust tokenizer on every oracle case", "[text][oracle]") {
  check_against_oracle("qwen3", real("qwen3"), 700);
}
TEST_CASE("llama3 equals the Rust tokenizer on every oracle case", "[text][oracle]") {
  check_against_oracle("llama3", real("llama3"), 700);
}
TEST_CASE("llama3_1 equals the Rust tokenizer on every oracle case", "[text][oracle]") {
  check_against_oracle("llama3_1", real("llama3_1"), 700);
}
TEST_CASE("llama2 (Mistral) equals the Rust tokenizer on every oracle case", "[text][oracle]") {
  check_against_oracle("llama2", real("llama2"), 700);
}
TEST_CASE("gemma3 equals the Rust tokenizer on every oracle case", "[text][oracle]") {
  check_against_oracle("gemma3", real("gemma3"), 700);
}
TEST_CASE("deepseek_v3 equals the Rust tokenizer on every oracle case", "[text][oracle]") {
  check_against_oracle("deepseek_v3", real("deepseek_v3"), 700);
}
TEST_CASE("gptoss equals the Rust tokenizer on every oracle case", "[text][oracle]") {
  check_against_oracle("gptoss", real("gptoss"), 700);
}

// Hand-made small tokenizers (tests/data/text/tok/mini/) for what the real files do not use.
TEST_CASE("mini byte-level tokenizer equals the Rust tokenizer", "[text][oracle]") {
  const auto t = Tokenizer::from_dir(oracle_dir() / "mini" / "bytelevel");
  check_against_oracle("mini_bytelevel", t, 160);
}
TEST_CASE("mini subword-prefix tokenizer equals the Rust tokenizer", "[text][oracle]") {
  const auto t = Tokenizer::from_dir(oracle_dir() / "mini" / "wordpiece_like");
  check_against_oracle("mini_wordpiece_like", t, 160);
}

TEST_CASE("encode from four threads at once equals the Rust tokenizer", "[text][oracle][threads]") {
  const Tokenizer t = Tokenizer::from_dir(real_tokenizer_dir("llama3"));
  const auto records = oracle_records("llama3");
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int k = 0; k < 4; ++k)
    pool.emplace_back([&, k] {
      for (std::size_t i = 0; i < records.size(); ++i) {
        const auto& rec = records[(i + static_cast<std::size_t>(k) * 97) % records.size()];
        if (nlohmann::json(t.encode(rec["text"].get<std::string>(),
                                    rec["add_special"].get<bool>())) != rec["ids"])
          ++wrong;
      }
    });
  for (auto& th : pool)
    th.join();
  CHECK(wrong == 0);
}
