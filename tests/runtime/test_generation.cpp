// Generation (runtime/generation.hpp): the stop rules in their order (eos, stop string, token
// budget, sequence end), stop strings held back while undecided and cut before the first one,
// never half a UTF-8 character, the held text emitted at the end, and, over random token
// streams, the emitted pieces adding up to the decoded answer cut before its first stop string.
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tpullm/runtime/generation.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/text/tokenizer.hpp"

using namespace tpullm;
using namespace tpullm::runtime;

namespace {

/// The byte-level test tokenizer: one token per byte (GPT-2's byte-to-unicode pieces), "<end>"
/// (271) a special token.
const text::Tokenizer& byte_tokenizer() {
  static const text::Tokenizer tok = text::Tokenizer::from_dir(
      std::filesystem::path(TPULLM_TEST_DATA_DIR) / "text" / "tok" / "mini" / "bytelevel");
  return tok;
}

std::int32_t id_of(const char* piece) {
  const auto id = byte_tokenizer().token_to_id(piece);
  REQUIRE(id.has_value());
  return *id;
}

constexpr std::int32_t kEnd = 271;

GenerateOptions options(int max_new_tokens, std::vector<std::string> stops = {},
                        std::vector<std::int32_t> eos = {kEnd}) {
  GenerateOptions o;
  o.stop.eos_ids = std::move(eos);
  o.stop.max_new_tokens = max_new_tokens;
  o.stop.stop_strings = std::move(stops);
  return o;
}

/// Feeds `pieces` (vocab strings) one by one with room in the cache; returns each step's text.
std::vector<std::string> feed(Generation& g, const std::vector<const char*>& pieces) {
  std::vector<std::string> out;
  for (const char* p : pieces)
    out.push_back(g.accept(id_of(p), 0, 1000).text);
  return out;
}

bool starts_mid_character(const std::string& s) {
  return !s.empty() && (static_cast<unsigned char>(s[0]) & 0xC0) == 0x80;
}

} // namespace

TEST_CASE("ids only: eos, then the token budget, then the sequence end", "[generation]") {
  auto reason = [](std::int32_t token, int before, std::int64_t length) {
    Generation g(options(3, {}, {2, 7}), nullptr, {});
    for (int i = 0; i < before; ++i)
      REQUIRE_FALSE(g.accept(5, 0, 100).stop);
    return g.accept(token, length, 100).stop;
  };
  CHECK(reason(5, 0, 10) == std::nullopt);
  CHECK(reason(7, 0, 10) == StopReason::eos);
  CHECK(reason(7, 2, 100) == StopReason::eos);
  CHECK(reason(5, 2, 100) == StopReason::token_budget);
  CHECK(reason(5, 1, 100) == StopReason::sequence_end);
  CHECK(reason(5, 1, 99) == std::nullopt);
  CHECK(to_string(StopReason::eos) == "eos");
  CHECK(to_string(StopReason::stop_string) == "stop string");
  CHECK(to_string(StopReason::token_budget) == "token budget");
  CHECK(to_string(StopReason::sequence_end) == "sequence end");
  CHECK(finish_reason(StopReason::eos) == "stop");
  CHECK(finish_reason(StopReason::stop_string) == "stop");
  CHECK(finish_reason(StopReason::token_budget) == "length");
  CHECK(finish_reason(StopReason::sequence_end) == "length");

  Generation g(options(2, {}, {2}), nullptr, std::vector<std::int32_t>{1, 1});
  const auto s = g.accept(2, 0, 100);
  CHECK(s.token == 2);
  CHECK(s.text.empty());
  CHECK(g.done());
  CHECK(g.tokens() == std::vector<std::int32_t>{2});
  CHECK_THROWS_AS(g.accept(3, 0, 100), Error); // the answer has ended
}

TEST_CASE("bad stop criteria are refused", "[generation]") {
  CHECK_THROWS_WITH(Generation(options(0), nullptr, {}), Catch::Contains("max_new_tokens 0"));
  CHECK_THROWS_WITH(Generation(options(4, {""}), &byte_tokenizer(), {}),
                    Catch::Contains("stop string must not be empty"));
  // Stop strings match text: a Generation over ids alone cannot apply them.
  CHECK_THROWS_WITH(Generation(options(4, {"x"}), nullptr, {}),
                    Catch::Contains("need a text answer"));
}

TEST_CASE("step samples with the Generation's sampler", "[generation]") {
  Generation g(options(4), &byte_tokenizer(), {});
  std::vector<float> logits(272, 0.0f);
  logits[static_cast<std::size_t>(id_of("h"))] = 5.0f; // greedy
  const auto s = g.step(logits, 0, 1000);
  CHECK(s.token == id_of("h"));
  CHECK(s.text == "h");
  CHECK_FALSE(s.stop);
}

