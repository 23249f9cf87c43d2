// Tool calls: format detection, the parser of each format on real template renderings (the
// Jinja2 oracle's renders of conversations with tool calls, tests/data/text/chat) and on
// answers written here, the incremental parser against the whole-answer one, and the
// constraint of a forced call.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_data_dir.hpp"
#include "tpullm/runtime/tool_calls.hpp"
#include "tpullm/support/error.hpp"

using nlohmann::ordered_json;
using namespace tpullm::runtime;

namespace {

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string chat_data(const std::string& name) {
  return std::string(TPULLM_TEST_DATA_DIR) + "/text/chat/" + name;
}

/// The oracle's render of conversation `conv` through `target`'s template (generation prompt
/// on, no other kwargs).
std::string oracle_render(const std::string& target, const std::string& conv) {
  std::istringstream in(read(chat_data("expected_jinja2.jsonl")));
  for (std::string line; std::getline(in, line);) {
    const auto r = ordered_json::parse(line);
    if (r["target"] == target && r["conv"] == conv &&
        r["variant"] == ordered_json{{"add_generation_prompt", true}}) {
      REQUIRE(r.contains("text"));
      return r["text"].get<std::string>();
    }
  }
  FAIL("no oracle record for " << target << " / " << conv);
  return {};
}

ordered_json conversation(const std::string& name) {
  const auto cases = ordered_json::parse(read(chat_data("cases.json")));
  for (const auto& c : cases["conversations"])
    if (c["name"] == name)
      return c["messages"];
  FAIL("no conversation " << name);
  return {};
}

/// The calls of the conversation's assistant messages, arguments as compact JSON text.
std::vector<std::pair<std::string, std::string>> expected_calls(const ordered_json& messages) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& m : messages)
    if (m.contains("tool_calls"))
      for (const auto& c : m["tool_calls"]) {
        ordered_json args = c["function"]["arguments"];
        if (args.is_string())
          args = ordered_json::parse(args.get<std::string>());
        out.emplace_back(c["function"]["name"].get<std::string>(), args.dump());
      }
  return out;
}

/// The text of every assistant turn of a render: from `open` to the next `close`.
std::vector<std::string> turns(const std::string& text, const std::string& open,
                               const std::string& close) {
  std::vector<std::string> out;
  for (auto p = text.find(open); p != std::string::npos; p = text.find(open, p + 1)) {
    const auto from = p + open.size();
    const auto to = text.find(close, from);
    if (to != std::string::npos)
      out.push_back(text.substr(from, to - from));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> calls_of(const ParsedAnswer& a) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& c : a.tool_calls)
    out.emplace_back(c.name, c.arguments);
  return out;
}

/// The answer fed one byte at a time, events collected as a ParsedAnswer.
ParsedAnswer parse_bytewise(ToolCallFormat f, const std::string& text) {
  ToolCallParser p(f);
  std::vector<ToolCallEvent> events;
  for (char c : text) {
    auto e = p.feed(std::string_view(&c, 1));
    events.insert(events.end(), e.begin(), e.end());
  }
  auto e = p.finish();
  events.insert(events.end(), e.begin(), e.end());
  ParsedAnswer out;
  for (const auto& ev : events) {
    if (ev.is_call) {
      CHECK(ev.index == out.tool_calls.size());
      out.tool_calls.push_back(ev.call);
    } else {
      out.content += ev.content;
    }
  }
  return out;
}

const std::string kDsCallsBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81"
                                  "calls\xE2\x96\x81"
                                  "begin\xEF\xBD\x9C>";

} // namespace

TEST_CASE("the tool-call format is decided by the chat template, else the architecture",
          "[tool_calls]") {
  CHECK(detect_tool_call_format("... <tool_call> ...", "llama") == ToolCallFormat::qwen_hermes);
  CHECK(detect_tool_call_format("x" + kDsCallsBegin, "qwen2") == ToolCallFormat::deepseek_v3);
  CHECK(detect_tool_call_format("{{ '[TOOL_CALLS]' }}", "") == ToolCallFormat::mistral);
  CHECK(detect_tool_call_format("{{ '<|python_tag|>' }}", "") == ToolCallFormat::llama3_json);
  CHECK(detect_tool_call_format("<|start_header_id|>ipython<|end_header_id|>", "") ==
        ToolCallFormat::llama3_json);
  CHECK(detect_tool_call_format("{% if tools %}...{% endif %}", "qwen3") ==
        ToolCallFormat::qwen_hermes);
  CHECK(detect_tool_call_format("{% if tools %}...{% endif %}", "mixtral") ==
        ToolCallFormat::mistral);
  // A template that never mentions tools has no format, whatever the architecture.
  try {
    detect_tool_call_format("{{ messages[0].content }}", "qwen3");
    FAIL("no refusal");
  } catch (const tpullm::Error& e) {
    CHECK(e.kind() == tpullm::ErrorKind::unsupported);
    CHECK_THAT(e.what(), Catch::Contains("no known tool-call format"));
  }
  CHECK_THROWS_AS(detect_tool_call_format("{% if tools %}{% endif %}", "gemma3"), tpullm::Error);
  CHECK(tool_call_format_name(ToolCallFormat::deepseek_v3) == "deepseek_v3");
}

