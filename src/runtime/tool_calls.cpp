// Tool-call formats, their detection and parsing, and forced-call constraints (tool_calls.hpp).
#include "tpullm/runtime/tool_calls.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include "tpullm/support/error.hpp"
#include "tpullm/support/json.hpp"

namespace tpullm::runtime {

namespace {

using json = nlohmann::ordered_json;

// DeepSeek-V3's markers: U+FF5C FULLWIDTH VERTICAL LINE and U+2581 LOWER ONE EIGHTH BLOCK.
#define TPULLM_DS(x) "\xEF\xBD\x9C" x "\xEF\xBD\x9C>"
constexpr std::string_view kDsCallsBegin = "<" TPULLM_DS("tool\xE2\x96\x81"
                                                         "calls\xE2\x96\x81"
                                                         "begin");
constexpr std::string_view kDsCallsEnd = "<" TPULLM_DS("tool\xE2\x96\x81"
                                                       "calls\xE2\x96\x81"
                                                       "end");
constexpr std::string_view kDsCallBegin = "<" TPULLM_DS("tool\xE2\x96\x81"
                                                        "call\xE2\x96\x81"
                                                        "begin");
constexpr std::string_view kDsCallEnd = "<" TPULLM_DS("tool\xE2\x96\x81"
                                                      "call\xE2\x96\x81"
                                                      "end");
constexpr std::string_view kDsSep = "<" TPULLM_DS("tool\xE2\x96\x81"
                                                  "sep");
#undef TPULLM_DS

/// A text that opens a call block.
struct Marker {
  std::string_view text;
  bool anywhere = true; ///< else only at the start of the answer (after whitespace)
  bool in_body = false; ///< the marker is part of the call's text (JSON that starts with it)
};

/// Where a format's call blocks start and end ("" end: at the end of the answer).
struct Spec {
  std::vector<Marker> starts;
  std::string_view end;
};

const Spec& spec(ToolCallFormat f) {
  static const Spec qwen{{{"<tool_call>"}}, "</tool_call>"};
  static const Spec llama{{{"<|python_tag|>"}, {"{", false, true}}, ""};
  static const Spec mistral{{{"[TOOL_CALLS]"}, {"[{", false, true}}, ""};
  static const Spec deepseek{{{kDsCallsBegin}}, kDsCallsEnd};
  switch (f) {
  case ToolCallFormat::qwen_hermes:
    return qwen;
  case ToolCallFormat::llama3_json:
    return llama;
  case ToolCallFormat::mistral:
    return mistral;
  case ToolCallFormat::deepseek_v3:
    return deepseek;
  }
  return qwen;
}

bool space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && space(s.back()))
    s.remove_suffix(1);
  return s;
}

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

std::optional<json> parse(std::string_view text) {
  try {
    return parse_ordered_json(text, "tool call", "not JSON");
  } catch (const Error&) {
    return std::nullopt;
  }
}

/// A call's name and arguments (an object, or a string holding one), as compact JSON text.
using NamedArgs = std::pair<std::string, std::string>;

std::optional<std::string> arguments_text(const json& a) {
  if (a.is_object())
    return a.dump(-1, ' ', false, json::error_handler_t::replace);
  if (a.is_string()) {
    if (auto inner = parse(a.get<std::string>()); inner && inner->is_object())
      return inner->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return std::nullopt;
}

/// {"name": N, "arguments" (or "parameters"): {...}}; arguments absent = {}.
std::optional<NamedArgs> named_object(const json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() ||
      j["name"].get<std::string>().empty())
    return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  if (!j.contains(key))
    return NamedArgs{j["name"].get<std::string>(), "{}"};
  auto args = arguments_text(j[key]);
  if (!args)
    return std::nullopt;
  return NamedArgs{j["name"].get<std::string>(), *args};
}

/// JSON texts separated by `sep` outside strings (Llama's `;` between calls).
std::vector<std::string_view> split_top_level(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  bool in_string = false, escaped = false;
  std::size_t from = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == sep) {
      out.push_back(s.substr(from, i - from));
      from = i + 1;
    }
  }
  out.push_back(s.substr(from));
  return out;
}

