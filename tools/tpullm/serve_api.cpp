// OpenAI request parsing and response shapes of `tpullm serve` (serve_api.hpp).
#include "serve_api.hpp"

#include <cctype>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "tpullm/grammar/grammar.hpp"
#include "tpullm/runtime/slot_pool.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/json.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::cli::serve {

namespace {

using json = nlohmann::ordered_json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

[[noreturn]] void bad(const std::string& param, const std::string& message,
                      const std::string& code = "invalid_value") {
  throw ApiError{400, message, "invalid_request_error", param, code};
}

/// The number in `j[key]`, or nullopt when absent or null; 400 when not a number.
std::optional<double> number(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null())
    return std::nullopt;
  if (!j[key].is_number())
    bad(key, std::string("'") + key + "' must be a number", "invalid_type");
  const double v = j[key].get<double>();
  if (!std::isfinite(v))
    bad(key, std::string("'") + key + "' must be finite");
  return v;
}

/// The integer in `j[key]` within [lo, hi], or nullopt when absent or null.
std::optional<std::int64_t> integer(const json& j, const char* key, std::int64_t lo,
                                    std::int64_t hi) {
  if (!j.contains(key) || j[key].is_null())
    return std::nullopt;
  if (!j[key].is_number_integer())
    bad(key, std::string("'") + key + "' must be an integer", "invalid_type");
  if (j[key].is_number_unsigned() && j[key].get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    bad(key, std::string("'") + key + "' is out of range");
  const auto v = j[key].get<std::int64_t>();
  if (v < lo || v > hi)
    bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]");
  return v;
}

bool boolean(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null())
    return false;
  if (!j[key].is_boolean())
    bad(key, std::string("'") + key + "' must be a boolean", "invalid_type");
  return j[key].get<bool>();
}

/// A message's content as text: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const json& c, std::size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  if (c.is_string())
    return c.get<std::string>();
  if (c.is_null())
    return {};
  if (!c.is_array())
    bad(param, "content must be a string or an array of text parts", "invalid_type");
  std::string out;
  for (const auto& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      bad(param, "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
    out += part["text"].get<std::string>();
  }
  return out;
}

/// A role:tool message: {role, content, tool_call_id} (and name when given), as transformers
/// passes it to the template.
json tool_message(const json& msg, std::size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "]";
  if (!msg.contains("tool_call_id") || !msg["tool_call_id"].is_string())
    bad(param + ".tool_call_id", "a tool message needs a string 'tool_call_id'",
        "missing_required_parameter");
  json out = {{"role", "tool"},
              {"content", content_text(msg.value("content", json()), i)},
              {"tool_call_id", msg["tool_call_id"]}};
  if (msg.contains("name") && msg["name"].is_string())
    out["name"] = msg["name"];
  return out;
}

/// An assistant message with tool_calls: content as sent (null stays null) and each call
/// {id, type, function: {name, arguments}} with its arguments parsed into an object, as the
/// templates of transformers expect them.
json assistant_tool_calls(const json& msg, std::size_t i, const RequestLimits& limits) {
  const std::string param = "messages[" + std::to_string(i) + "].tool_calls";
  const json& calls = msg["tool_calls"];
  if (!calls.is_array())
    bad(param, "'tool_calls' must be an array", "invalid_type");
  if (calls.size() > limits.max_tool_calls)
    bad(param, "at most " + std::to_string(limits.max_tool_calls) +
                   " tool calls per message are accepted");
  json out_calls = json::array();
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const std::string p = param + "[" + std::to_string(k) + "]";
    const json& c = calls[k];
    if (!c.is_object() || c.value("type", json("function")) != "function" ||
        !c.contains("function") || !c["function"].is_object())
      bad(p,
          "a tool call is {\"id\", \"type\": \"function\", \"function\": {\"name\", "
          "\"arguments\"}}",
          "invalid_type");
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      bad(p + ".function.name", "a tool call needs a string function name", "invalid_type");
    json args = json::object();
    if (f.contains("arguments") && !f["arguments"].is_null()) {
      if (!f["arguments"].is_string())
        bad(p + ".function.arguments", "'arguments' must be a string of JSON", "invalid_type");
      try {
        args = parse_ordered_json(f["arguments"].get<std::string>(), "arguments", "not JSON");
      } catch (const Error& e) {
        bad(p + ".function.arguments", std::string("'arguments' is not JSON: ") + e.what());
      }
    }
    json call = json::object();
    if (c.contains("id") && c["id"].is_string())
      call["id"] = c["id"];
    call["type"] = "function";
    call["function"] = {{"name", f["name"]}, {"arguments", std::move(args)}};
    out_calls.push_back(std::move(call));
  }
  const json& content = msg.contains("content") ? msg["content"] : json();
  return {{"role", "assistant"},
          {"content", content.is_null() ? json() : json(content_text(content, i))},
          {"tool_calls", std::move(out_calls)}};
}

