#pragma once
/// Text turns over a PromptCache: a chat (messages rendered through the model's chat template,
/// each turn feeding only the tokens the cache does not hold yet: the paper's scenario 2) and
/// raw-text completions, with the answer streamed as text while it is generated.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tpullm/runtime/context_overflow.hpp"
#include "tpullm/runtime/prompt_cache.hpp"
#include "tpullm/text/chat_template.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::runtime {

/// Receives each piece of answer text as soon as it is complete (UTF-8, never a partial
/// character).
using TextSink = std::function<void(std::string_view)>;

/// One answer: its text, its tokens and how the prompt was fed.
struct TurnResult {
  std::string text;                  ///< the answer, stop token and stop string left out
  CachedGenerateResult generated;    ///< tokens, stop reason, timings, tokens reused from the cache
  std::int64_t dropped_messages = 0; ///< earlier messages left out to fit (truncate-middle)
  std::int64_t dropped_tokens = 0;   ///< prompt tokens they took
};

/// The ids that end an answer for a tokenizer and model: generation_config / tokenizer_config
/// eos ids, the model's eos ids, and the end-of-turn tokens of known chat formats that the
/// vocabulary has as special tokens (<|im_end|>, <|eot_id|>, <end_of_turn>, <|end|>,
/// <|return|>, <｜end▁of▁sentence｜>). Sorted, distinct.
std::vector<std::int32_t> stop_ids(const text::Tokenizer& tok,
                                   const std::vector<std::int64_t>& model_eos);

/// The prompt of `messages` (a JSON array of {role, content}): rendered through `tmpl` with the
/// generation prompt, the tokenizer's special-token strings and `tools` / `template_kwargs` as
/// template variables, then tokenized without adding special tokens (the template writes them,
/// as transformers' apply_chat_template(tokenize=True)). What Conversation and `tpullm serve`
/// render; const, so callable from several threads at once. `limits`: the render's bounds and
/// its cancellation flag (text::RenderLimits; `tpullm serve` passes its shutdown flag). Throws
/// the template's and the tokenizer's Error (text::RenderCancelled once `limits.cancel` is set).
std::vector<std::int32_t>
render_chat(const text::Tokenizer& tok, const text::ChatTemplate& tmpl,
            const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools = nullptr,
            const nlohmann::ordered_json& template_kwargs = nlohmann::ordered_json::object(),
            const text::RenderLimits& limits = {});

/// A conversation: the messages so far and the cache that holds their tokens.
class Conversation {
public:
  /// `tmpl` null: the tokenizer has no chat template (say() refuses; complete() works).
  /// `system`: a system message put first ("" = none). `template_kwargs`: extra template
  /// variables (an object, e.g. {"enable_thinking": false}).
  Conversation(PromptCache& cache, const text::Tokenizer& tok, const text::ChatTemplate* tmpl,
               std::string system = {},
               nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object());

  /// The tokens of the conversation so far plus `user` as the next user message, rendered with
  /// the generation prompt (special tokens as the template writes them, none added).
  std::vector<std::int32_t> render_with(const std::string& user) const;
  /// What say() and answer() do when the conversation does not fit (context_overflow.hpp;
  /// default refuse). With truncate_middle, a turn whose prompt would leave fewer than
  /// overflow_answer_room(seq_length, max_new_tokens) tokens for the answer first drops the
  /// fewest oldest turns that make that room; `on_truncate` (may be empty) sees what was dropped
  /// before the answer is generated, and the dropped messages are gone from messages() once the
  /// turn succeeds.
  void set_context_overflow(ContextOverflow policy,
                            std::function<void(const Truncation&)> on_truncate = {}) {
    overflow_ = policy;
    on_truncate_ = std::move(on_truncate);
  }
  /// Adds `user` as a user message, generates the assistant's answer (streamed to `sink`) and
  /// adds it to the messages. The cached prefix of the rendered conversation is not fed again.
  /// Throws Error(invalid_input) when the conversation would not fit the compiled sequence
  /// length (under truncate_middle: when even its last turn alone would not leave the answer's
  /// room); the conversation is then unchanged: reset() to go on.
  TurnResult say(const std::string& user, const GenerateOptions& options, const TextSink& sink);
  /// Generates the assistant's answer to the messages as they are (the last one usually a user
  /// message) and adds it. Same refusals as say().
  TurnResult answer(const GenerateOptions& options, const TextSink& sink);
  /// Replaces the messages (a JSON array of objects with a string "role"; the system message
  /// given to the constructor is not added). The cache is kept: what the new messages share
  /// with it is reused. Throws Error(invalid_input) for anything else.
  void set_messages(nlohmann::ordered_json messages);
  /// The tools the template is told about (an OpenAI-style JSON array, or null for none).
  void set_tools(nlohmann::ordered_json tools);
  /// Generates a continuation of raw `prompt` text (the post-processor's special tokens added,
  /// as HF's add_special_tokens=True), streamed to `sink`; independent of the messages.
  TurnResult complete(const std::string& prompt, const GenerateOptions& options,
                      const TextSink& sink);
  /// Forgets the messages (the system message stays) and the cache.
  void reset();
  /// The messages so far, as the template sees them.
  const nlohmann::ordered_json& messages() const { return messages_; }

private:
  TurnResult run(const std::vector<std::int32_t>& prompt, const GenerateOptions& options,
                 const TextSink& sink);
  std::vector<std::int32_t> render(const nlohmann::ordered_json& messages) const;

  PromptCache& cache_;
  const text::Tokenizer& tok_;
  const text::ChatTemplate* tmpl_;
  std::string system_;
  nlohmann::ordered_json kwargs_;
  nlohmann::ordered_json tools_ = nullptr;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  ContextOverflow overflow_ = ContextOverflow::refuse;
  std::function<void(const Truncation&)> on_truncate_;
};

} // namespace tpullm::runtime