/// DeepSeek-V3's calls: `<call begin>function<sep>NAME\n```json\nARGS\n```<call end>`, each
/// after optional whitespace.
std::optional<std::vector<NamedArgs>> deepseek_calls(std::string_view body) {
  std::vector<NamedArgs> out;
  for (;;) {
    body = trim(body);
    if (body.empty())
      break;
    if (body.substr(0, kDsCallBegin.size()) != kDsCallBegin)
      return std::nullopt;
    body.remove_prefix(kDsCallBegin.size());
    const auto sep = body.find(kDsSep);
    if (sep == std::string_view::npos || trim(body.substr(0, sep)) != "function")
      return std::nullopt;
    body.remove_prefix(sep + kDsSep.size());
    const auto nl = body.find('\n');
    if (nl == std::string_view::npos)
      return std::nullopt;
    const std::string name(trim(body.substr(0, nl)));
    body = trim(body.substr(nl + 1));
    constexpr std::string_view fence = "```json", close = "```";
    if (name.empty() || body.substr(0, fence.size()) != fence)
      return std::nullopt;
    body.remove_prefix(fence.size());
    const auto end = body.find(close);
    if (end == std::string_view::npos)
      return std::nullopt;
    auto args_json = parse(trim(body.substr(0, end)));
    if (!args_json)
      return std::nullopt;
    auto args = arguments_text(*args_json);
    if (!args)
      return std::nullopt;
    body = trim(body.substr(end + close.size()));
    if (body.substr(0, kDsCallEnd.size()) != kDsCallEnd)
      return std::nullopt;
    body.remove_prefix(kDsCallEnd.size());
    out.emplace_back(name, *args);
  }
  if (out.empty())
    return std::nullopt;
  return out;
}

/// Mistral's newer form (tokenizer v11+): `NAME[ARGS]{...}` per call, calls separated by
/// `[TOOL_CALLS]` (the first one already taken as the block's marker).
std::optional<std::vector<NamedArgs>> mistral_args_calls(std::string_view body) {
  constexpr std::string_view marker = "[TOOL_CALLS]", args = "[ARGS]";
  std::vector<NamedArgs> out;
  for (;;) {
    const auto next = body.find(marker);
    const std::string_view one = body.substr(0, next);
    const auto a = one.find(args);
    if (a == std::string_view::npos)
      return std::nullopt;
    const std::string name(trim(one.substr(0, a)));
    auto j = parse(trim(one.substr(a + args.size())));
    auto text = j ? arguments_text(*j) : std::nullopt;
    if (name.empty() || !text)
      return std::nullopt;
    out.emplace_back(name, *text);
    if (next == std::string_view::npos)
      break;
    body.remove_prefix(next + marker.size());
  }
  return out;
}

/// The calls written in one call block of `format`, or nullopt when it does not parse.
std::optional<std::vector<NamedArgs>> calls_of(ToolCallFormat format, std::string_view body) {
  std::vector<NamedArgs> out;
  switch (format) {
  case ToolCallFormat::qwen_hermes: {
    auto j = parse(trim(body));
    if (!j)
      return std::nullopt;
    auto call = named_object(*j);
    if (!call)
      return std::nullopt;
    out.push_back(std::move(*call));
    break;
  }
  case ToolCallFormat::llama3_json:
    for (auto part : split_top_level(body, ';')) {
      auto j = parse(trim(part));
      auto call = j ? named_object(*j) : std::nullopt;
      if (!call)
        return std::nullopt;
      out.push_back(std::move(*call));
    }
    break;
  case ToolCallFormat::mistral: {
    auto j = parse(trim(body));
    if (!j)
      return mistral_args_calls(body);
    const json list = j->is_array() ? *j : json::array({*j});
    if (list.empty())
      return std::nullopt;
    for (const auto& item : list) {
      auto call = named_object(item);
      if (!call)
        return std::nullopt;
      out.push_back(std::move(*call));
    }
    break;
  }
  case ToolCallFormat::deepseek_v3:
    return deepseek_calls(body);
  }
  return out;
}

} // namespace

std::string_view tool_call_format_name(ToolCallFormat f) {
  switch (f) {
  case ToolCallFormat::qwen_hermes:
    return "qwen_hermes";
  case ToolCallFormat::llama3_json:
    return "llama3_json";
  case ToolCallFormat::mistral:
    return "mistral";
  case ToolCallFormat::deepseek_v3:
    return "deepseek_v3";
  }
  return "?";
}

