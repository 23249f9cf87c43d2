#pragma once
/// What a chat does when its conversation no longer fits the compiled sequence length: refuse
/// the turn (the default), or drop whole turns from the middle of the conversation (after the
/// leading system messages, before the last turn) until the rendered prompt leaves room for the
/// answer. Truncation happens on message boundaries and through the chat template: the kept
/// messages are rendered again, so the prompt is what the template makes of them, and the
/// prompt cache re-feeds it from the first token that changed (prefill_kv onto the kept prefix).

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpullm::runtime {

/// See the file comment. The spelling of the options: "refuse", "truncate-middle".
enum class ContextOverflow : std::uint8_t { refuse, truncate_middle };

/// The policy spelled `s` ("refuse" or "truncate-middle"); Error(invalid_input) naming `where`
/// (the option) otherwise.
ContextOverflow parse_context_overflow(std::string_view s, std::string_view where);
/// The option's spelling of `p`.
const char* to_string(ContextOverflow p);

/// The answer tokens truncate-middle makes room for: `max_new_tokens` (the answer's budget),
/// at most half of `seq_length`, at least 1.
std::int64_t overflow_answer_room(std::int64_t seq_length, std::int64_t max_new_tokens);

/// What truncate_middle() kept and dropped.
struct Truncation {
  nlohmann::ordered_json messages;   ///< the kept messages, in order
  std::vector<std::int32_t> prompt;  ///< their rendered prompt (size <= the limit)
  std::int64_t dropped_messages = 0; ///< messages left out
  std::int64_t dropped_tokens = 0;   ///< prompt tokens before less prompt tokens after
};

/// Renders a list of messages into prompt token ids (a chat template and a tokenizer).
using RenderMessages = std::function<std::vector<std::int32_t>(const nlohmann::ordered_json&)>;

/// The fewest oldest turns of `messages` (a JSON array of {role, ...}) left out so that
/// `render(kept)` has at most `limit` tokens. A turn is a user message and every message after
/// it up to the next user message (assistant answers, tool calls and their results stay with
/// the question they answer); messages before the first user message that are not system or
/// developer messages form a turn of their own. Never dropped: the leading system / developer
/// messages and the last turn. Nothing is dropped when the whole list fits. Throws
/// Error(invalid_input) when even the kept minimum takes more than `limit` tokens, naming both
/// figures; the render's own errors pass through. `prompt` is render(messages), which the
/// caller has already made; the bisection renders O(log turns) more times.
Truncation truncate_middle(const nlohmann::ordered_json& messages, std::vector<std::int32_t> prompt,
                           std::int64_t limit, const RenderMessages& render);

/// The truncate-middle policy of one answer: nullopt when `prompt` (render(messages)) leaves
/// overflow_answer_room(seq_length, answer_budget) positions for the answer, else
/// truncate_middle() to seq_length less that room. What Conversation and `tpullm serve` apply.
std::optional<Truncation> truncate_to_fit(const nlohmann::ordered_json& messages,
                                          const std::vector<std::int32_t>& prompt,
                                          std::int64_t seq_length, std::int64_t answer_budget,
                                          const RenderMessages& render);

} // namespace tpullm::runtime
