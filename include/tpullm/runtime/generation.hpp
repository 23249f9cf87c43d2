#pragma once
/// One answer, step by step: the rules that end it and the text it streams, in one object that
/// `tpullm run`, `tpullm chat`, `tpullm serve` and the C++ API (Session::generate,
/// PromptCache::generate, Conversation) all use.
///
/// Feed a Generation each token chosen (step() samples it from a logits row with the
/// Generation's own Sampler; accept() takes one chosen elsewhere) and it returns the answer text
/// that this token decided, and, when the answer ended with it, why. The rules, checked after
/// each token, in this order:
///   - eos: the token is one of the stop ids (it is not part of the answer text);
///   - stop string: the answer text contains one of the stop strings; the answer ends before the
///     first one (the stop string and anything after it are never emitted);
///   - token budget: max_new_tokens tokens were generated;
///   - sequence end: the KV cache is full (the token cannot be fed).
/// A stop string found on the token that also hit the budget or the sequence end reports
/// stop_string. The text is decoded as the tokens arrive (text::StreamDecoder, special tokens
/// skipped): never half a UTF-8 character, and the tail of the text that may be the beginning of
/// a stop string is held back until the next tokens decide it (at the end it is emitted or cut).
/// The concatenation of every step's text is the answer.
///
/// With GenerateOptions::grammar set, the answer stays in the grammar's language
/// (docs/grammar.md): step() sets the logits of the tokens that would leave it to -inf before
/// sampling, allows the eos ids only where the grammar may end, and, once the grammar is complete
/// (no token can extend it), allows only the eos ids; without eos ids the answer then ends at
/// once with StopReason::eos (on the token that completed it). accept() of a token the grammar
/// refuses throws Error(invalid_input). The tokens' bytes come from the tokenizer's own token
/// table (text::Tokenizer::token_table: built on its first use, then shared by every
/// Generation of that tokenizer).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tpullm/runtime/logprobs.hpp"
#include "tpullm/runtime/sampler.hpp"
#include "tpullm/runtime/speculation.hpp"

namespace tpullm::text {
class Tokenizer;
class StreamDecoder;
} // namespace tpullm::text

namespace tpullm::grammar {
class Grammar;
class Matcher;
} // namespace tpullm::grammar

namespace tpullm::runtime {

/// Why an answer ended.
enum class StopReason {
  eos,          ///< the model produced one of StopCriteria::eos_ids
  stop_string,  ///< the answer text reached one of StopCriteria::stop_strings
  token_budget, ///< StopCriteria::max_new_tokens tokens were generated
  sequence_end, ///< the KV cache is full (the compiled sequence length is reached)
};

/// "eos", "stop string", "token budget" or "sequence end".
std::string_view to_string(StopReason r) noexcept;
/// OpenAI's finish_reason of `r`: "stop" (eos, stop string) or "length" (token budget,
/// sequence end).
std::string_view finish_reason(StopReason r) noexcept;

/// When to stop generating.
struct StopCriteria {
  std::vector<std::int32_t> eos_ids;     ///< tokens that end the answer (any order, may be empty)
  int max_new_tokens = 128;              ///< > 0: most tokens generated per answer
  std::vector<std::string> stop_strings; ///< texts that end the answer before them (non-empty)

