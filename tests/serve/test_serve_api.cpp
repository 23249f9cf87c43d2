// serve's OpenAI shapes of tool calls (tools/tpullm/serve_api.hpp), which the random-weight
// model of the HTTP tests never writes: a parsed answer as message.tool_calls, the stream chunks
// of the same answer reassembled as the SDK reassembles them, and the request fields that
// reach the template.
#include <catch2/catch.hpp>

#include "tpullm/grammar/grammar.hpp"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve_api.hpp"
#include "tpullm/runtime/tool_calls.hpp"

using nlohmann::json;
using namespace tpullm::cli::serve;
namespace runtime = tpullm::runtime;

namespace {

const AnswerIds kIds{"chatcmpl-5", 1700000000, "m", true};

GenerationRequest chat(const json& body) {
  return parse_request(body.dump(), true, "m", json::object(), RequestLimits{});
}

const json kWeather = {{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}}}}},
                           {"required", {"city"}}}}}}};

} // namespace

TEST_CASE("a parsed answer is message.tool_calls with null content and finish_reason "
          "tool_calls",
          "[serve][tool_calls]") {
  const auto parsed =
      runtime::parse_tool_calls(runtime::ToolCallFormat::qwen_hermes,
                                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                "{\"city\": \"Paris\"}}\n</tool_call>",
                                "call_5_");
  const auto body =
      json::parse(completion_body(kIds, parsed.content, "stop", {}, &parsed.tool_calls));
  const auto& choice = body["choices"][0];
  CHECK(choice["finish_reason"] == "tool_calls");
  CHECK(choice["message"]["role"] == "assistant");
  CHECK(choice["message"]["content"].is_null());
  REQUIRE(choice["message"]["tool_calls"].size() == 1);
  const auto& call = choice["message"]["tool_calls"][0];
  CHECK(call["id"] == "call_5_0");
  CHECK(call["type"] == "function");
  CHECK(call["function"]["name"] == "get_weather");
  CHECK(call["function"]["arguments"] == R"({"city":"Paris"})");
  // Without calls the answer is as before: text content and the generation's finish reason.
  const std::vector<runtime::ToolCall> none;
  const auto plain = json::parse(completion_body(kIds, "hi", "length", {}, &none));
  CHECK(plain["choices"][0]["message"]["content"] == "hi");
  CHECK(!plain["choices"][0]["message"].contains("tool_calls"));
  CHECK(plain["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("stream chunks of an answer with calls reassemble to the whole answer",
          "[serve][tool_calls]") {
  const std::string answer =
      "Checking both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": "
      "\"jazz <tool_call> night\"}}\n</tool_call>";
  const auto whole =
      runtime::parse_tool_calls(runtime::ToolCallFormat::qwen_hermes, answer, "call_5_");
  const auto expected =
      json::parse(completion_body(kIds, whole.content, "stop", {}, &whole.tool_calls));

  // As cmd_serve streams: pieces of 3 bytes through the parser, events as chunks.
  runtime::ToolCallParser parser(runtime::ToolCallFormat::qwen_hermes, "call_5_");
  std::vector<std::string> chunks;
  auto emit = [&](const std::vector<runtime::ToolCallEvent>& events) {
    for (const auto& e : events) {
      if (!e.is_call) {
        chunks.push_back(chunk_json(kIds, e.content, false, ""));
        continue;
      }
      for (auto& c : tool_call_chunks(kIds, e.index, e.call))
        chunks.push_back(c);
    }
  };
  for (std::size_t i = 0; i < answer.size(); i += 3)
    emit(parser.feed(answer.substr(i, 3)));
  emit(parser.finish());

  // The SDK's reassembly: content appended, a delta with an id opens call `index`, later ones
  // append arguments.
  std::string content;
  json calls = json::array();
  for (const auto& text : chunks) {
    const auto c = json::parse(text);
    CHECK(c["object"] == "chat.completion.chunk");
    const auto& delta = c["choices"][0]["delta"];
    if (delta.contains("content"))
      content += delta["content"].get<std::string>();
    if (!delta.contains("tool_calls"))
      continue;
    for (const auto& t : delta["tool_calls"]) {
      const auto index = t["index"].get<std::size_t>();
      if (t.contains("id")) {
        REQUIRE(index == calls.size());
        CHECK(t["type"] == "function");
        calls.push_back({{"id", t["id"]},
                         {"type", "function"},
                         {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
      }
      REQUIRE(index < calls.size());
      auto& args = calls[index]["function"]["arguments"];
      args = args.get<std::string>() + t["function"]["arguments"].get<std::string>();
    }
  }
  const auto& message = expected["choices"][0]["message"];
  CHECK(content == message["content"].get<std::string>());
  CHECK(content == "Checking both.");
  CHECK(calls == message["tool_calls"]);
  CHECK(calls.size() == 2);
}

TEST_CASE("tools and tool history reach the template as transformers passes them",
          "[serve][tool_calls]") {
  const json body = {
      {"messages",
       {{{"role", "user"}, {"content", "Weather?"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"id", "call_1"},
            {"type", "function"},
            {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18"}}}},
      {"tools", {kWeather}}};
  const auto g = chat(body);
  CHECK(g.tools.choice == ToolChoice::automatic);
  CHECK(parses_tool_calls(g));
  CHECK(json(g.tools.list) == body["tools"]);
  const auto& m = g.messages;
  CHECK(m[1]["content"].is_null());
  CHECK(m[1]["tool_calls"][0]["function"]["arguments"] == json{{"city", "Paris"}});
  CHECK(m[2] ==
        nlohmann::ordered_json{{"role", "tool"}, {"content", "18"}, {"tool_call_id", "call_1"}});
  const auto retry = with_empty_tool_call_content(m);
  REQUIRE(retry);
  CHECK((*retry)[1]["content"] == "");
  CHECK(!with_empty_tool_call_content(
      chat({{"messages", {{{"role", "user"}, {"content", "x"}}}}}).messages));

  // none: the tools stay (rendered) but the answer is not parsed.
  auto with = body;
  with["tool_choice"] = "none";
  CHECK(!parses_tool_calls(chat(with)));
  CHECK(tool_call_grammar(runtime::ToolCallFormat::qwen_hermes, chat(body)) == nullptr);
  with["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const auto named = chat(with);
  CHECK(named.tools.choice == ToolChoice::named);
  CHECK(named.tools.name == "get_weather");
  // A forced call is a grammar: the format's prefix, the arguments' schema, its suffix.
  const auto forced = tool_call_grammar(runtime::ToolCallFormat::qwen_hermes, named);
  REQUIRE(forced);
  tpullm::grammar::Matcher matcher(forced);
  CHECK(matcher.accept_bytes("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "));
  // Beside a response_format, a forced call is refused: two grammars cannot both hold.
  with["response_format"] = {{"type", "json_object"}};
  try {
    tool_call_grammar(runtime::ToolCallFormat::qwen_hermes, chat(with));
    FAIL("no refusal");
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    CHECK(e.param == "response_format");
  }
}

TEST_CASE("embeddings requests are parsed into inputs and answered as OpenAI's list", "[serve]") {
  const RequestLimits limits;
  auto parse = [&](const json& j) { return parse_embeddings_request(j.dump(), "m", limits); };
  auto refused = [&](const json& j) -> std::string {
    try {
      parse(j);
    } catch (const ApiError& e) {
      CHECK(e.status == 400);
      return e.param;
    }
    return "(accepted)";
  };
  const auto one = parse({{"input", "hi"}});
  REQUIRE(one.inputs.size() == 1);
  CHECK(one.inputs[0].text == "hi");
  CHECK(!one.base64);
  const auto ids = parse({{"input", {{1, 2}, json::array({3})}}, {"encoding_format", "base64"}});
  REQUIRE(ids.inputs.size() == 2);
  CHECK(ids.inputs[0].ids == std::vector<std::int32_t>{1, 2});
  CHECK(ids.inputs[1].ids == std::vector<std::int32_t>{3});
  CHECK(ids.base64);
  CHECK(parse({{"input", {5, 6}}, {"dimensions", 8}}).dimensions == 8);
  CHECK(refused({{"model", "m"}}) == "input");
  CHECK(refused({{"input", json::array()}}) == "input");
  CHECK(refused({{"input", {"a", {1}}}}) == "input");
  CHECK(refused({{"input", {-1}}}) == "input");
  CHECK(refused({{"input", std::vector<std::string>(65, "x")}}) == "input");
  CHECK(refused({{"input", "x"}, {"encoding_format", "hex"}}) == "encoding_format");
  CHECK(refused({{"input", "x"}, {"dimensions", 0}}) == "dimensions");
  try {
    parse({{"input", "x"}, {"model", "other"}});
    FAIL("no refusal");
  } catch (const ApiError& e) {
    CHECK(e.status == 404);
  }

  // RFC 4648's test vectors.
  auto b64 = [](const std::string& s) {
    return base64_encode(std::as_bytes(std::span<const char>(s.data(), s.size())));
  };
  CHECK(b64("") == "");
  CHECK(b64("f") == "Zg==");
  CHECK(b64("fo") == "Zm8=");
  CHECK(b64("foo") == "Zm9v");
  CHECK(b64("foobar") == "Zm9vYmFy");
  const std::vector<std::vector<float>> v = {{1.0f, -0.5f}, {0.25f, 0.0f}};
  const json f = json::parse(embeddings_body("m", v, false, 7));
  CHECK(f["object"] == "list");
  CHECK(f["model"] == "m");
  CHECK(f["usage"] == json{{"prompt_tokens", 7}, {"total_tokens", 7}});
  REQUIRE(f["data"].size() == 2);
  CHECK(f["data"][1] == json{{"object", "embedding"}, {"index", 1}, {"embedding", {0.25, 0.0}}});
  const json b = json::parse(embeddings_body("m", v, true, 7));
  // 1.0f and -0.5f as float32 little-endian: 00 00 80 3f, 00 00 00 bf.
  CHECK(b["data"][0]["embedding"] == "AACAPwAAAL8=");
}
