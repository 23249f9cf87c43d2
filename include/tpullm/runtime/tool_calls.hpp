#pragma once
/// Tool calls in a model's answer: which format a model family writes them in (decided from its
/// chat template, else its architecture), a parser of a finished answer into text content and
/// OpenAI-style calls, an incremental parser for streaming (the finished-answer parser is this
/// one fed the whole text, so both always agree), and the constraint that forces a call
/// (docs/serve.md "Tool calls").

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpullm::runtime {

/// How a model family writes tool calls in its answer.
enum class ToolCallFormat {
  /// Qwen 2.5 / Qwen3 (Hermes): `<tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>`,
  /// one block per call, anywhere in the answer.
  qwen_hermes,
  /// Llama 3.1+: the whole answer is `{"name": N, "parameters": {...}}` (several separated by
  /// `;`), optionally after `<|python_tag|>`.
  llama3_json,
  /// Mistral: `[TOOL_CALLS][{"name": N, "arguments": {...}}, ...]` to the end of the answer (or
  /// the answer starting with `[{` when the `[TOOL_CALLS]` control token was not decoded), or
  /// the newer `[TOOL_CALLS]N[ARGS]{...}` per call.
  mistral,
  /// DeepSeek-V3: `<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function
  /// <｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>`, then `<｜tool▁calls▁end｜>`.
  deepseek_v3,
};

/// The format's name as docs/serve.md spells it ("qwen_hermes", ...).
std::string_view tool_call_format_name(ToolCallFormat f);

/// The format of a model whose chat template has source `template_source` and whose
/// architecture (config.json model_type family: "qwen2", "llama", ...) is `architecture`.
/// The template decides by the markers it writes: `<tool_call>` is qwen_hermes,
/// `tool▁calls▁begin` deepseek_v3, `[TOOL_CALLS]` mistral, `<|python_tag|>` or an `ipython`
/// header llama3_json. A template that mentions `tools` but none of these falls back on the
/// architecture (qwen2 / qwen3 / qwen2_moe / qwen3_moe: qwen_hermes; llama: llama3_json;
/// mistral / mixtral: mistral; deepseek_v3: deepseek_v3). Anything else throws
/// Error(unsupported, "tool calls", "the chat template of this model has no known tool-call
/// format").
ToolCallFormat detect_tool_call_format(std::string_view template_source,
                                       std::string_view architecture);

/// One call: OpenAI's tool_calls[i] (type "function").
struct ToolCall {
  std::string id;        ///< "<id prefix><index>"
  std::string name;      ///< function.name
  std::string arguments; ///< function.arguments: a JSON object as compact JSON text
};

/// A finished answer split into text and calls.
struct ParsedAnswer {
  std::string content;              ///< the text outside the calls
  std::vector<ToolCall> tool_calls; ///< in the order written
};

/// What the incremental parser has to say after some text: content to show, or a whole call.
struct ToolCallEvent {
  bool is_call = false;  ///< else content
  std::string content;   ///< !is_call: text to show
  ToolCall call;         ///< is_call: the call
  std::size_t index = 0; ///< is_call: its position among the answer's calls
};

/// Splits an answer into content and calls as it is generated. Text that may be the start of a
/// call marker, and whitespace that may precede one, is held back until it is known; a call is
/// reported whole once its end marker (or the end of the answer, for formats whose calls run to
/// the end) is seen. A call whose text does not parse (not JSON, no name, arguments not an
/// object) is not refused: its text, markers and the whitespace around it included, stays
/// content. Whitespace between content and a call, and between calls, is dropped.
class ToolCallParser {
public:
  /// `id_prefix`: calls get ids id_prefix + "0", "1", ...
  explicit ToolCallParser(ToolCallFormat format, std::string id_prefix = "call_");
  /// Feeds the next piece of answer text; returns what became known.
  std::vector<ToolCallEvent> feed(std::string_view piece);
  /// The answer ended: returns what was held back (an unfinished call is parsed as it is, and
  /// stays content if it does not parse).
  std::vector<ToolCallEvent> finish();

private:
  void scan(std::vector<ToolCallEvent>& out, bool at_end);
  bool close_call(std::vector<ToolCallEvent>& out, std::string_view body);
  void content(std::vector<ToolCallEvent>& out, std::string text);

  ToolCallFormat format_;
  std::string id_prefix_;
  std::string pending_;      ///< text not yet reported
  bool in_call_ = false;     ///< pending_ is inside a call block (after its start marker)
  std::size_t searched_ = 0; ///< in a call: pending_ before this holds no end marker
  std::string call_start_;   ///< in a call: the marker and the whitespace dropped before it
  bool answer_start_ = true; ///< nothing but whitespace was seen yet
  bool after_call_ = false;  ///< whitespace after a call is dropped
  std::size_t calls_ = 0;    ///< calls reported
};

/// A finished answer parsed: ToolCallParser fed the whole text, its events collected.
ParsedAnswer parse_tool_calls(ToolCallFormat format, std::string_view text,
                              const std::string& id_prefix = "call_");

/// What a forced call must look like: the answer is `prefix`, then JSON text valid against
/// `schema`, then `suffix` (what grammar::wrap(prefix, grammar_from_json_schema(schema), suffix)
/// constrains generation to). The schema is the called function's `parameters` for a format
/// whose name sits in the prefix, else an object {name: const, arguments: parameters} (anyOf
/// over the tools when several may be called).
struct ToolCallConstraint {
  std::string prefix;            ///< literal text before the JSON
  nlohmann::ordered_json schema; ///< JSON schema of the JSON text
  std::string suffix;            ///< literal text after it
};

/// The constraint for `tools` (OpenAI's array of {type: "function", function: {name,
/// parameters?}}) when the call must be to `name` ("" = to any of the tools: tool_choice
/// "required"). A function without parameters takes {"type": "object"}. Throws
/// Error(invalid_input) when `name` is not among the tools or there are none.
ToolCallConstraint tool_call_constraint(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                        const std::string& name);

} // namespace tpullm::runtime
