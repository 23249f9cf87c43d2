// The context-overflow policy's choice of messages (runtime/context_overflow.hpp), over a render
// written here: each message costs 2 tokens of framing plus one per word of its content, and the
// generation prompt 1. Which turns go, that the fewest go, that a turn's answers and tool results
// go with it, and the refusals.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "tpullm/runtime/context_overflow.hpp"
#include "tpullm/support/error.hpp"

using namespace tpullm;
using json = nlohmann::ordered_json;

namespace {

int renders = 0;

std::vector<std::int32_t> render(const json& messages) {
  ++renders;
  std::vector<std::int32_t> ids;
  for (const auto& m : messages) {
    ids.push_back(1); // start of message
    std::istringstream words(m["content"].is_string() ? m["content"].get<std::string>() : "");
    for (std::string w; words >> w;)
      ids.push_back(static_cast<std::int32_t>(w.size()));
    ids.push_back(2); // end of message
  }
  ids.push_back(3); // generation prompt
  return ids;
}

json msg(const char* role, const std::string& content) {
  return json{{"role", role}, {"content", content}};
}

/// `n` words.
std::string words(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += "w ";
  return s;
}

/// A system message (4 words) and `turns` question / answer pairs of 8 words each, then a last
/// question of 8 words: 6 + 20 * turns + 10 + 1 tokens.
json conversation(int turns) {
  json m = json::array();
  m.push_back(msg("system", words(4)));
  for (int t = 0; t < turns; ++t) {
    m.push_back(msg("user", words(8)));
    m.push_back(msg("assistant", words(8)));
  }
  m.push_back(msg("user", words(8)));
  return m;
}

std::int64_t size(const json& m) {
  return static_cast<std::int64_t>(render(m).size());
}

/// truncate_middle of `m` to `limit` tokens, its prompt rendered here as a caller's is.
runtime::Truncation cut(const json& m, std::int64_t limit) {
  return runtime::truncate_middle(m, render(m), limit, render);
}

} // namespace

TEST_CASE("a conversation that fits is kept whole", "[context-overflow]") {
  const auto m = conversation(3);
  const auto t = cut(m, size(m));
  CHECK(t.messages == m);
  CHECK(t.prompt == render(m));
  CHECK(t.dropped_messages == 0);
  CHECK(t.dropped_tokens == 0);
}

TEST_CASE("the fewest oldest turns go, the system message and the last turn stay",
          "[context-overflow]") {
  const auto m = conversation(5); // 117 tokens
  REQUIRE(size(m) == 117);
  // Every limit from the shortest possible prompt (system + last question: 17) to the whole.
  for (std::int64_t limit = 17; limit <= 117; ++limit) {
    const auto t = cut(m, limit);
    const std::int64_t turns = (117 - limit + 19) / 20; // the fewest 20-token turns that make room
    INFO("limit " << limit);
    CHECK(t.dropped_messages == 2 * turns);
    CHECK(t.dropped_tokens == 20 * turns);
    CHECK(static_cast<std::int64_t>(t.prompt.size()) <= limit);
    REQUIRE(t.messages.size() == m.size() - static_cast<std::size_t>(2 * turns));
    CHECK(t.messages[0] == m[0]);                       // the system message
    for (std::size_t i = 1; i < t.messages.size(); ++i) // then the newest messages, in order
      CHECK(t.messages[i] == m[static_cast<std::size_t>(2 * turns) + i]);
    CHECK(t.prompt == render(t.messages));
  }
}

TEST_CASE("an answer's tool calls and results go with their question", "[context-overflow]") {
  json m = json::array();
  m.push_back(msg("developer", words(2)));
  m.push_back(msg("system", words(2)));
  m.push_back(msg("user", words(4)));
  m.push_back(json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}});
  m.push_back(msg("tool", words(6)));
  m.push_back(msg("assistant", words(4)));
  m.push_back(msg("user", words(4)));
  m.push_back(msg("assistant", words(4)));
  m.push_back(msg("tool", words(3))); // the last turn: from the last user message on
  const auto whole = size(m);
  const auto t = cut(m, whole - 1);
  CHECK(t.dropped_messages == 4); // user, assistant with calls, tool, assistant
  REQUIRE(t.messages.size() == 5);
  CHECK(t.messages[0] == m[0]);
  CHECK(t.messages[1] == m[1]);
  CHECK(t.messages[2] == m[6]);
  CHECK(t.messages[4] == m[8]);
}

