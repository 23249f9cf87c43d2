// Token bytes and the token mask on the real tokenizers (scripts/fetch-tokenizers.sh), and the
// grammar in runtime::Generation.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>
#include <thread>
#include <string>

#include "error_kind.hpp"
#include "tpullm/grammar/grammar.hpp"
#include "tpullm/runtime/generation.hpp"
#include "tpullm/text/tokenizer.hpp"

using namespace tpullm;
using nlohmann::json;

namespace {

const text::Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, text::Tokenizer> cache;
  if (const auto f = cache.find(name); f != cache.end())
    return f->second;
  const std::filesystem::path dir = std::filesystem::path(TPULLM_GRAMMAR_TOKENIZERS) / name;
  if (!std::filesystem::exists(dir / "tokenizer.json"))
    FAIL("missing " << (dir / "tokenizer.json") << ": run scripts/fetch-tokenizers.sh");
  return cache.emplace(name, text::Tokenizer::from_dir(dir)).first->second;
}

const char* const kTexts[] = {
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "  leading spaces\n\ttabs and\r\nnewlines  ",
    "{\"name\": \"x\", \"values\": [1, 2.5, -3e4], \"ok\": true}",
    "\xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95\xEF\xBC\x8C\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA"
    "\x9E",
    "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and \xF0\x9F\xA6\x80 crab",
    "caf\xC3\xA9 na\xC3\xAFve \xCE\xB1\xCE\xB2\xCE\xB3 "
    "\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
};

} // namespace

TEST_CASE("token bytes concatenate to the decoded text", "[grammar][tokens]") {
  for (const char* name :
       {"qwen3", "llama3", "llama2", "llama3_1", "gemma3", "deepseek_v3", "gptoss"}) {
    const auto& tok = tokenizer(name);
    const auto table = tok.token_table();
    REQUIRE(table.get() == tok.token_table().get()); // built once
    REQUIRE(table->bytes.size() == static_cast<std::size_t>(tok.vocab_size()));
    for (const char* t : kTexts) {
      const auto ids = tok.encode(t, false);
      std::string cat;
      for (const auto id : ids) {
        CHECK(tok.token_bytes(id) == table->bytes[static_cast<std::size_t>(id)]);
        cat += tok.token_bytes(id);
      }
      const std::string dec = tok.decode(ids);
      // llama2's decoder strips the leading space SentencePiece added.
      if (std::string(name) == "llama2" && !cat.empty() && cat[0] == ' ')
        cat.erase(0, 1);
      INFO(name << ": " << t);
      CHECK(cat == dec);
    }
  }
  // Byte fallback: llama2's <0xF0> is the byte F0; special tokens are marked.
  const auto& l2 = tokenizer("llama2");
  CHECK(l2.token_bytes(*l2.token_to_id("<0xF0>")) == "\xF0");
  CHECK(l2.token_bytes(*l2.token_to_id("\xE2\x96\x81the")) == " the");
  const auto& q = tokenizer("qwen3");
  const auto eos = *q.token_to_id("<|im_end|>");
  CHECK(q.token_table()->special[static_cast<std::size_t>(eos)] == 1);
}

TEST_CASE("the token trie holds every ordinary token once, under its bytes", "[grammar][tokens]") {
  const auto table = tokenizer("qwen3").token_table();
  std::vector<int> seen(table->bytes.size(), 0);
  std::vector<std::string> path(1);
  for (std::size_t n = 1; n < table->nodes.size(); ++n) {
    const auto& nd = table->nodes[n];
    REQUIRE(nd.depth >= 1);
    REQUIRE(nd.end > static_cast<std::int32_t>(n));
    path.resize(nd.depth);
    path.push_back(path[nd.depth - 1u] + static_cast<char>(nd.byte));
    for (std::int32_t k = nd.first; k < nd.last; ++k) {
      const auto id = static_cast<std::size_t>(table->ids[static_cast<std::size_t>(k)]);
      CHECK(table->bytes[id] == path[nd.depth]);
      ++seen[id];
    }
  }
  std::size_t ordinary = 0;
  for (std::size_t id = 0; id < seen.size(); ++id) {
    const bool in_trie = !table->special[id] && !table->bytes[id].empty();
    ordinary += in_trie;
    if (seen[id] != (in_trie ? 1 : 0))
      FAIL("token " << id << " appears " << seen[id] << " times");
  }
  CHECK(ordinary > 150000);
}

