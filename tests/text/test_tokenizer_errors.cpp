// Bad tokenizer.json files (malformed, truncated, unknown stage types, merges outside the vocab)
// are one-line errors of the right kind; invalid UTF-8 input reads as U+FFFD per bad byte; the
// configs' special tokens, templates and generation defaults are read as written.
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tokenizer_files.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/text/stream_decoder.hpp"
#include "tpullm/text/tokenizer.hpp"

using tpullm::Error;
using tpullm::ErrorKind;
using tpullm::text::StreamDecoder;
using tpullm::text::Tokenizer;
using Json = nlohmann::json;

namespace {

// A minimal valid tokenizer.json: characters a, b, c, their merges "a b" -> ab, "ab c" -> abc.
Json mini() {
  return Json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "vocab":
              {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, "merges": ["a b", "ab c"]}})");
}

// The error thrown by loading `j` (as text); fails when it loads.
Error load_error(const std::string& text) {
  try {
    (void)Tokenizer::from_json(text);
  } catch (const Error& e) {
    return e;
  }
  FAIL("loaded without an error: " << text.substr(0, 200));
  throw std::logic_error("unreachable");
}

void expect_error(const Json& j, ErrorKind kind, const std::string& fragment) {
  const Error e = load_error(j.dump());
  INFO(e.what());
  CHECK(e.kind() == kind);
  CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  CHECK(std::string(e.what()).find('\n') == std::string::npos);
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

} // namespace

TEST_CASE("the minimal tokenizer loads and merges by rank", "[text][errors]") {
  const auto t = Tokenizer::from_json(mini().dump());
  CHECK(t.encode("abc") == std::vector<std::int32_t>{4});
  CHECK(t.encode("cab") == std::vector<std::int32_t>{2, 3});
  CHECK(t.vocab_size() == 5);
}

TEST_CASE("malformed and truncated tokenizer.json are invalid input", "[text][errors]") {
  for (const std::string text : {"", "{", "[1, 2]", "{\"model\": ", "not json"}) {
    const Error e = load_error(text);
    INFO(e.what());
    CHECK(e.kind() == ErrorKind::invalid_input);
    CHECK(std::string(e.what()).find("tokenizer.json") != std::string::npos);
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
  const std::string real = read(real_tokenizer_dir("llama2") / "tokenizer.json");
  for (const std::size_t cut :
       {std::size_t{1}, std::size_t{5000}, real.size() / 2, real.size() - 3}) {
    const Error e = load_error(real.substr(0, cut));
    CHECK(e.kind() == ErrorKind::invalid_input);
  }
}

TEST_CASE("unknown stage types are refused by name", "[text][errors]") {
  Json j = mini();
  j["model"]["type"] = "WordPiece";
  expect_error(j, ErrorKind::unsupported,
               "tokenizer.json: model type 'WordPiece' is not supported");
  j = mini();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error(j, ErrorKind::unsupported, "normalizer type 'NFKC' is not supported");
  j = mini();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}};
  expect_error(j, ErrorKind::unsupported, "normalizer type 'Lowercase' is not supported");
  j = mini();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  expect_error(j, ErrorKind::unsupported,
               "tokenizer.json: pre_tokenizer type 'Metaspace' is not supported");
  j = mini();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j, ErrorKind::unsupported, "decoder type 'WordPiece' is not supported");
  j = mini();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_error(j, ErrorKind::unsupported,
               "post_processor type 'RobertaProcessing' is not supported");
  j = mini();
  j["truncation"] = {{"max_length", 8}};
  expect_error(j, ErrorKind::unsupported, "truncation is not supported");
  j = mini();
  j["model"]["dropout"] = 0.1;
  expect_error(j, ErrorKind::unsupported, "model.dropout");
  j = mini();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  expect_error(j, ErrorKind::unsupported, "behavior 'Sideways' is not supported");
}