TEST_CASE("a stop string is held back until decided and cut before", "[generation]") {
  SECTION("matched across tokens: the answer ends before it") {
    Generation g(options(10, {"ll"}), &byte_tokenizer(), {});
    CHECK(feed(g, {"h", "e", "l"}) == std::vector<std::string>{"h", "e", ""});
    const auto s = g.accept(id_of("l"), 0, 1000);
    CHECK(s.stop == StopReason::stop_string);
    CHECK(s.text.empty());
    CHECK(g.text() == "he");
  }
  SECTION("not matched: the held text comes out with the token that decides it") {
    Generation g(options(10, {"lx"}), &byte_tokenizer(), {});
    CHECK(feed(g, {"h", "e", "l", "o"}) == std::vector<std::string>{"h", "e", "", "lo"});
    CHECK_FALSE(g.done());
  }
  SECTION("the stop string that begins first ends the answer, whatever the list's order") {
    Generation g(options(10, {"yz", "xyz"}), &byte_tokenizer(), {});
    CHECK(feed(g, {"w", "x", "y"}) == std::vector<std::string>{"w", "", ""});
    g.accept(id_of("z"), 0, 1000);
    CHECK(g.stop_reason() == StopReason::stop_string);
    CHECK(g.text() == "w");
  }
  SECTION("the token budget emits what was held") {
    Generation g(options(3, {"lx"}), &byte_tokenizer(), {});
    CHECK(feed(g, {"h", "e"}) == std::vector<std::string>{"h", "e"});
    const auto s = g.accept(id_of("l"), 0, 1000);
    CHECK(s.stop == StopReason::token_budget);
    CHECK(s.text == "l");
    CHECK(g.text() == "hel");
  }
  SECTION("a stop string on the budget's last token reports the stop string") {
    Generation g(options(2, {"el"}), &byte_tokenizer(), {});
    feed(g, {"e"});
    CHECK(g.accept(id_of("l"), 0, 1000).stop == StopReason::stop_string);
    CHECK(g.text().empty());
  }
  SECTION("eos emits what was held and is not part of the text") {
    Generation g(options(10, {"lx"}), &byte_tokenizer(), {});
    feed(g, {"h", "l"});
    const auto s = g.accept(kEnd, 0, 1000);
    CHECK(s.stop == StopReason::eos);
    CHECK(s.text == "l");
    CHECK(g.text() == "hl");
  }
  SECTION("the sequence end emits what was held") {
    Generation g(options(10, {"lx"}), &byte_tokenizer(), {});
    feed(g, {"h"});
    const auto s = g.accept(id_of("l"), 1000, 1000);
    CHECK(s.stop == StopReason::sequence_end);
    CHECK(s.text == "l");
  }
}

TEST_CASE("never half a UTF-8 character", "[generation]") {
  // é is C3 A9: the byte-level pieces "Ã" and "©".
  SECTION("the decoder holds an incomplete character") {
    Generation g(options(10), &byte_tokenizer(), {});
    CHECK(feed(g, {"a", "Ã", "©"}) == std::vector<std::string>{"a", "", "\xC3\xA9"});
  }
  SECTION("a stop string that begins inside a character holds the whole character") {
    Generation g(options(10, {"\xA9z"}), &byte_tokenizer(), {});
    CHECK(feed(g, {"a", "Ã", "©"}) == std::vector<std::string>{"a", "", ""});
    CHECK(g.accept(id_of("b"), 0, 1000).text == "\xC3\xA9"
                                                "b");
  }
  SECTION("a stop string ending in a multi-byte character") {
    Generation g(options(10, {"\xC3\xA9!"}), &byte_tokenizer(), {});
    CHECK(feed(g, {"a", "Ã", "©", "!"}) == std::vector<std::string>{"a", "", "", ""});
    CHECK(g.stop_reason() == StopReason::stop_string);
    CHECK(g.text() == "a");
  }
}

TEST_CASE("stop_prefix_length: the longest suffix that begins a stop string", "[generation]") {
  const std::vector<std::string> stops{"abc", "bd", "x"};
  CHECK(stop_prefix_length("", stops) == 0);
  CHECK(stop_prefix_length("zz", stops) == 0);
  CHECK(stop_prefix_length("za", stops) == 1);
  CHECK(stop_prefix_length("zab", stops) == 2);
  CHECK(stop_prefix_length("zb", stops) == 1);
  CHECK(stop_prefix_length("abc", stops) == 0); // a whole stop string is not a proper prefix
  CHECK(stop_prefix_length("x", stops) == 0);
}

TEST_CASE("random streams: the pieces add up to the answer cut before its first stop string",
          "[generation]") {
  const auto& tok = byte_tokenizer();
  const std::vector<std::int32_t> alphabet{id_of("a"), id_of("b"), id_of("l"), id_of("o"),
                                           id_of("Ã"), id_of("©"), id_of("Ġ"), kEnd};
  const std::vector<std::string> stops{"lol", "\xC3\xA9 b", "bb"};
  std::mt19937 rng(1234);
  int ended_by_stop = 0, ended_by_eos = 0, ended_by_budget = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<std::int32_t> ids(1 + rng() % 24);
    for (auto& id : ids)
      id = alphabet[rng() % alphabet.size()];
    const auto eos = std::find(ids.begin(), ids.end(), kEnd);
    const std::vector<std::int32_t> body(ids.begin(), eos);
    const std::string full = tok.decode(body, true);
    std::size_t cut = std::string::npos;
    for (const auto& s : stops)
      cut = std::min(cut, full.find(s));

    Generation g(options(static_cast<int>(ids.size()), stops), &tok, {});
    std::string streamed;
    for (std::int32_t id : ids) {
      const auto s = g.accept(id, 0, 1000);
      CHECK_FALSE(starts_mid_character(s.text));
      streamed += s.text;
      if (s.stop)
        break;
    }
    REQUIRE(g.done());
    CHECK(streamed == g.text());
    CHECK(streamed == full.substr(0, cut));
    if (cut != std::string::npos) {
      CHECK(g.stop_reason() == StopReason::stop_string);
      ++ended_by_stop;
    } else if (eos != ids.end()) {
      CHECK(g.stop_reason() == StopReason::eos);
      ++ended_by_eos;
    } else {
      CHECK(g.stop_reason() == StopReason::token_budget);
      ++ended_by_budget;
    }
  }
  // Every way of ending was exercised.
  CHECK(ended_by_stop > 0);
  CHECK(ended_by_eos > 0);
  CHECK(ended_by_budget > 0);
}
