#pragma once
/// Chat templates: the `chat_template` of a tokenizer_config.json (a Jinja template) rendered as
/// HF transformers' `apply_chat_template` renders it (Jinja2 with trim_blocks, lstrip_blocks,
/// loop controls, `tojson` = Python `json.dumps(ensure_ascii=False)`, `raise_exception`,
/// `strftime_now`). The engine is a Jinja subset (docs/chat_templates.md says which); anything
/// outside it is refused with the construct's name and its line, never approximated.
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace tpullm::text {

namespace jinja {
struct Template;
}

/// A parsed chat template (Jinja subset). Parsing fails with Error(ErrorKind::unsupported /
/// invalid_input) naming the construct and its line.
class ChatTemplate {
public:
  /// Parses `source` (the template text). Throws tpullm::Error on a malformed or unsupported one.
  static ChatTemplate parse(std::string source);

  /// Renders with `context` as the template's globals (an object: messages, tools,
  /// add_generation_prompt, bos_token, eos_token, ... plus any extra kwargs such as
  /// enable_thinking). nlohmann::json objects are key-sorted, so `tojson` of them prints the keys
  /// sorted; pass an ordered_json (the overload below) to keep the caller's key order.
  /// Throws tpullm::Error when the template raises (raise_exception) or fails at render time.
  std::string render(const nlohmann::json& context) const;
  /// Same, over an insertion-ordered context: `tojson` and `items` keep its key order, as Python
  /// dicts do in transformers.
  std::string render(const nlohmann::ordered_json& context) const;

  /// The context transformers builds: {"messages": messages, "tools": tools, "documents": null,
  /// "add_generation_prompt": agp, plus special tokens (bos_token, eos_token, pad_token,
  /// unk_token, ... when non-empty), plus kwargs (an object or null) merged on top}. `tools` is
  /// kept even when null, as transformers passes `tools=None` (so `tools is not none` is false).
  static nlohmann::json make_context(const nlohmann::json& messages, const nlohmann::json& tools,
                                     bool add_generation_prompt,
                                     const std::map<std::string, std::string>& special_tokens,
                                     const nlohmann::json& kwargs);
  /// Same, insertion-ordered (use it with the ordered render).
  static nlohmann::ordered_json
  make_context(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
               bool add_generation_prompt, const std::map<std::string, std::string>& special_tokens,
               const nlohmann::ordered_json& kwargs);

  /// The template text as given to parse().
  const std::string& source() const;

private:
  std::shared_ptr<const jinja::Template> impl_;
};

} // namespace tpullm::text