TEST_CASE("messages before the first question are a turn of their own", "[context-overflow]") {
  json m = json::array();
  m.push_back(msg("assistant", words(10))); // a greeting
  m.push_back(msg("user", words(2)));
  m.push_back(msg("assistant", words(2)));
  m.push_back(msg("user", words(2)));
  const auto t = cut(m, size(m) - 1);
  CHECK(t.dropped_messages == 1);
  CHECK(t.dropped_tokens == 12);
  CHECK(t.messages.size() == 3);
}

TEST_CASE("what cannot be made to fit is refused in one line", "[context-overflow]") {
  const auto m = conversation(2);
  const auto last = size(json::array({m[0], m.back()}));
  // Dropping both earlier turns is not enough.
  try {
    (void)cut(m, last - 1);
    FAIL("no refusal");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_input);
    CHECK_THAT(e.what(), Catch::Contains("without its 2 earlier turns the conversation takes " +
                                         std::to_string(last) + " tokens, more than the " +
                                         std::to_string(last - 1)));
  }
  CHECK(cut(m, last).dropped_messages == 4);
  // A conversation of one turn has nothing to drop; nor has one without a user message.
  for (const json& one : {json::array({msg("system", words(3)), msg("user", words(9))}),
                          json::array({msg("system", words(3)), msg("assistant", words(9))})}) {
    try {
      (void)cut(one, 5);
      FAIL("no refusal");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_input);
      CHECK_THAT(e.what(), Catch::Contains("no earlier turn to drop"));
    }
  }
  CHECK_THROWS_AS(runtime::truncate_middle(json::object(), {}, 5, render), Error);
}

TEST_CASE("the turns to drop are found in a logarithmic number of renders", "[context-overflow]") {
  const auto m = conversation(256); // 5137 tokens
  const auto whole = render(m);
  renders = 0;
  const auto t = runtime::truncate_middle(m, whole, 2000, render);
  CHECK(t.dropped_messages == 2 * ((5137 - 2000 + 19) / 20));
  CHECK(renders <= 1 + 8); // the shortest, then a bisection of 256 turns (the whole is given)
  // One turn with nothing to drop is refused without a render.
  const json one = json::array({msg("system", words(3)), msg("user", words(9))});
  const auto one_prompt = render(one);
  renders = 0;
  CHECK_THROWS_AS(runtime::truncate_middle(one, one_prompt, 5, render), Error);
  CHECK(renders == 0);
}

TEST_CASE("a turn is cut only when it leaves less than the answer's room", "[context-overflow]") {
  const auto m = conversation(5); // 117 tokens
  const auto p = render(m);
  // 128 positions, an answer of 11: 117 + 11 fits; of 12 it does not, one turn goes.
  CHECK_FALSE(runtime::truncate_to_fit(m, p, 128, 11, render).has_value());
  const auto t = runtime::truncate_to_fit(m, p, 128, 12, render);
  REQUIRE(t.has_value());
  CHECK(t->dropped_messages == 2);
  CHECK(static_cast<std::int64_t>(t->prompt.size()) <= 128 - 12);
  // The room is at most half the sequence: a budget of 1000 on 234 positions asks for 117
  // (117 + 117 fits), on 232 for 116 (one turn goes).
  CHECK_FALSE(runtime::truncate_to_fit(m, p, 234, 1000, render).has_value());
  const auto half = runtime::truncate_to_fit(m, p, 232, 1000, render);
  REQUIRE(half.has_value());
  CHECK(half->dropped_messages == 2);
}

TEST_CASE("the policy's spellings and its answer room", "[context-overflow]") {
  CHECK(runtime::parse_context_overflow("refuse", "--x") == runtime::ContextOverflow::refuse);
  CHECK(runtime::parse_context_overflow("truncate-middle", "--x") ==
        runtime::ContextOverflow::truncate_middle);
  CHECK(std::string(runtime::to_string(runtime::ContextOverflow::truncate_middle)) ==
        "truncate-middle");
  CHECK_THROWS_WITH(runtime::parse_context_overflow("truncate", "--context-overflow"),
                    Catch::Contains("--context-overflow: 'truncate' is not a policy"));
  CHECK(runtime::overflow_answer_room(64, 3) == 3);
  CHECK(runtime::overflow_answer_room(64, 128) == 32);
  CHECK(runtime::overflow_answer_room(1, 128) == 1);
}