TEST_CASE("the assistant turns of real Qwen3 renders parse back into their calls", "[tool_calls]") {
  for (const char* conv : {"tool_call_round", "two_tool_calls"}) {
    INFO(conv);
    const std::string text = oracle_render("qwen3", conv);
    std::string answers;
    for (const auto& t : turns(text, "<|im_start|>assistant\n", "<|im_end|>"))
      answers += t + "\n";
    const auto whole = parse_tool_calls(ToolCallFormat::qwen_hermes, answers);
    CHECK(calls_of(whole) == expected_calls(conversation(conv)));
    CHECK(whole.content.find("<tool_call>") == std::string::npos);
    const auto bytewise = parse_bytewise(ToolCallFormat::qwen_hermes, answers);
    CHECK(calls_of(bytewise) == calls_of(whole));
    CHECK(bytewise.content == whole.content);
  }
  // The one turn with content before its calls keeps it (the whitespace before the call is
  // dropped).
  const auto t =
      turns(oracle_render("qwen3", "two_tool_calls"), "<|im_start|>assistant\n", "<|im_end|>");
  REQUIRE(t.size() >= 1);
  const auto a = parse_tool_calls(ToolCallFormat::qwen_hermes, t[0], "call_7_");
  CHECK(a.content == "Let me check both.");
  REQUIRE(a.tool_calls.size() == 2);
  CHECK(a.tool_calls[0].id == "call_7_0");
  CHECK(a.tool_calls[1].id == "call_7_1");
  CHECK(a.tool_calls[1].arguments == R"({"query":"Paris events"})");
}

TEST_CASE("the assistant turn of a real DeepSeek-V3 render parses back into its calls",
          "[tool_calls]") {
  const std::string conv = "tool_call_null_content";
  const std::string text = oracle_render("deepseek_v3", conv);
  const std::string assistant = "<\xEF\xBD\x9C"
                                "Assistant\xEF\xBD\x9C>";
  const std::string eos = "<\xEF\xBD\x9C"
                          "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
  const auto t = turns(text, assistant, eos);
  REQUIRE(!t.empty());
  REQUIRE(t[0].find(kDsCallsBegin) == 0);
  const auto whole = parse_tool_calls(ToolCallFormat::deepseek_v3, t[0]);
  CHECK(whole.content.empty());
  CHECK(calls_of(whole) == expected_calls(conversation(conv)));
  const auto bytewise = parse_bytewise(ToolCallFormat::deepseek_v3, t[0]);
  CHECK(calls_of(bytewise) == calls_of(whole));
  CHECK(bytewise.content.empty());
}

TEST_CASE("Llama 3.1 JSON calls: the whole answer, after <|python_tag|> or bare, ';' between",
          "[tool_calls]") {
  const auto f = ToolCallFormat::llama3_json;
  auto a = parse_tool_calls(f, R"( {"name": "get_weather", "parameters": {"city": "Paris"}})");
  CHECK(a.content.empty());
  REQUIRE(a.tool_calls.size() == 1);
  CHECK(a.tool_calls[0].name == "get_weather");
  CHECK(a.tool_calls[0].arguments == R"({"city":"Paris"})");
  a = parse_tool_calls(
      f,
      R"(<|python_tag|>{"name": "a", "parameters": {"s": "x;y"}}; {"name": "b", "parameters": {}})");
  CHECK(calls_of(a) ==
        std::vector<std::pair<std::string, std::string>>{{"a", R"({"s":"x;y"})"}, {"b", "{}"}});
  // JSON that is not a call, and text that merely contains braces, stay content byte for byte.
  for (const std::string& text :
       std::vector<std::string>{R"({"answer": 42})", "Use {braces} freely", "{\"name\": 3}",
                                "{\"name\": \"f\", \"parameters\": [1]}"}) {
    INFO(text);
    a = parse_tool_calls(f, text);
    CHECK(a.tool_calls.empty());
    CHECK(a.content == text);
    CHECK(parse_bytewise(f, text).content == text);
  }
}