TEST_CASE("merges naming tokens not in the vocab are invalid input", "[text][errors]") {
  Json j = mini();
  j["model"]["merges"] = Json::parse(R"(["a b", "a zz"])");
  expect_error(j, ErrorKind::invalid_input,
               "model.merges[1]: names 'zz', which is not in the vocab");
  j = mini();
  j["model"]["merges"] = Json::parse(R"([["b", "c"]])"); // "bc" is not in the vocab
  expect_error(j, ErrorKind::invalid_input, "names 'bc', which is not in the vocab");
  j = mini();
  j["model"]["merges"] = Json::parse(R"(["abc"])");
  expect_error(j, ErrorKind::invalid_input, "model.merges[0]: expected \"a b\"");
  j = mini();
  j["model"]["vocab"]["d"] = -4;
  expect_error(j, ErrorKind::invalid_input, "model.vocab");
  j = mini();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(j, ErrorKind::invalid_input, "regex does not compile");
  j = mini();
  j["model"]["unk_token"] = "<unk>";
  expect_error(j, ErrorKind::invalid_input, "model.unk_token: '<unk>' is not in the vocab");
}

TEST_CASE("a missing tokenizer.json is an I/O error naming it", "[text][errors]") {
  try {
    (void)Tokenizer::from_dir("/nonexistent-tokenizer-dir");
    FAIL("loaded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::io);
    CHECK(std::string(e.what()).find("/nonexistent-tokenizer-dir/tokenizer.json") !=
          std::string::npos);
  }
}

TEST_CASE("invalid UTF-8 input: each bad byte reads as U+FFFD", "[text][utf8]") {
  const auto& dir = real_tokenizer_dir("qwen3");
  const auto t = Tokenizer::from_dir(dir);
  const std::string fffd = "\xEF\xBF\xBD";
  // A stray continuation byte, a byte never in UTF-8, a truncated 3-byte sequence (2 bad bytes),
  // an overlong NUL (2), an encoded surrogate (3), a code point past U+10FFFF (4).
  const std::pair<std::string, std::string> cases[] = {
      {"a\x80z", "a" + fffd + "z"},
      {"a\xFFz", "a" + fffd + "z"},
      {"a\xE4\xBDz", "a" + fffd + fffd + "z"},
      {"\xC0\x80", fffd + fffd},
      {"x\xED\xA0\x80y", "x" + fffd + fffd + fffd + "y"},
      {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},
      {"ok \xE4\xBD\xA0 \xE4", "ok \xE4\xBD\xA0 " + fffd},
  };
  for (const auto& [bad, as_read] : cases) {
    INFO(Json(as_read).dump());
    CHECK(t.encode(bad, false) == t.encode(as_read, false));
    CHECK(t.decode(t.encode(bad, false)) == as_read);
  }
}

TEST_CASE("byte-fallback pieces stream only once the character is complete", "[text][stream]") {
  const auto t = Tokenizer::from_dir(real_tokenizer_dir("llama2"));
  std::vector<std::int32_t> ids;
  for (const char* b : {"<0xF0>", "<0x9F>", "<0x98>", "<0x80>"}) {
    const auto id = t.token_to_id(b);
    REQUIRE(id);
    ids.push_back(*id);
  }
  StreamDecoder sd(t);
  CHECK(sd.push(ids[0]).empty());
  CHECK(sd.push(ids[1]).empty());
  CHECK(sd.push(ids[2]).empty());
  CHECK(sd.push(ids[3]) == "\xF0\x9F\x98\x80"); // U+1F600
  CHECK(sd.finish().empty());
  // An unfinished sequence is handed out by finish() as the decoder shows it.
  CHECK(sd.push(ids[0]).empty());
  CHECK(sd.finish() == t.decode(std::vector<std::int32_t>{ids[0]}));
}

TEST_CASE("decode skips ids outside the vocabulary, as HF does", "[text][errors]") {
  const auto t = Tokenizer::from_json(mini().dump());
  CHECK(t.decode(std::vector<std::int32_t>{0, 99, -1, 1}) ==
        t.decode(std::vector<std::int32_t>{0, 1}));
  CHECK(t.pieces(std::vector<std::int32_t>{99}) == std::vector<std::string>{""});
}

TEST_CASE("configs: special tokens, named templates, generation defaults", "[text][config]") {
  Json j = mini();
  j["added_tokens"] = Json::parse(R"([
    {"id": 5, "content": "<s>", "special": true, "lstrip": false, "rstrip": false,
     "single_word": false, "normalized": false},
    {"id": 6, "content": "</s>", "special": true, "lstrip": false, "rstrip": false,
     "single_word": false, "normalized": false}])");
  const std::string cfg = R"({"bos_token": {"__type": "AddedToken", "content": "<s>"},
    "eos_token": "</s>", "add_bos_token": true, "clean_up_tokenization_spaces": true,
    "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})";
  const auto t = Tokenizer::from_json(j.dump(), cfg);
  const auto& c = t.config();
  CHECK(c.bos_token == "<s>");
  CHECK(c.eos_token == "</s>");
  CHECK(c.pad_token.empty());
  CHECK(c.add_bos_token == std::optional<bool>(true));
  CHECK_FALSE(c.add_eos_token.has_value());
  CHECK(c.clean_up_tokenization_spaces);
  CHECK(c.chat_template == "D");
  CHECK(c.named_chat_templates.at("tool_use") == "T");
  // A list without "default": nothing is rendered (as transformers without a template name), and
  // the refusal says why, naming the list.
  const auto none =
      Tokenizer::from_json(j.dump(), R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                      {"name": "rag", "template": "R"}]})");
  CHECK(none.config().chat_template.empty());
  CHECK(none.config().no_chat_template_reason() ==
        "tokenizer_config.json's chat_template is a list of named templates (rag, tool_use) "
        "without one named \"default\", the one that is rendered (as transformers' "
        "apply_chat_template does when no template name is given)");
  CHECK(Tokenizer::from_json(j.dump(), "{}").config().no_chat_template_reason() ==
        "tokenizer_config.json has no chat_template");
  CHECK(c.eos_token_ids == std::vector<std::int32_t>{6});
  CHECK(c.bos_token_id == std::optional<std::int32_t>(5));
  CHECK(t.is_special(5));
  CHECK_FALSE(t.is_special(0));
  CHECK(t.vocab_size() == 7);
  CHECK(t.tokenizer_config_json() == cfg);

  const std::string gen = R"({"eos_token_id": [6, 2], "bos_token_id": 1, "temperature": 0.7,
    "top_p": 0.8, "max_length": 99})";
  const auto g = Tokenizer::from_json(j.dump(), cfg, gen);
  CHECK(g.config().eos_token_ids == std::vector<std::int32_t>{6, 2});
  CHECK(g.config().bos_token_id == std::optional<std::int32_t>(1));
  CHECK(g.config().generation_defaults == Json::parse(R"({"temperature": 0.7, "top_p": 0.8})"));
  CHECK(g.generation_config_json() == gen);

  try {
    (void)Tokenizer::from_json(j.dump(), "{\"bos_token\": 3}");
    FAIL("loaded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_input);
    CHECK(std::string(e.what()).find("tokenizer_config.json: bos_token") != std::string::npos);
  }
}

TEST_CASE("real configs: Qwen3's template and eos, vocab sizes", "[text][config]") {
  const auto q = Tokenizer::from_dir(real_tokenizer_dir("qwen3"));
  CHECK(q.config().eos_token == "<|im_end|>");
  CHECK(q.config().eos_token_ids == std::vector<std::int32_t>{151645});
  CHECK(q.config().chat_template.find("<|im_start|>") != std::string::npos);
  CHECK(q.vocab_size() == 151669);
  CHECK(q.is_special(151644));       // <|im_start|>
  CHECK_FALSE(q.is_special(151667)); // <think> is added but not special
}