json parse_messages(const json& j, const RequestLimits& limits) {
  if (!j.contains("messages"))
    bad("messages", "'messages' is required", "missing_required_parameter");
  const json& m = j["messages"];
  if (!m.is_array() || m.empty())
    bad("messages", "'messages' must be a non-empty array", "invalid_type");
  if (m.size() > limits.max_messages)
    bad("messages", "at most " + std::to_string(limits.max_messages) + " messages are accepted");
  json out = json::array();
  for (std::size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      bad(param, "each message must be an object with a string 'role'", "invalid_type");
    const auto role = msg["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool")
      bad(param + ".role",
          "role '" + role + "' is not supported (system, developer, user, assistant or tool)");
    if (role == "tool") {
      out.push_back(tool_message(msg, i));
      continue;
    }
    if (msg.contains("tool_calls") && !msg["tool_calls"].is_null()) {
      if (role != "assistant")
        bad(param + ".tool_calls", "only assistant messages carry tool_calls");
      out.push_back(assistant_tool_calls(msg, i, limits));
      continue;
    }
    out.push_back({{"role", role == "developer" ? "system" : role},
                   {"content", content_text(msg.value("content", json()), i)}});
  }
  return out;
}

bool tool_name_ok(const std::string& name) {
  if (name.empty() || name.size() > 64)
    return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
      return false;
  return true;
}

/// `tools`: an array of {type: "function", function: {name, description?, parameters?,
/// strict?}}, names unique; kept as sent (the template renders them).
void parse_tools(const json& j, GenerationRequest& r, const RequestLimits& limits) {
  if (!j.contains("tools") || j["tools"].is_null())
    return;
  const json& t = j["tools"];
  if (!t.is_array())
    bad("tools", "'tools' must be an array", "invalid_type");
  if (t.size() > limits.max_tools)
    bad("tools", "at most " + std::to_string(limits.max_tools) + " tools are accepted");
  if (dump(t).size() > limits.max_tool_bytes)
    bad("tools",
        "the tools take more than " + std::to_string(limits.max_tool_bytes) + " bytes as JSON");
  std::set<std::string> names;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::string param = "tools[" + std::to_string(i) + "]";
    const json& tool = t[i];
    if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function")
      bad(param + ".type", "each tool must be an object with type 'function'");
    if (!tool.contains("function") || !tool["function"].is_object())
      bad(param + ".function", "a tool needs a 'function' object", "missing_required_parameter");
    const json& f = tool["function"];
    if (!f.contains("name") || !f["name"].is_string() ||
        !tool_name_ok(f["name"].get<std::string>()))
      bad(param + ".function.name",
          "a function name must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'");
    if (!names.insert(f["name"].get<std::string>()).second)
      bad(param + ".function.name",
          "the function name '" + f["name"].get<std::string>() + "' is given twice");
    if (f.contains("description") && !f["description"].is_null() && !f["description"].is_string())
      bad(param + ".function.description", "'description' must be a string", "invalid_type");
    if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
      bad(param + ".function.parameters", "'parameters' must be a JSON schema object",
          "invalid_type");
    if (f.contains("strict") && !f["strict"].is_null() && !f["strict"].is_boolean())
      bad(param + ".function.strict", "'strict' must be a boolean", "invalid_type");
  }
  if (!t.empty())
    r.tools.list = t;
}