namespace {

// Over every token of the vocabulary: the mask's bit is what accept_token says after `prefix`.
void check_mask(const std::shared_ptr<const grammar::Grammar>& g, const std::string& prefix,
                grammar::Matcher& m, const char* tok_name = "qwen3") {
  const auto table = tokenizer(tok_name).token_table();
  grammar::Matcher probe(g, table);
  std::vector<std::uint64_t> allowed;
  m.reset();
  REQUIRE(m.accept_bytes(prefix));
  m.fill_mask(allowed);
  REQUIRE(allowed.size() * 64 >= table->bytes.size());
  std::size_t count = 0;
  for (std::size_t id = 0; id < table->bytes.size(); ++id) {
    const bool bit = (allowed[id / 64] >> (id % 64)) & 1;
    probe.reset();
    REQUIRE(probe.accept_bytes(prefix));
    const bool ok = probe.accept_token(static_cast<std::int32_t>(id));
    if (bit != ok)
      FAIL("prefix '" << prefix << "', token " << id << " '" << table->bytes[id] << "': mask "
                      << bit << ", matcher " << ok);
    count += bit;
  }
  INFO(prefix);
  if (m.is_complete())
    CHECK(count == 0);
  else
    CHECK(count > 0);
}

} // namespace

TEST_CASE("the mask allows exactly the tokens that keep the text a prefix", "[grammar][mask]") {
  const auto table = tokenizer("qwen3").token_table();
  const json schema = json::parse(R"({"type":"object","properties":{
    "name":{"type":"string"},"n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]}}},
    "required":["name","n"],"additionalProperties":false})");
  const auto g = grammar::grammar_from_json_schema(schema);
  grammar::Matcher m(g, table);
  // One matcher through all prefixes: its caches (cut states among them) carry over.
  for (const char* prefix :
       {"", "{", "{\"n\":", "{\"n\":12", "{\"n\":12,\"name\":\"ab\xE4", "{\"n\":12,\"name\":\"x",
        "{\"n\":12,\"name\":\"x\",\"tags\":[\"a\"", "{\"n\":1,\"name\":\"\"}"})
    check_mask(g, prefix, m);
}

TEST_CASE("the mask is exact at every depth of json_object", "[grammar][mask]") {
  const auto g = grammar::json_object_grammar();
  grammar::Matcher m(g, tokenizer("qwen3").token_table());
  for (const std::string& prefix :
       {std::string("{\"a\": \"x"), std::string("{\"a\": [\"x\", \"y"),
        std::string("{\"a\": [[{\"b\": \"y"), std::string("{\"a\": [[{\"b\": 1"),
        std::string("{\"a\": [[{\"b\": [1, {\"c\": "),
        // past kMaxDepth / 2 (no cut state) and near kMaxDepth (the depth bound refuses)
        "{\"a\":" + std::string(80, '['), "{\"a\":" + std::string(80, '[') + "\"s",
        "{\"a\":" + std::string(40, '[') + "\"s", "{\"a\":" + std::string(40, '[') + "1"})
    check_mask(g, prefix, m);
}

TEST_CASE("the mask is exact for a wrapped schema and for Unicode classes", "[grammar][mask]") {
  const auto table = tokenizer("qwen3").token_table();
  const auto args = grammar::grammar_from_json_schema(json::parse(
      R"({"type":"object","properties":{"q":{"type":"string","pattern":"^[a-z\\u00e0-\\u00ff ]{1,20}$"},
      "k":{"type":"integer"}},"required":["q"],"additionalProperties":false})"));
  const auto call = grammar::wrap("<tool_call>\n", args, "\n</tool_call>");
  grammar::Matcher m(call, table);
  for (const char* prefix :
       {"", "<tool", "<tool_call>\n{", "<tool_call>\n{\"q\":\"caf\xC3",
        "<tool_call>\n{\"q\":\"ab\"}", "<tool_call>\n{\"q\":\"ab\"}\n</tool_call>"})
    check_mask(call, prefix, m);
  const auto cjk =
      grammar::parse_grammar(R"(root ::= [\u4e00-\u9fff]+ ("。" | "！") [^\x00-\x7F]*)");
  grammar::Matcher c(cjk, table);
  for (const char* prefix : {"", "\xE4\xB8\xAD", "\xE4\xB8\xAD\xE6", "\xE4\xB8\xAD\xE3\x80\x82"})
    check_mask(cjk, prefix, c);
}

TEST_CASE("matchers of one grammar share its cut masks, per token table", "[grammar][mask]") {
  const auto g = grammar::grammar_from_json_schema(json{{"type", "object"}});
  for (const char* name : {"qwen3", "llama3", "qwen3"}) {
    // A new matcher each time: the second qwen3 one finds the masks the first left, the llama3
    // one must not use them.
    grammar::Matcher m(g, tokenizer(name).token_table());
    for (const char* prefix : {"{\"a\": \"x", "{\"a\": [\"x\", \"y", "{\"b\": [{\"c\": 1"})
      check_mask(g, prefix, m, name);
  }
}