  /// Throws Error(invalid_input, "stop criteria") when max_new_tokens < 1 or a stop string is
  /// empty.
  void validate() const;
  /// True when `token` is one of eos_ids.
  bool is_eos(std::int32_t token) const;
};

/// How an answer is generated: how tokens are picked and when the answer ends.
struct GenerateOptions {
  SamplingOptions sampling; ///< greedy by default
  StopCriteria stop;        ///< eos ids, stop strings and a token budget (the sequence end always
                            ///< stops)
  /// Log probabilities with each step() (logprobs.hpp): -1 = none; 0..kMaxTopLogprobs = the
  /// chosen token's and this many most likely alternatives. accept() never reports them.
  int logprobs = -1;
  /// The language the answer must stay in (null: free text); needs a tokenizer (see Generation).
  std::shared_ptr<const grammar::Grammar> grammar;
  /// Speculative decoding (speculation.hpp; draft_max 0: off). Session::generate honours it;
  /// the answer is the same either way.
  SpeculationOptions speculation;
};

/// What one Generation step produced.
struct GenerationStep {
  std::int32_t token = 0;         ///< the token chosen
  std::string text;               ///< answer text this token decided ("" while held back)
  std::optional<StopReason> stop; ///< set when the answer ended with this token
  /// The token's log probability and top alternatives (step() with GenerateOptions::logprobs
  /// >= 0; the raw logits row's log-softmax, logprobs.hpp).
  std::optional<TokenLogprobs> logprobs;
};

/// Length of the longest suffix of `text` that is a proper prefix of one of `stops`: the bytes a
/// stream holds back until the next text decides whether a stop string begins there.
std::size_t stop_prefix_length(std::string_view text, std::span<const std::string> stops);

/// See the file comment. One answer per object; not thread-safe.
class Generation {
public:
  /// Validates `options` (Error(invalid_input) for logprobs outside [-1, kMaxTopLogprobs]) and
  /// seeds the sampler. `tok` decodes the answer into text (null: ids only; stop strings and a
  /// grammar are then refused with Error(invalid_input)); it must outlive the Generation.
  /// `context`: the conversation's tokens before the answer (the whole prompt, cached
  /// part included), the repetition penalty's context.
  Generation(const GenerateOptions& options, const text::Tokenizer* tok,
             std::span<const std::int32_t> context);
  ~Generation();
  Generation(Generation&&) noexcept;
  Generation& operator=(Generation&&) noexcept;

  /// Samples the next token from `logits` ([vocab], the row of the last token fed) and accepts it.
  GenerationStep step(std::span<const float> logits, std::int64_t length, std::int64_t seq_length);
  /// Takes `token` as the next answer token while the KV cache holds `length` tokens (`token`
  /// not yet fed) of `seq_length` positions, and applies the rules of the file comment. Throws
  /// Error(internal) once the answer has ended.
  GenerationStep accept(std::int32_t token, std::int64_t length, std::int64_t seq_length);

  /// True once a step ended the answer.
  bool done() const { return stop_.has_value(); }
  /// Why the answer ended (nullopt while it goes on).
  std::optional<StopReason> stop_reason() const { return stop_; }
  /// The tokens generated so far (the stop token included).
  const std::vector<std::int32_t>& tokens() const { return tokens_; }
  /// The conversation's tokens before the answer, then the tokens generated so far.
  std::span<const std::int32_t> context() const { return context_; }
  /// Number of tokens generated so far.
  int generated() const { return static_cast<int>(tokens_.size()); }
  /// The answer text emitted so far (the whole answer once done()).
  std::string_view text() const { return std::string_view(text_).substr(0, sent_); }
  /// The options it was built with.
  const GenerateOptions& options() const { return options_; }

private:
  GenerateOptions options_;
  Sampler sampler_;
  std::unique_ptr<text::StreamDecoder> decoder_; ///< null: ids only
  std::vector<std::int32_t> context_;            ///< prompt + generated
  std::vector<std::int32_t> tokens_;             ///< generated
  std::string text_;                             ///< decoded answer (held-back tail included)
  std::size_t sent_ = 0;                         ///< bytes of text_ emitted
  std::size_t longest_stop_ = 0;                 ///< bytes of the longest stop string
  std::optional<StopReason> stop_;
  std::unique_ptr<grammar::Matcher> matcher_; ///< null: free text
  std::vector<std::uint64_t> allowed_;        ///< the grammar's token mask of this step
  std::vector<float> masked_;                 ///< the logits with the mask applied
};

} // namespace tpullm::runtime