/// `tool_choice`: "none", "auto", "required" or {type: "function", function: {name}};
/// `parallel_tool_calls`: a boolean.
void parse_tool_choice(const json& j, GenerationRequest& r) {
  const bool tools = !r.tools.list.is_null();
  r.tools.choice = tools ? ToolChoice::automatic : ToolChoice::none;
  r.tools.parallel = !j.contains("parallel_tool_calls") || j["parallel_tool_calls"].is_null() ||
                     boolean(j, "parallel_tool_calls");
  if (!j.contains("tool_choice") || j["tool_choice"].is_null())
    return;
  const json& c = j["tool_choice"];
  if (c == "none") {
    r.tools.choice = ToolChoice::none;
    return;
  }
  if (c.is_string() && c != "auto" && c != "required")
    bad("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  if (c.is_object()) {
    if (c.value("type", json()) != "function" || !c.contains("function") ||
        !c["function"].is_object() || !c["function"].contains("name") ||
        !c["function"]["name"].is_string())
      bad("tool_choice",
          "a named tool_choice is {\"type\": \"function\", \"function\": "
          "{\"name\": ...}}",
          "invalid_type");
  } else if (!c.is_string()) {
    bad("tool_choice", "'tool_choice' must be a string or an object", "invalid_type");
  }
  if (!tools)
    bad("tool_choice", "'tool_choice' other than 'none' needs 'tools'");
  if (c == "auto")
    return;
  if (c == "required") {
    r.tools.choice = ToolChoice::required;
    return;
  }
  r.tools.choice = ToolChoice::named;
  r.tools.name = c["function"]["name"].get<std::string>();
  bool found = false;
  for (const auto& t : r.tools.list)
    found = found || t["function"]["name"] == r.tools.name;
  if (!found)
    bad("tool_choice", "the function '" + r.tools.name + "' is not among the tools");
}

void parse_prompt(const json& j, GenerationRequest& r, const RequestLimits& limits) {
  if (!j.contains("prompt"))
    bad("prompt", "'prompt' is required", "missing_required_parameter");
  const json& p = j["prompt"];
  auto ids = [&](const json& a) {
    if (a.empty())
      bad("prompt", "the prompt is empty");
    if (a.size() > limits.max_prompt_ids)
      bad("prompt", "the prompt has more than " + std::to_string(limits.max_prompt_ids) + " ids");
    for (const auto& v : a) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
          v.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max())
        bad("prompt", "a token-id prompt must be an array of non-negative integers");
      r.prompt_ids.push_back(static_cast<std::int32_t>(v.get<std::int64_t>()));
    }
  };
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r.prompt_text = p[0].get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_array()) {
    ids(p[0]);
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    ids(p);
  } else {
    bad("prompt", "'prompt' must be a string, an array of token ids, or a one-element array of "
                  "either (several prompts per request are not supported)");
  }
  if (r.prompt_text && r.prompt_text->empty())
    bad("prompt", "the prompt is empty");
}

void parse_stop(const json& j, GenerationRequest& r, const RequestLimits& limits) {
  if (!j.contains("stop") || j["stop"].is_null())
    return;
  const json& s = j["stop"];
  json list = s.is_string() ? json::array({s}) : s;
  if (!list.is_array())
    bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
  if (list.size() > limits.max_stop)
    bad("stop", "at most " + std::to_string(limits.max_stop) + " stop strings are accepted");
  for (const auto& v : list) {
    if (!v.is_string())
      bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
    auto text = v.get<std::string>();
    if (text.empty() || text.size() > limits.max_stop_bytes)
      bad("stop",
          "each stop string must have 1 to " + std::to_string(limits.max_stop_bytes) + " bytes");
    r.stop.push_back(std::move(text));
  }
}

