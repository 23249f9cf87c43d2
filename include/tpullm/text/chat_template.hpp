#pragma once
/// Chat templates: the `chat_template` of a tokenizer_config.json (a Jinja template) rendered as
/// HF transformers' `apply_chat_template` renders it (Jinja2 with trim_blocks, lstrip_blocks,
/// loop controls, `tojson` = Python `json.dumps(ensure_ascii=False)`, `raise_exception`,
/// `strftime_now`). The engine is a Jinja subset (docs/chat_templates.md says which); anything
/// outside it is refused with the construct's name and its line, never approximated.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tpullm/support/error.hpp"

namespace tpullm::text {

namespace jinja {
struct Template;
}

/// The bounds of one render (docs/guarantees.md "Chat templates"). A render that exceeds one
/// fails with Error(invalid_input, "chat template line N", ...) naming the bound; a cancelled
/// one throws RenderCancelled.
struct RenderLimits {
  /// Statements and expressions evaluated (real templates take thousands).
  std::int64_t max_steps = 2'000'000;
  /// Bytes of values the render builds in all, whether kept or not: every string, list and dict
  /// it creates or copies (32 bytes per item plus string bytes), the output included. The budget
  /// is this plus 16 times the size of the context, so a long conversation can be rendered.
  std::uint64_t max_work_bytes = std::uint64_t{64} << 20;
  /// When non-null, checked at every step: once it reads true the render stops (serve passes its
  /// shutdown flag, so a render never delays shutdown by more than one step).
  const std::atomic<bool>* cancel = nullptr;
};

/// Thrown by a render whose RenderLimits::cancel was set (kind invalid_input).
class RenderCancelled : public Error {
public:
  RenderCancelled()
      : Error(ErrorKind::invalid_input, "chat template", "the render was cancelled") {}
};

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
  std::string render(const nlohmann::json& context, const RenderLimits& limits = {}) const;
  /// Same, over an insertion-ordered context: `tojson` and `items` keep its key order, as Python
  /// dicts do in transformers.
  std::string render(const nlohmann::ordered_json& context, const RenderLimits& limits = {}) const;

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