TEST_CASE("Mistral calls: [TOOL_CALLS] and a JSON array to the end of the answer", "[tool_calls]") {
  const auto f = ToolCallFormat::mistral;
  const std::string text =
      R"(Checking. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "search", "arguments": "{\"query\": \"x\"}"}])";
  for (const auto& a : {parse_tool_calls(f, text), parse_bytewise(f, text)}) {
    CHECK(a.content == "Checking.");
    CHECK(calls_of(a) ==
          std::vector<std::pair<std::string, std::string>>{{"get_weather", R"({"city":"Paris"})"},
                                                           {"search", R"({"query":"x"})"}});
  }
  // The control token is skipped when the answer is decoded: a bare array at the start counts.
  auto a = parse_tool_calls(f, R"([{"name": "f", "arguments": {}}])");
  REQUIRE(a.tool_calls.size() == 1);
  CHECK(a.tool_calls[0].name == "f");
  a = parse_tool_calls(f, "[1, 2] is a list");
  CHECK(a.tool_calls.empty());
  CHECK(a.content == "[1, 2] is a list");
}

TEST_CASE("malformed call text stays content, with its markers and the whitespace around it",
          "[tool_calls]") {
  for (const std::string& text :
       {std::string("Hi\n<tool_call>\nnot json\n</tool_call>\nbye"),
        std::string("<tool_call>{\"arguments\": {}}</tool_call>"),
        std::string("<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>"),
        std::string("text <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2"),
        std::string("a <tool_ca"), std::string("  \n"), std::string("")}) {
    INFO(text);
    const auto a = parse_tool_calls(ToolCallFormat::qwen_hermes, text);
    CHECK(a.tool_calls.empty());
    CHECK(a.content == text);
    CHECK(parse_bytewise(ToolCallFormat::qwen_hermes, text).content == text);
  }
  const std::string ds = kDsCallsBegin + "garbage";
  CHECK(parse_tool_calls(ToolCallFormat::deepseek_v3, ds).content == ds);
}

TEST_CASE("the incremental parser holds back only what may start a call", "[tool_calls]") {
  ToolCallParser p(ToolCallFormat::qwen_hermes, "id");
  auto e = p.feed("Hello <tool");
  REQUIRE(e.size() == 1);
  CHECK(!e[0].is_call);
  CHECK(e[0].content == "Hello"); // the space may precede a call
  e = p.feed("box> is not a call");
  REQUIRE(e.size() == 1);
  CHECK(e[0].content == " <toolbox> is not a call");
  e = p.feed("\n<tool_call>{\"name\": \"f\", ");
  CHECK(e.empty());
  e = p.feed("\"arguments\": {\"x\": 1}}</tool_call>\n\nafter");
  REQUIRE(e.size() == 2);
  CHECK(e[0].is_call);
  CHECK(e[0].index == 0);
  CHECK(e[0].call.id == "id0");
  CHECK(e[0].call.name == "f");
  CHECK(e[0].call.arguments == R"({"x":1})");
  CHECK(!e[1].is_call);
  CHECK(e[1].content == "after");
  CHECK(p.finish().empty());
}

TEST_CASE("a forced call's prefix, any JSON valid for the schema and the suffix parse as that "
          "call",
          "[tool_calls]") {
  const auto tools = ordered_json::parse(read(chat_data("cases.json")))["tools"];
  const ordered_json args = {{"city", "Paris"}, {"unit", "celsius"}};
  for (auto f : {ToolCallFormat::qwen_hermes, ToolCallFormat::llama3_json, ToolCallFormat::mistral,
                 ToolCallFormat::deepseek_v3}) {
    INFO(tool_call_format_name(f));
    const auto c = tool_call_constraint(f, tools, "get_weather");
    CHECK(c.schema == tools[0]["function"]["parameters"]);
    const auto a = parse_tool_calls(f, c.prefix + args.dump(2) + c.suffix);
    CHECK(a.content.empty());
    CHECK(calls_of(a) ==
          std::vector<std::pair<std::string, std::string>>{{"get_weather", args.dump()}});
  }
  // "required" over several tools: the name is part of the JSON.
  const auto c = tool_call_constraint(ToolCallFormat::qwen_hermes, tools, "");
  REQUIRE(c.schema.contains("anyOf"));
  CHECK(c.schema["anyOf"].size() == 2);
  CHECK(c.schema["anyOf"][1]["properties"]["name"]["const"] == "search");
  const ordered_json call = {{"name", "search"}, {"arguments", {{"query", "q"}}}};
  CHECK(
      calls_of(parse_tool_calls(ToolCallFormat::qwen_hermes, c.prefix + call.dump() + c.suffix)) ==
      std::vector<std::pair<std::string, std::string>>{{"search", R"({"query":"q"})"}});
  CHECK_THROWS_AS(tool_call_constraint(ToolCallFormat::qwen_hermes, tools, "nope"), tpullm::Error);
  CHECK_THROWS_AS(tool_call_constraint(ToolCallFormat::deepseek_v3, tools, ""), tpullm::Error);
}