void parse_sampling(const json& j, const nlohmann::json& d, GenerationRequest& r) {
  const bool sample = d.is_object() && d.contains("do_sample") && d["do_sample"].is_boolean() &&
                      d["do_sample"].get<bool>();
  // A value is the request's, else generation_config.json's (with do_sample); each is checked
  // here, as the float the sampler will use (1e-50 is a positive double but 0 as a float), so
  // that no value reaches the scheduler to be refused there.
  bool from_config = false;
  auto value = [&](const char* key) -> std::optional<double> {
    from_config = false;
    if (auto v = number(j, key))
      return v;
    if (sample && d.contains(key) && d[key].is_number()) {
      from_config = true;
      return d[key].get<double>();
    }
    return std::nullopt;
  };
  auto out_of_range = [&](const char* key, double v, const std::string& rule) {
    if (from_config)
      bad(key, "generation_config.json sets '" + std::string(key) + "' to " + std::to_string(v) +
                   ", outside " + rule + "; send '" + key + "' to override it");
    bad(key, std::string("'") + key + "' must be in " + rule);
  };
  auto& s = r.sampling;
  if (auto v = value("temperature")) {
    const auto f = static_cast<float>(*v);
    if (!(*v >= 0 && *v <= 2))
      out_of_range("temperature", *v, "[0, 2]");
    s.temperature = f;
  }
  if (auto v = value("top_p")) {
    const auto f = static_cast<float>(*v);
    if (!(f > 0 && f <= 1))
      out_of_range("top_p", *v, "(0, 1] (as a 32-bit float)");
    s.top_p = f;
  }
  if (auto v = integer(j, "top_k", 0, std::numeric_limits<int>::max()))
    s.top_k = static_cast<int>(*v);
  else if (auto f = value("top_k"); f && *f >= 0 && *f <= 1e9)
    s.top_k = static_cast<int>(*f);
  else if (f)
    out_of_range("top_k", *f, "[0, 1e9]");
  if (auto v = value("repetition_penalty")) {
    const auto f = static_cast<float>(*v);
    if (!(f > 0 && std::isfinite(f)))
      out_of_range("repetition_penalty", *v, "(0, 3.4e38] (as a 32-bit float)");
    s.repetition_penalty = f;
  }
  // OpenAI's frequency / presence penalties subtract from logits by count; HF's repetition
  // penalty divides them: they do not map, so only their neutral value is accepted.
  for (const char* key : {"frequency_penalty", "presence_penalty"})
    if (auto v = number(j, key); v && *v != 0)
      bad(key, std::string("'") + key +
                   "' is not supported (it does not map onto the model's repetition penalty); "
                   "use 'repetition_penalty'");
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer())
      bad("seed", "'seed' must be an integer", "invalid_type");
    s.seed = j["seed"].is_number_unsigned()
                 ? j["seed"].get<std::uint64_t>()
                 : static_cast<std::uint64_t>(j["seed"].get<std::int64_t>());
  }
  try { // the sampler's own rules, so that a check missing above is a 400, not a failed job
    s.validate();
  } catch (const Error& e) {
    bad("", e.what());
  }
}

} // namespace

ApiError api_error(const std::exception& e) {
  if (const auto* busy = dynamic_cast<const runtime::BusyError*>(&e))
    return ApiError{503, busy->message(), "server_error", "", "queue_full"};
  const auto* err = dynamic_cast<const Error*>(&e);
  const bool bad =
      err && (err->kind() == ErrorKind::invalid_input || err->kind() == ErrorKind::unsupported);
  return ApiError{bad ? 400 : 500, e.what(), bad ? "invalid_request_error" : "server_error", "",
                  ""};
}

std::string error_body(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json() : json(e.param)},
              {"code", e.code.empty() ? json() : json(e.code)}};
  return dump(json{{"error", err}});
}

namespace {

/// Chat: `logprobs` (boolean) and `top_logprobs` (0..20, only with logprobs true);
/// completions: `logprobs` (0..5 alternatives, as OpenAI's legacy endpoint).
void parse_logprobs(const json& j, GenerationRequest& r) {
  if (r.chat) {
    const auto top = integer(j, "top_logprobs", 0, runtime::kMaxTopLogprobs);
    if (!boolean(j, "logprobs")) {
      if (top)
        bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      return;
    }
    r.logprobs = static_cast<int>(top.value_or(0));
  } else if (auto n = integer(j, "logprobs", 0, 5)) {
    r.logprobs = static_cast<int>(*n);
  }
}

/// `response_format`: {"type": "text"} (free text), {"type": "json_object"} (one JSON object)
/// or {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} (JSON valid against
/// the schema; strict or not, the answer is constrained). A schema outside the grammar subset
/// (docs/grammar.md) is refused with the keyword named.
void parse_response_format(const json& j, GenerationRequest& r) {
  if (!j.contains("response_format") || j["response_format"].is_null())
    return;
  const json& f = j["response_format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    bad("response_format", "'response_format' must be an object with a string 'type'",
        "invalid_type");
  const std::string type = f["type"].get<std::string>();
  if (type == "text")
    return;
  if (type == "json_object") {
    r.grammar = grammar::json_object_grammar();
    return;
  }
  if (type != "json_schema")
    bad("response_format",
        "response_format type '" + type + "' is not supported (text, json_object, json_schema)");
  if (!f.contains("json_schema") || !f["json_schema"].is_object())
    bad("response_format", "'response_format.json_schema' must be an object", "invalid_type");
  const json& js = f["json_schema"];
  if (js.contains("name") && !js["name"].is_string())
    bad("response_format", "'response_format.json_schema.name' must be a string", "invalid_type");
  if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean())
    bad("response_format", "'response_format.json_schema.strict' must be a boolean",
        "invalid_type");
  if (!js.contains("schema") || !(js["schema"].is_object() || js["schema"].is_boolean()))
    bad("response_format", "'response_format.json_schema.schema' must be a JSON Schema object",
        "invalid_type");
  try {
    // The grammar engine takes a plain json; key order does not matter to a schema.
    r.grammar = grammar::grammar_from_json_schema(nlohmann::json::parse(js["schema"].dump()));
  } catch (const Error& e) {
    bad("response_format", e.what());
  }
}

