#pragma once
/// Streaming detokenization: text as token ids arrive, never a partial UTF-8 character.

#include <cstdint>
#include <string>
#include <vector>

#include "tpullm/text/tokenizer.hpp"

namespace tpullm::text {

/// Turns a stream of ids into text deltas whose concatenation (with finish()) equals
/// tokenizer.decode(all ids). After each id the delta is decode(ids so far) minus what was already
/// shown; it is held back (returns "") while the decoded prefix ends in U+FFFD (an incomplete
/// UTF-8 sequence from byte-level pieces or <0xNN> byte-fallback tokens). The tokenizer must
/// outlive the decoder.
class StreamDecoder {
public:
  /// A decoder over `tok`; skip_special_tokens as in Tokenizer::decode.
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = false);
  /// Appends one id; returns the text that is now complete ("" while held back).
  std::string push(std::int32_t id);
  /// Returns whatever is held back (the rest of decode(all ids)) and starts over.
  std::string finish();

private:
  std::string delta(bool final);

  const Tokenizer* tok_;
  bool skip_;
  std::vector<std::int32_t> ids_;
  std::size_t prefix_ = 0; ///< ids before this index are the context of the next decode
  std::size_t read_ = 0;   ///< ids before this index have been shown
  std::string shown_;      ///< decode(ids_[prefix_, read_)), already shown past its context
};

} // namespace tpullm::text
