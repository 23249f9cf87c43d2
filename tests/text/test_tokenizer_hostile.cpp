// Hostile tokenizer files (issue 40): JSON nested hundreds of thousands deep, Sequence stages
// nested or long beyond their caps, regexes that nest too deep or backtrack catastrophically;
// each is one error (at load, or at encode for a backtracking pattern) in bounded time.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tpullm/support/error.hpp"
#include "tpullm/text/tokenizer.hpp"

using Catch::Contains;
using tpullm::Error;
using tpullm::text::Tokenizer;

namespace {

nlohmann::json hostile_mini() {
  return nlohmann::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "vocab":
              {"a": 0, "b": 1, "!": 2, "ab": 3}, "merges": ["a b"]}})");
}

nlohmann::json replace_step() {
  return {{"type", "Replace"}, {"pattern", {{"String", "b"}}}, {"content", "a"}};
}

} // namespace

TEST_CASE("over-deep tokenizer JSON is refused at parse time", "[text][hostile]") {
  const std::string deep = "{\"normalizer\": " + std::string(300000, '[') + "}";
  REQUIRE_THROWS_WITH(Tokenizer::from_json(deep),
                      Contains("tokenizer.json: JSON nested deeper than 256 levels"));
  REQUIRE_THROWS_WITH(Tokenizer::from_json(hostile_mini().dump(), deep),
                      Contains("tokenizer_config.json: JSON nested deeper than 256 levels"));
  REQUIRE_THROWS_WITH(Tokenizer::from_json(hostile_mini().dump(), "{}", deep),
                      Contains("generation_config.json: JSON nested deeper than 256 levels"));
}

TEST_CASE("Sequence stages are capped in nesting and length", "[text][hostile]") {
  auto j = hostile_mini();
  nlohmann::json n = replace_step();
  for (int i = 0; i < 8; ++i)
    n = {{"type", "Sequence"}, {"normalizers", {n}}};
  j["normalizer"] = n;
  CHECK(Tokenizer::from_json(j.dump()).encode("ab", false) == std::vector<std::int32_t>{0, 0});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {n}}};
  REQUIRE_THROWS_WITH(Tokenizer::from_json(j.dump()), Contains("Sequence nested deeper than 8"));
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", nlohmann::json::array()}}; // 257 steps in one list
  for (int i = 0; i < 257; ++i)
    j["normalizer"]["normalizers"].push_back(replace_step());
  REQUIRE_THROWS_WITH(Tokenizer::from_json(j.dump()), Contains("more than 256 steps"));
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}};
  for (int i = 0; i < 257; ++i)
    j["pre_tokenizer"]["pretokenizers"].push_back(
        {{"type", "Split"}, {"pattern", {{"String", "b"}}}, {"behavior", "Isolated"}});
  REQUIRE_THROWS_WITH(Tokenizer::from_json(j.dump()), Contains("more than 256 steps"));
}

TEST_CASE("tokenizer regexes are bounded", "[text][hostile]") {
  auto j = hostile_mini();
  const auto split = [](const std::string& re) {
    return nlohmann::json{
        {"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}};
  };
  j["pre_tokenizer"] = split(std::string(33, '(') + "a" + std::string(33, ')'));
  REQUIRE_THROWS_WITH(Tokenizer::from_json(j.dump()),
                      Contains("regex nests parentheses deeper than 32"));
  j["pre_tokenizer"] = split(std::string(300000, '('));
  REQUIRE_THROWS_WITH(Tokenizer::from_json(j.dump()), Contains("too long"));
  // A pattern that backtracks exponentially: the encode that meets it ends with the error.
  j["pre_tokenizer"] = split("(a|aa)+$");
  const Tokenizer tok = Tokenizer::from_json(j.dump());
  CHECK(tok.encode("aab", false).size() == 2);
  REQUIRE_THROWS_WITH(tok.encode(std::string(200, 'a') + "!", false),
                      Contains("regex '(a|aa)+$' hit its limit"));
}
