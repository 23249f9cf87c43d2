// text::StreamDecoder: decode of a sliding window of ids (one emitted chunk of context, so the
// decoder's first-token rules such as SentencePiece's leading-space strip apply to the real first
// token only), holding text back while it ends in U+FFFD.
#include "tpullm/text/stream_decoder.hpp"

#include <span>

#include "unicode.hpp"

namespace tpullm::text {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(&tok), skip_(skip_special_tokens) {}

std::string StreamDecoder::push(std::int32_t id) {
  ids_.push_back(id);
  return delta(false);
}

std::string StreamDecoder::delta(bool final) {
  const std::span<const std::int32_t> all(ids_);
  const std::string text = tok_->decode(all.subspan(prefix_), skip_);
  const bool extends = text.size() >= shown_.size() && text.compare(0, shown_.size(), shown_) == 0;
  const bool incomplete =
      text.size() >= detail::kReplacementChar.size() &&
      text.compare(text.size() - detail::kReplacementChar.size(), detail::kReplacementChar.size(),
                   detail::kReplacementChar) == 0;
  if (!final && (!extends || incomplete))
    return "";
  // (A final decode that rewrote shown text emits only what lies past its length.)
  std::string out = text.size() > shown_.size() ? text.substr(shown_.size()) : std::string();
  prefix_ = read_;
  read_ = ids_.size();
  shown_ = tok_->decode(all.subspan(prefix_, read_ - prefix_), skip_);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = read_ < ids_.size() ? delta(true) : std::string();
  ids_.clear();
  prefix_ = read_ = 0;
  shown_.clear();
  return out;
}

} // namespace tpullm::text