TEST_CASE("matchers of one grammar on several threads give the same masks", "[grammar][mask]") {
  const auto table = tokenizer("qwen3").token_table();
  const auto g = grammar::grammar_from_json_schema(json{{"type", "object"}});
  const char* const prefixes[] = {"{\"a\": \"x", "{\"a\": [\"x\", \"y", "{\"b\": [{\"c\": 1",
                                  "{\"d\": tr"};
  std::vector<std::vector<std::uint64_t>> expected;
  {
    grammar::Matcher m(grammar::grammar_from_json_schema(json{{"type", "object"}}), table);
    for (const char* p : prefixes) {
      m.reset();
      REQUIRE(m.accept_bytes(p));
      m.fill_mask(expected.emplace_back());
    }
  }
  std::vector<int> same(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      grammar::Matcher m(g, table);
      std::vector<std::uint64_t> got;
      int ok = 0;
      for (int round = 0; round < 3; ++round)
        for (std::size_t k = 0; k < std::size(prefixes); ++k) {
          m.reset();
          m.accept_bytes(prefixes[(k + static_cast<std::size_t>(t)) % std::size(prefixes)]);
          m.fill_mask(got);
          ok += got == expected[(k + static_cast<std::size_t>(t)) % std::size(prefixes)];
        }
      same[static_cast<std::size_t>(t)] = ok;
    });
  for (auto& th : threads)
    th.join();
  for (const int ok : same)
    CHECK(ok == 3 * static_cast<int>(std::size(prefixes)));
}

TEST_CASE("greedy decoding of random logits under a schema gives JSON with the required keys",
          "[grammar][generation]") {
  const auto& tok = tokenizer("qwen3");
  const json schema = json::parse(R"({"type":"object","properties":{
    "id":{"type":"integer"},"label":{"type":"string","maxLength":12},
    "color":{"enum":["red","green"]},"flags":{"type":"array","items":{"type":"boolean"},"maxItems":3},
    "when":{"type":"string","format":"date"},"extra":{"type":["number","null"]}},
    "required":["id","label","color","when"],"additionalProperties":false})");
  const auto eos = *tok.token_to_id("<|im_end|>");
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> logits(static_cast<std::size_t>(tok.vocab_size()));
  for (int trial = 0; trial < 4; ++trial) {
    runtime::GenerateOptions o;
    o.grammar = grammar::grammar_from_json_schema(schema);
    o.stop.max_new_tokens = 400;
    if (trial % 2 == 0)
      o.stop.eos_ids = {eos};
    runtime::Generation gen(o, &tok, {});
    while (!gen.done()) {
      for (auto& x : logits)
        x = noise(rng);
      gen.step(logits, gen.generated() + 1, 4096);
    }
    INFO(gen.text());
    REQUIRE(gen.stop_reason() == runtime::StopReason::eos);
    const json doc = json::parse(gen.text());
    for (const char* k : {"id", "label", "color", "when"})
      CHECK(doc.contains(k));
    CHECK(doc["label"].get<std::string>().size() <= 4 * 12);
  }
}

TEST_CASE("Generation refuses tokens outside the grammar and ends where it must",
          "[grammar][generation]") {
  const auto& tok = tokenizer("qwen3");
  runtime::GenerateOptions o;
  o.grammar = grammar::parse_grammar(R"(root ::= "yes" | "no")");
  const auto eos = *tok.token_to_id("<|im_end|>");
  o.stop.eos_ids = {eos};
  {
    runtime::Generation gen(o, &tok, {});
    CHECK_THROWS_KIND(gen.accept(eos, 1, 100), invalid_input); // cannot end yet
    CHECK_THROWS_KIND(gen.accept(tok.encode("maybe", false)[0], 1, 100), invalid_input);
  }
  {
    runtime::Generation gen(o, &tok, {});
    const auto ids = tok.encode("yes", false);
    for (const auto id : ids)
      gen.accept(id, 1, 100);
    CHECK_FALSE(gen.done());
    // Complete: only eos is left, whatever the logits say.
    std::vector<float> logits(static_cast<std::size_t>(tok.vocab_size()), 5.0f);
    logits[static_cast<std::size_t>(eos)] = -100.0f;
    const auto s = gen.step(logits, 2, 100);
    CHECK(s.token == eos);
    CHECK(s.stop == runtime::StopReason::eos);
    CHECK(gen.text() == "yes");
  }
  {
    o.stop.eos_ids.clear(); // no eos id: the answer ends on the token that completes it
    runtime::Generation gen(o, &tok, {});
    std::vector<float> logits(static_cast<std::size_t>(tok.vocab_size()), 0.0f);
    logits[static_cast<std::size_t>(tok.encode("no", false)[0])] = 10.0f;
    const auto s = gen.step(logits, 1, 100);
    CHECK(s.stop == runtime::StopReason::eos);
    CHECK(gen.text() == "no");
  }
  CHECK_THROWS_KIND(runtime::Generation(o, nullptr, {}), invalid_input);
}