/// A request body parsed as a JSON object whose optional `model` names the served model: 400
/// (invalid_json, invalid_type) or 404 (model_not_found) otherwise. Shared by every endpoint.
json request_object(const std::string& body, const std::string& model) {
  json j;
  try {
    j = parse_ordered_json(body, "the body", "the body is not valid JSON");
  } catch (const Error& e) {
    throw ApiError{400, e.message(), "invalid_request_error", "", "invalid_json"};
  }
  if (!j.is_object())
    bad("", "the body must be a JSON object", "invalid_type");
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string())
      bad("model", "'model' must be a string", "invalid_type");
    if (j["model"].get<std::string>() != model)
      throw ApiError{404,
                     "the model '" + j["model"].get<std::string>() +
                         "' does not exist (this server serves '" + model + "')",
                     "invalid_request_error", "model", "model_not_found"};
  }
  return j;
}

} // namespace

GenerationRequest parse_request(const std::string& body, bool chat, const std::string& model,
                                const nlohmann::json& defaults, const RequestLimits& limits) {
  json j = request_object(body, model);
  GenerationRequest r;
  r.chat = chat;
  if (chat)
    r.messages = parse_messages(j, limits);
  else
    parse_prompt(j, r, limits);
  r.stream = boolean(j, "stream");
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    if (!j["stream_options"].is_object())
      bad("stream_options", "'stream_options' must be an object", "invalid_type");
    r.include_usage = boolean(j["stream_options"], "include_usage");
  }
  const char* budget =
      chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto v = integer(j, budget, 1, std::numeric_limits<int>::max()))
    r.max_tokens = static_cast<int>(*v);
  if (auto n = integer(j, "n", 1, std::numeric_limits<int>::max()); n && *n != 1)
    bad("n", "only n = 1 is supported");
  if (auto n = integer(j, "best_of", 1, std::numeric_limits<int>::max()); n && *n != 1)
    bad("best_of", "only best_of = 1 is supported");
  if (boolean(j, "echo"))
    bad("echo", "'echo' is not supported");
  parse_logprobs(j, r);
  parse_response_format(j, r);
  if (chat) {
    parse_tools(j, r, limits);
    parse_tool_choice(j, r);
  } else {
    for (const char* key : {"tools", "tool_choice", "parallel_tool_calls"})
      if (j.contains(key) && !j[key].is_null())
        bad(key, std::string("'") + key + "' is for /v1/chat/completions");
  }
  if (j.contains("suffix") && !j["suffix"].is_null())
    bad("suffix", "'suffix' is not supported");
  parse_stop(j, r, limits);
  parse_sampling(j, defaults, r);
  return r;
}

nlohmann::ordered_json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {

json head(const AnswerIds& ids, bool chunk) {
  const char* object =
      ids.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}};
}

json reason(const std::string& r) {
  return r.empty() ? json() : json(r);
}