ToolCallFormat detect_tool_call_format(std::string_view source, std::string_view architecture) {
  if (contains(source, "<tool_call>"))
    return ToolCallFormat::qwen_hermes;
  if (contains(source, "tool\xE2\x96\x81"
                       "calls\xE2\x96\x81"
                       "begin"))
    return ToolCallFormat::deepseek_v3;
  if (contains(source, "[TOOL_CALLS]"))
    return ToolCallFormat::mistral;
  if (contains(source, "<|python_tag|>") ||
      contains(source, "<|start_header_id|>ipython<|end_header_id|>"))
    return ToolCallFormat::llama3_json;
  if (contains(source, "tools")) {
    const std::string_view a = architecture;
    if (a == "qwen2" || a == "qwen3" || a == "qwen2_moe" || a == "qwen3_moe")
      return ToolCallFormat::qwen_hermes;
    if (a == "llama")
      return ToolCallFormat::llama3_json;
    if (a == "mistral" || a == "mixtral")
      return ToolCallFormat::mistral;
    if (a == "deepseek_v3")
      return ToolCallFormat::deepseek_v3;
  }
  throw Error(ErrorKind::unsupported, "tool calls",
              "the chat template of this model has no known tool-call format (known: "
              "qwen_hermes, llama3_json, mistral, deepseek_v3)");
}

ToolCallParser::ToolCallParser(ToolCallFormat format, std::string id_prefix)
    : format_(format), id_prefix_(std::move(id_prefix)) {}

void ToolCallParser::content(std::vector<ToolCallEvent>& out, std::string text) {
  if (text.empty())
    return;
  if (!out.empty() && !out.back().is_call)
    out.back().content += text;
  else
    out.push_back(ToolCallEvent{false, std::move(text), {}, 0});
}

bool ToolCallParser::close_call(std::vector<ToolCallEvent>& out, std::string_view body) {
  auto calls = calls_of(format_, body);
  if (!calls)
    return false;
  for (auto& [name, args] : *calls) {
    ToolCallEvent e;
    e.is_call = true;
    e.index = calls_++;
    e.call = ToolCall{id_prefix_ + std::to_string(e.index), std::move(name), std::move(args)};
    out.push_back(std::move(e));
  }
  return true;
}

void ToolCallParser::scan(std::vector<ToolCallEvent>& out, bool at_end) {
  const Spec& s = spec(format_);
  for (;;) {
    if (in_call_) {
      if (!s.end.empty()) {
        // Only the new text (and a marker's length before it) is searched: a long call block
        // costs linear time, not quadratic.
        const auto e = pending_.find(s.end, searched_);
        searched_ = pending_.size() >= s.end.size() ? pending_.size() - s.end.size() + 1 : 0;
        if (e != std::string::npos) {
          const bool ok = close_call(out, std::string_view(pending_).substr(0, e));
          if (!ok)
            content(out, call_start_ + pending_.substr(0, e + s.end.size()));
          pending_.erase(0, e + s.end.size());
          in_call_ = false;
          after_call_ = ok;
          continue;
        }
      }
      if (!at_end)
        return;
      // The answer ended inside a call block: it is a call if it parses as one.
      if (!close_call(out, pending_))
        content(out, call_start_ + pending_);
      pending_.clear();
      in_call_ = false;
      return;
    }
    if (after_call_) {
      const auto first = pending_.find_first_not_of(" \t\r\n");
      pending_.erase(0, first == std::string::npos ? pending_.size() : first);
      if (pending_.empty())
        return;
      after_call_ = false;
    }
    // The earliest marker that opens a call block.
    const auto first = pending_.find_first_not_of(" \t\r\n");
    std::size_t at = std::string::npos;
    const Marker* found = nullptr;
    for (const auto& m : s.starts) {
      std::size_t p = std::string::npos;
      if (m.anywhere)
        p = pending_.find(m.text);
      else if (answer_start_ && first != std::string::npos &&
               pending_.compare(first, m.text.size(), m.text) == 0)
        p = first;
      if (p < at) {
        at = p;
        found = &m;
      }
    }
    if (found) {
      std::size_t text_end = at;
      while (text_end > 0 && space(pending_[text_end - 1]))
        --text_end;
      content(out, pending_.substr(0, text_end));
      call_start_ = pending_.substr(text_end, at - text_end);
      if (!found->in_body)
        call_start_ += found->text;
      pending_.erase(0, found->in_body ? at : at + found->text.size());
      in_call_ = true;
      answer_start_ = false;
      searched_ = 0;
      continue;
    }
    // No marker yet: show what cannot become one, hold back the rest (a partial marker at the
    // end, an answer that may still start with one, and the whitespace before either).
    std::size_t keep = 0;
    if (!at_end) {
      for (const auto& m : s.starts) {
        if (m.anywhere) {
          for (std::size_t k = std::min(m.text.size() - 1, pending_.size()); k > 0; --k)
            if (pending_.compare(pending_.size() - k, k, m.text, 0, k) == 0) {
              keep = std::max(keep, k);
              break;
            }
        } else if (answer_start_ &&
                   (first == std::string::npos || m.text.substr(0, pending_.size() - first) ==
                                                      std::string_view(pending_).substr(first))) {
          keep = pending_.size();
        }
      }
      while (keep < pending_.size() && space(pending_[pending_.size() - keep - 1]))
        ++keep;
    }
    const std::size_t show = pending_.size() - keep;
    if (first != std::string::npos && first < show)
      answer_start_ = false;
    content(out, pending_.substr(0, show));
    pending_.erase(0, show);
    return;
  }
}

