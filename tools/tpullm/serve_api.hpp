#pragma once
// The OpenAI API shapes `tpullm serve` speaks: requests of /v1/chat/completions and
// /v1/completions parsed and checked into a GenerationRequest, and the JSON it answers with
// (completion objects, stream chunks, error objects).
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tpullm/runtime/logprobs.hpp"
#include "tpullm/runtime/sampler.hpp"
#include "tpullm/runtime/tool_calls.hpp"

namespace tpullm::text {
class Tokenizer;
}
namespace tpullm::grammar {
class Grammar;
}

namespace tpullm::cli::serve {

/// A request refused before it reaches the model: the HTTP status and OpenAI's error fields.
struct ApiError {
  int status = 400;                           ///< HTTP status
  std::string message;                        ///< error.message
  std::string type = "invalid_request_error"; ///< error.type
  std::string param;                          ///< error.param ("" = null)
  std::string code;                           ///< error.code ("" = null)
};

/// The one mapping of library errors to HTTP: runtime::BusyError is 503 (server_error, code
/// queue_full, its message alone), another tpullm::Error of kind invalid_input or unsupported 400
/// (invalid_request_error), anything else 500 (server_error); the message is what() says.
ApiError api_error(const std::exception& e);

/// OpenAI's error object: {"error": {"message", "type", "param", "code"}}.
std::string error_body(const ApiError& e);

/// Limits on what a request may ask for (documented in docs/serve.md).
struct RequestLimits {
  std::size_t max_messages = 1024;       ///< messages per chat request
  std::size_t max_stop = 4;              ///< stop strings (OpenAI's limit)
  std::size_t max_stop_bytes = 256;      ///< bytes of one stop string
  std::size_t max_prompt_ids = 1 << 20;  ///< token ids of a /v1/completions id prompt
  std::size_t max_tools = 128;           ///< tools per request (OpenAI's limit)
  std::size_t max_tool_bytes = 1 << 20;  ///< bytes of the tools array as compact JSON
  std::size_t max_tool_calls = 128;      ///< tool_calls of one assistant message
  std::size_t max_embedding_inputs = 64; ///< inputs of one /v1/embeddings request
};

/// tool_choice: whether and which tool the answer must call.
enum class ToolChoice {
  none,      ///< no call: tools reach the template, the answer is not parsed for calls
  automatic, ///< "auto": the model decides; the answer is parsed for calls
  required,  ///< at least one call (constrained by the grammar of the tools' parameters)
  named,     ///< a call to ToolRequest::name
};

/// A chat request's tools and what it asks of them.
struct ToolRequest {
  nlohmann::ordered_json list;          ///< the checked tools as sent (null = none)
  ToolChoice choice = ToolChoice::none; ///< auto when tools are given and tool_choice is not
  std::string name;                     ///< choice named: the function's name
  bool parallel = true;                 ///< parallel_tool_calls: accepted, never enforced
};

/// What the endpoint asked for, checked: either chat messages (rendered later through the chat
/// template) or a raw prompt (text, or token ids), and how to generate.
struct GenerationRequest {
  bool chat = false;                      ///< /v1/chat/completions
  nlohmann::ordered_json messages;        ///< chat: the messages, each with a string role
  std::optional<std::string> prompt_text; ///< completions: a text prompt
  std::vector<std::int32_t> prompt_ids;   ///< completions: a token-id prompt
  bool stream = false;                    ///< answer as server-sent events
  bool include_usage = false;             ///< stream_options.include_usage
  std::optional<int> max_tokens;          ///< max_tokens / max_completion_tokens
  std::vector<std::string> stop;          ///< stop strings (not part of the answer)
  runtime::SamplingOptions sampling;      ///< temperature, top_p, top_k, seed, penalty
  /// -1: no log probabilities; else each answer token's and this many alternatives (chat:
  /// logprobs true + top_logprobs 0..20; completions: logprobs 0..5).
  int logprobs = -1;
  /// response_format json_object / json_schema: the language of the answer (null: free text).
  std::shared_ptr<const grammar::Grammar> grammar;
  ToolRequest tools; ///< chat: tools, tool_choice, parallel_tool_calls
};

/// Whether the answer to `g` is parsed for tool calls (tools given and tool_choice not none).
bool parses_tool_calls(const GenerationRequest& g);

/// The grammar that makes the answer to `g` a call (tool_choice required or named: the format's
/// prefix, JSON valid against runtime::tool_call_constraint's schema, its suffix); null for auto
/// and none. ApiError 400 (param tool_choice) when the constraint cannot be built, (param
/// response_format) when the request also has a response_format grammar.
std::shared_ptr<const grammar::Grammar> tool_call_grammar(runtime::ToolCallFormat format,
                                                          const GenerationRequest& g);

/// `messages` with the null content of assistant messages that carry tool_calls replaced by ""
/// (for templates that fail on null content, as Qwen3's does); nullopt when there is none.
std::optional<nlohmann::ordered_json>
with_empty_tool_call_content(const nlohmann::ordered_json& messages);

/// Parses a request body for `chat` (else /v1/completions). `model` is the served model's id:
/// a request naming another gets 404. Sampling fields the request leaves out take `defaults`
/// (generation_config.json's do_sample, temperature, top_k, top_p, repetition_penalty) as
/// `tpullm run` does; without do_sample they stay greedy. Throws ApiError (400, 404).
GenerationRequest parse_request(const std::string& body, bool chat, const std::string& model,
                                const nlohmann::json& defaults, const RequestLimits& limits);

/// Token counts of an answer, as OpenAI's `usage` object.
struct Usage {
  std::int64_t prompt_tokens = 0;     ///< the whole prompt
  std::int64_t completion_tokens = 0; ///< generated tokens (the stop token counts)
  std::int64_t cached_tokens = 0;     ///< prompt tokens found in the slot's KV cache
};

/// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
/// {"cached_tokens"}}.
nlohmann::ordered_json usage_json(const Usage& u);

/// Names shared by the objects of one answer.
struct AnswerIds {
  std::string id;           ///< "chatcmpl-N" / "cmpl-N"
  std::int64_t created = 0; ///< Unix seconds
  std::string model;        ///< the served model's id
  bool chat = false;        ///< chat.completion[.chunk] (else text_completion)
};

/// A choice's `logprobs` object for `lps` (answer tokens in order, runtime/logprobs.hpp). Chat:
/// {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]};
/// completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
/// A token's text is its own decoded text (tok.decode of that id alone, special tokens shown),
/// "bytes" its own bytes (Tokenizer::token_bytes: exact where the text shows U+FFFD for part of
/// a UTF-8 character); a -inf logprob is written -9999.0 (OpenAI's value for a token of
/// zero probability). `text_offset`: bytes of answer text before the first token (completions
/// offsets add each token's text length to it).
nlohmann::ordered_json logprobs_json(bool chat, std::span<const runtime::TokenLogprobs> lps,
                                     const text::Tokenizer& tok, std::int64_t text_offset = 0);

/// The whole answer of a non-streaming request: a chat.completion or text_completion object.
/// `calls`: a chat answer's tool calls (message.tool_calls; content null when `text` is empty;
/// finish_reason "tool_calls"). `logprobs` (null when not asked for) is the choice's logprobs
/// object (logprobs_json).
std::string completion_body(const AnswerIds& ids, const std::string& text,
                            const std::string& finish_reason, const Usage& u,
                            const std::vector<runtime::ToolCall>* calls = nullptr,
                            const nlohmann::ordered_json& logprobs = nullptr);
/// One stream chunk's JSON (without the "data: " framing). `role`: the first chat chunk carries
/// delta.role; `finish_reason` "" = null; `usage`: the last chunk with include_usage (choices
/// empty).
/// `logprobs`: the chunk's tokens' logprobs object (logprobs_json; null when not asked for).
std::string chunk_json(const AnswerIds& ids, const std::string& text, bool role,
                       const std::string& finish_reason, const Usage* usage = nullptr,
                       const nlohmann::ordered_json& logprobs = nullptr);
/// The two chunks of one tool call, as OpenAI streams them: delta.tool_calls [{index, id,
/// type, function: {name, arguments: ""}}], then [{index, function: {arguments}}].
std::vector<std::string> tool_call_chunks(const AnswerIds& ids, std::size_t index,
                                          const runtime::ToolCall& call);

/// A /v1/embeddings request, checked: one input per vector, each either text or token ids.
struct EmbeddingsRequest {
  /// The inputs in order: text (tokenized later) or token ids (checked against the vocabulary
  /// later); exactly one of the two is set per input.
  struct Input {
    std::optional<std::string> text; ///< a text input (not empty)
    std::vector<std::int32_t> ids;   ///< a token-id input (not empty)
  };
  std::vector<Input> inputs;              ///< 1..max_embedding_inputs of them
  bool base64 = false;                    ///< encoding_format "base64" (else "float")
  std::optional<std::int64_t> dimensions; ///< as sent (the caller refuses one that is not H)
};

/// Parses a /v1/embeddings body: `input` a string, an array of strings, an array of token ids
/// or an array of arrays of token ids (at most limits.max_embedding_inputs inputs, each not
/// empty, limits.max_prompt_ids ids in all), `model` (404 when it names another), optional
/// `encoding_format` ("float" or "base64"), `dimensions` (a positive integer) and `user`
/// (ignored). Throws ApiError (400 naming the param, 404).
EmbeddingsRequest parse_embeddings_request(const std::string& body, const std::string& model,
                                           const RequestLimits& limits);

/// The standard base64 (RFC 4648, padded) of `bytes`.
std::string base64_encode(std::span<const std::byte> bytes);

/// OpenAI's answer to /v1/embeddings: {"object": "list", "data": [{"object": "embedding",
/// "index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}; each embedding
/// an array of numbers, or with `base64` the base64 of its float32 little-endian bytes.
std::string embeddings_body(const std::string& model, std::span<const std::vector<float>> vectors,
                            bool base64, std::int64_t prompt_tokens);

} // namespace tpullm::cli::serve