/// An answer's message with its tool calls: content null when there is no text.
json tool_call_message(const std::string& text, const std::vector<runtime::ToolCall>& calls) {
  json list = json::array();
  for (const auto& c : calls)
    list.push_back({{"id", c.id},
                    {"type", "function"},
                    {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return {{"role", "assistant"},
          {"content", text.empty() ? json() : json(text)},
          {"tool_calls", std::move(list)}};
}

} // namespace

namespace {

/// OpenAI writes a token of zero probability as -9999.0 (JSON has no -inf).
double finite_logprob(double lp) {
  return std::isfinite(lp) ? lp : -9999.0;
}

} // namespace

nlohmann::ordered_json logprobs_json(bool chat, std::span<const runtime::TokenLogprobs> lps,
                                     const text::Tokenizer& tok, std::int64_t text_offset) {
  const auto text_of = [&](std::int32_t id) {
    const std::int32_t one[] = {id};
    return tok.decode(one, false);
  };
  // A token's own bytes (byte-level pieces may end inside a UTF-8 character; the text then
  // shows U+FFFD where the bytes are exact).
  const auto bytes_of = [&](std::int32_t id) {
    json b = json::array();
    for (unsigned char c : tok.token_bytes(id))
      b.push_back(static_cast<int>(c));
    return b;
  };
  if (chat) {
    json content = json::array();
    for (const auto& lp : lps) {
      const std::string t = text_of(lp.chosen.token);
      json top = json::array();
      for (const auto& alt : lp.top) {
        const std::string a = text_of(alt.token);
        top.push_back({{"token", a},
                       {"logprob", finite_logprob(alt.logprob)},
                       {"bytes", bytes_of(alt.token)}});
      }
      content.push_back({{"token", t},
                         {"logprob", finite_logprob(lp.chosen.logprob)},
                         {"bytes", bytes_of(lp.chosen.token)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  std::int64_t offset = text_offset;
  for (const auto& lp : lps) {
    const std::string t = text_of(lp.chosen.token);
    tokens.push_back(t);
    values.push_back(finite_logprob(lp.chosen.logprob));
    json top = json::object();
    for (const auto& alt : lp.top)
      top[text_of(alt.token)] = finite_logprob(alt.logprob);
    tops.push_back(top);
    offsets.push_back(offset);
    offset += static_cast<std::int64_t>(t.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", values},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

std::string completion_body(const AnswerIds& ids, const std::string& text,
                            const std::string& finish_reason, const Usage& u,
                            const std::vector<runtime::ToolCall>* calls,
                            const nlohmann::ordered_json& logprobs) {
  json out = head(ids, false);
  json choice = {{"index", 0}};
  const bool called = ids.chat && calls && !calls->empty();
  if (called)
    choice["message"] = tool_call_message(text, *calls);
  else if (ids.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = reason(called ? "tool_calls" : finish_reason);
  out["choices"] = json::array({choice});
  out["usage"] = usage_json(u);
  return dump(out);
}

std::string chunk_json(const AnswerIds& ids, const std::string& text, bool role,
                       const std::string& finish_reason, const Usage* usage,
                       const nlohmann::ordered_json& logprobs) {
  json out = head(ids, true);
  if (usage) {
    out["choices"] = json::array();
    out["usage"] = usage_json(*usage);
    return dump(out);
  }
  json choice = {{"index", 0}};
  if (ids.chat) {
    json delta = json::object();
    if (role)
      delta["role"] = "assistant";
    if (!text.empty() || role)
      delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = reason(finish_reason);
  out["choices"] = json::array({choice});
  return dump(out);
}

std::vector<std::string> tool_call_chunks(const AnswerIds& ids, std::size_t index,
                                          const runtime::ToolCall& call) {
  std::vector<std::string> out;
  for (int part = 0; part < 2; ++part) {
    json c = {{"index", index}};
    if (part == 0) {
      c["id"] = call.id;
      c["type"] = "function";
      c["function"] = {{"name", call.name}, {"arguments", ""}};
    } else {
      c["function"] = {{"arguments", call.arguments}};
    }
    json out_chunk = head(ids, true);
    out_chunk["choices"] = json::array({{{"index", 0},
                                         {"delta", {{"tool_calls", json::array({c})}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}});
    out.push_back(dump(out_chunk));
  }
  return out;
}

bool parses_tool_calls(const GenerationRequest& g) {
  return g.chat && !g.tools.list.is_null() && g.tools.choice != ToolChoice::none;
}

std::shared_ptr<const grammar::Grammar> tool_call_grammar(runtime::ToolCallFormat format,
                                                          const GenerationRequest& g) {
  if (g.tools.choice != ToolChoice::required && g.tools.choice != ToolChoice::named)
    return nullptr;
  if (g.grammar)
    bad("response_format",
        "a response_format and a forced tool call (tool_choice required or a named function) "
        "cannot both constrain the answer");
  try {
    const runtime::ToolCallConstraint c =
        runtime::tool_call_constraint(format, g.tools.list, g.tools.name);
    return grammar::wrap(c.prefix,
                         grammar::grammar_from_json_schema(nlohmann::json::parse(c.schema.dump())),
                         c.suffix);
  } catch (const Error& e) {
    bad("tool_choice", e.what());
  }
}

std::optional<nlohmann::ordered_json>
with_empty_tool_call_content(const nlohmann::ordered_json& messages) {
  bool changed = false;
  json out = messages;
  for (auto& m : out)
    if (m.is_object() && m.contains("tool_calls") && m.contains("content") &&
        m["content"].is_null()) {
      m["content"] = "";
      changed = true;
    }
  if (!changed)
    return std::nullopt;
  return out;
}

EmbeddingsRequest parse_embeddings_request(const std::string& body, const std::string& model,
                                           const RequestLimits& limits) {
  json j = request_object(body, model);
  if (!j.contains("input") || j["input"].is_null())
    bad("input", "'input' is required", "missing_required_parameter");
  EmbeddingsRequest r;
  std::size_t ids_in_all = 0;
  auto ids = [&](const json& a) {
    EmbeddingsRequest::Input in;
    if (a.empty())
      bad("input", "an input is empty");
    ids_in_all += a.size();
    if (ids_in_all > limits.max_prompt_ids)
      bad("input", "the inputs have more than " + std::to_string(limits.max_prompt_ids) +
                       " token ids in all");
    for (const auto& v : a) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
          v.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max())
        bad("input", "a token-id input must be an array of non-negative integers");
      in.ids.push_back(static_cast<std::int32_t>(v.get<std::int64_t>()));
    }
    r.inputs.push_back(std::move(in));
  };
  auto text = [&](const json& t) {
    if (t.get_ref<const std::string&>().empty())
      bad("input", "an input is empty");
    r.inputs.push_back({t.get<std::string>(), {}});
  };
  const json& in = j["input"];
  const char* shape = "'input' must be a string, an array of strings, an array of token ids or "
                      "an array of arrays of token ids";
  if (in.is_string()) {
    text(in);
  } else if (in.is_array() && !in.empty() && in[0].is_number()) {
    ids(in);
  } else if (in.is_array() && !in.empty()) {
    if (in.size() > limits.max_embedding_inputs)
      bad("input", "at most " + std::to_string(limits.max_embedding_inputs) +
                       " inputs per request, got " + std::to_string(in.size()));
    const bool strings = in[0].is_string();
    for (const auto& e : in) {
      if (strings && e.is_string())
        text(e);
      else if (!strings && e.is_array())
        ids(e);
      else
        bad("input", std::string(shape) + " (not a mix)", "invalid_type");
    }
  } else if (in.is_array()) {
    bad("input", "'input' is an empty array");
  } else {
    bad("input", shape, "invalid_type");
  }
  if (j.contains("encoding_format") && !j["encoding_format"].is_null()) {
    const json& f = j["encoding_format"];
    if (!f.is_string() || (f.get<std::string>() != "float" && f.get<std::string>() != "base64"))
      bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    r.base64 = f.get<std::string>() == "base64";
  }
  r.dimensions = integer(j, "dimensions", 1, std::numeric_limits<std::int32_t>::max());
  if (j.contains("user") && !j["user"].is_null() && !j["user"].is_string())
    bad("user", "'user' must be a string", "invalid_type");
  return r;
}

std::string base64_encode(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto at = [&](std::size_t k) { return static_cast<std::uint32_t>(bytes[k]); };
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = at(i) << 16 | at(i + 1) << 8 | at(i + 2);
    for (int s = 18; s >= 0; s -= 6)
      out.push_back(kDigits[(v >> s) & 63]);
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    const std::uint32_t v = at(i) << 16 | (rest == 2 ? at(i + 1) << 8 : 0);
    out.push_back(kDigits[(v >> 18) & 63]);
    out.push_back(kDigits[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kDigits[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string embeddings_body(const std::string& model, std::span<const std::vector<float>> vectors,
                            bool base64, std::int64_t prompt_tokens) {
  static_assert(std::endian::native == std::endian::little,
                "base64 embeddings are float32 little-endian bytes");
  json data = json::array();
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (base64)
      e["embedding"] = base64_encode(std::as_bytes(std::span<const float>(vectors[i])));
    else
      e["embedding"] = vectors[i];
    data.push_back(std::move(e));
  }
  return dump(json{{"object", "list"},
                   {"data", std::move(data)},
                   {"model", model},
                   {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

} // namespace tpullm::cli::serve