std::vector<ToolCallEvent> ToolCallParser::feed(std::string_view piece) {
  std::vector<ToolCallEvent> out;
  pending_ += piece;
  scan(out, false);
  return out;
}

std::vector<ToolCallEvent> ToolCallParser::finish() {
  std::vector<ToolCallEvent> out;
  scan(out, true);
  return out;
}

ParsedAnswer parse_tool_calls(ToolCallFormat format, std::string_view text,
                              const std::string& id_prefix) {
  ToolCallParser p(format, id_prefix);
  auto events = p.feed(text);
  auto rest = p.finish();
  events.insert(events.end(), std::make_move_iterator(rest.begin()),
                std::make_move_iterator(rest.end()));
  ParsedAnswer out;
  for (auto& e : events) {
    if (e.is_call)
      out.tool_calls.push_back(std::move(e.call));
    else
      out.content += e.content;
  }
  return out;
}

ToolCallConstraint tool_call_constraint(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                        const std::string& name) {
  check(tools.is_array() && !tools.empty(), ErrorKind::invalid_input, "tool_choice",
        "a tool call is required but no tools are given");
  auto parameters = [](const json& tool) {
    const json& f = tool["function"];
    return f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"]
                                                                  : json{{"type", "object"}};
  };
  auto quoted = [](const std::string& s) {
    return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  };
  // The tools the call may be to.
  std::vector<const json*> allowed;
  for (const auto& t : tools)
    if (name.empty() || t["function"]["name"] == name)
      allowed.push_back(&t);
  check(!allowed.empty(), ErrorKind::invalid_input, "tool_choice", "the function '", name,
        "' is not among the tools");
  const char* args_key = format == ToolCallFormat::llama3_json ? "parameters" : "arguments";
  std::string open, close;
  switch (format) {
  case ToolCallFormat::qwen_hermes:
    open = "<tool_call>\n";
    close = "\n</tool_call>";
    break;
  case ToolCallFormat::llama3_json:
    break;
  case ToolCallFormat::mistral:
    open = "[TOOL_CALLS][";
    close = "]";
    break;
  case ToolCallFormat::deepseek_v3: {
    check(allowed.size() == 1, ErrorKind::unsupported, "tool_choice",
          "deepseek_v3 writes the function's name outside its JSON, so a required call must name "
          "one function when several tools are given");
    ToolCallConstraint c;
    c.prefix = std::string(kDsCallsBegin) + std::string(kDsCallBegin) + "function" +
               std::string(kDsSep) + (*allowed[0])["function"]["name"].get<std::string>() +
               "\n```json\n";
    c.schema = parameters(*allowed[0]);
    c.suffix = "\n```" + std::string(kDsCallEnd) + std::string(kDsCallsEnd);
    return c;
  }
  }
  ToolCallConstraint c;
  if (allowed.size() == 1) {
    // The name is fixed: only the arguments are free.
    c.prefix = open + "{\"name\": " + quoted((*allowed[0])["function"]["name"].get<std::string>()) +
               ", \"" + args_key + "\": ";
    c.schema = parameters(*allowed[0]);
    c.suffix = "}" + close;
    return c;
  }
  json any = json::array();
  for (const json* t : allowed)
    any.push_back({{"type", "object"},
                   {"properties",
                    {{"name", {{"const", (*t)["function"]["name"]}}}, {args_key, parameters(*t)}}},
                   {"required", json::array({"name", args_key})},
                   {"additionalProperties", false}});
  c.prefix = open;
  c.schema = {{"anyOf", any}};
  c.suffix = close;
  return c;
}

} // namespace tpullm::runtime
