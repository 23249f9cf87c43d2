// Generation: stop ids, stop strings with hold-back, the streaming detokenizer and the budget of
// one answer (generation.hpp).
#include "tpullm/runtime/generation.hpp"

#include <algorithm>

#include <limits>

#include "tpullm/grammar/grammar.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/text/stream_decoder.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::runtime {

std::string_view to_string(StopReason r) noexcept {
  switch (r) {
  case StopReason::eos:
    return "eos";
  case StopReason::stop_string:
    return "stop string";
  case StopReason::token_budget:
    return "token budget";
  case StopReason::sequence_end:
    return "sequence end";
  }
  return "unknown";
}

std::string_view finish_reason(StopReason r) noexcept {
  return r == StopReason::eos || r == StopReason::stop_string ? "stop" : "length";
}

void StopCriteria::validate() const {
  tpullm::check(max_new_tokens >= 1, ErrorKind::invalid_input, "stop criteria", "max_new_tokens ",
                max_new_tokens, " must be >= 1");
  for (const auto& s : stop_strings)
    tpullm::check(!s.empty(), ErrorKind::invalid_input, "stop criteria",
                  "a stop string must not be empty");
}

bool StopCriteria::is_eos(std::int32_t token) const {
  return std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
}

std::size_t stop_prefix_length(std::string_view text, std::span<const std::string> stops) {
  std::size_t best = 0;
  for (const auto& s : stops)
    for (std::size_t n = std::min(s.size() - 1, text.size()); n > best; --n)
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        best = n;
        break;
      }
  return best;
}

Generation::Generation(const GenerateOptions& options, const text::Tokenizer* tok,
                       std::span<const std::int32_t> context)
    : options_(options), sampler_(options.sampling), context_(context.begin(), context.end()) {
  options_.stop.validate();
  options_.speculation.validate();
  check(options_.logprobs >= -1 && options_.logprobs <= kMaxTopLogprobs, ErrorKind::invalid_input,
        "logprobs", "top_logprobs ", options_.logprobs, " is outside [0, ", kMaxTopLogprobs, "]");
  check(tok != nullptr || options_.stop.stop_strings.empty(), ErrorKind::invalid_input,
        "stop strings", "need a text answer (a tokenizer); token ids alone cannot match them");
  check(tok != nullptr || !options_.grammar, ErrorKind::invalid_input, "grammar",
        "needs a tokenizer (the tokens' bytes)");
  if (tok)
    decoder_ = std::make_unique<text::StreamDecoder>(*tok, true);
  if (options_.grammar)
    matcher_ = std::make_unique<grammar::Matcher>(options_.grammar, tok->token_table());
  for (const auto& s : options_.stop.stop_strings)
    longest_stop_ = std::max(longest_stop_, s.size());
}

Generation::~Generation() = default;
Generation::Generation(Generation&&) noexcept = default;
Generation& Generation::operator=(Generation&&) noexcept = default;

GenerationStep Generation::step(std::span<const float> logits, std::int64_t length,
                                std::int64_t seq_length) {
  check(!done(), ErrorKind::internal, "generation", "a token was asked for after the answer ended");
  const auto take = [&](std::int32_t token) {
    // Log probabilities of the raw row (logprobs.hpp), whatever the grammar masks.
    std::optional<TokenLogprobs> lp;
    if (options_.logprobs >= 0)
      lp = token_logprobs(logits, token, options_.logprobs);
    GenerationStep out = accept(token, length, seq_length);
    out.logprobs = std::move(lp);
    return out;
  };
  if (!matcher_)
    return take(sampler_.sample(logits, context_));
  // Tokens that would leave the language get -inf; eos only where the grammar may end, and
  // nothing else once it is complete.
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  const std::size_t n = logits.size();
  masked_.resize(n);
  bool any = false;
  if (!matcher_->is_complete()) {
    matcher_->fill_mask(allowed_);
    // One pass over 64-token words: whole words copied or cleared (a string's state allows
    // nearly every token, a structural one nearly none), mixed words bit by bit.
    const float* in = logits.data();
    float* out = masked_.data();
    for (std::size_t w = 0; w * 64 < n; ++w) {
      const std::size_t base = w * 64, len = std::min<std::size_t>(64, n - base);
      // Bits of ids past the row (a tokenizer larger than the model's vocabulary) are dropped,
      // so `any` never counts a token the row cannot hold.
      const std::uint64_t keep = len == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << len) - 1;
      const std::uint64_t bits = (w < allowed_.size() ? allowed_[w] : 0) & keep;
      if (bits == 0) {
        std::fill(out + base, out + base + len, kNone);
        continue;
      }
      any = true;
      if (bits == keep) {
        std::copy(in + base, in + base + len, out + base);
        continue;
      }
      for (std::size_t j = 0; j < len; ++j)
        out[base + j] = (bits >> j) & 1 ? in[base + j] : kNone;
    }
  } else {
    std::fill(masked_.begin(), masked_.end(), kNone);
  }
  if (matcher_->can_end())
    for (const std::int32_t e : options_.stop.eos_ids)
      if (e >= 0 && static_cast<std::size_t>(e) < logits.size()) {
        masked_[static_cast<std::size_t>(e)] = logits[static_cast<std::size_t>(e)];
        any = true;
      }
  check(any, ErrorKind::invalid_input, "grammar",
        "no token of the vocabulary continues the answer in the grammar's language");
  return take(sampler_.sample(masked_, context_));
}

GenerationStep Generation::accept(std::int32_t token, std::int64_t length,
                                  std::int64_t seq_length) {
  check(!done(), ErrorKind::internal, "generation", "a token was given after the answer ended");
  if (matcher_) {
    const bool eos = options_.stop.is_eos(token);
    check(eos ? matcher_->can_end() : matcher_->accept_token(token), ErrorKind::invalid_input,
          "grammar", "token ", token,
          eos ? " (eos) ends the answer where the grammar cannot end"
              : " leaves the grammar's language");
  }
  GenerationStep out;
  out.token = token;
  tokens_.push_back(token);
  context_.push_back(token);
  std::optional<StopReason> why;
  if (options_.stop.is_eos(token)) {
    why = StopReason::eos; // the stop token is not part of the answer
  } else {
    if (decoder_)
      text_ += decoder_->push(token);
    if (matcher_ && options_.stop.eos_ids.empty() && matcher_->is_complete())
      why = StopReason::eos; // nothing can follow and no eos id can say so
    else if (generated() >= options_.stop.max_new_tokens)
      why = StopReason::token_budget;
    else if (length >= seq_length)
      why = StopReason::sequence_end; // the token cannot be fed
  }
  if (decoder_) {
    if (why)
      text_ += decoder_->finish();
    // A stop string ends the answer before it: searched from where one could begin that was not
    // decided yet (the emitted text holds none).
    const auto& stops = options_.stop.stop_strings;
    const std::size_t from = sent_ > longest_stop_ ? sent_ - longest_stop_ : 0;
    std::size_t cut = std::string::npos;
    for (const auto& s : stops)
      cut = std::min(cut, text_.find(s, from));
    if (cut != std::string::npos) {
      text_.resize(cut);
      why = StopReason::stop_string;
    }
    std::size_t safe = text_.size();
    if (!why) {
      safe -= stop_prefix_length(text_, stops);
      while (safe > sent_ && (static_cast<unsigned char>(text_[safe]) & 0xC0) == 0x80)
        --safe; // never split a character
    }
    if (safe > sent_) {
      out.text = text_.substr(sent_, safe - sent_);
      sent_ = safe;
    }
  }
  stop_ = why;
  out.stop = why;
  return out;
}

} // namespace tpullm::runtime
