#pragma once
// Decoders of tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip and Sequence, each a
// step over the list of token strings (HF's decode_chain), joined at the end.
#include <string>
#include <variant>
#include <vector>

#include "json_fields.hpp"

namespace tpullm::text::detail {

/// Byte-level characters back to bytes (a token with other characters keeps its own bytes),
/// then lossy UTF-8.
struct ByteLevelDecode {};
/// Replaces the pattern in each token.
struct ReplaceDecode {
  Pattern pattern;
  std::string content;
};
/// Runs of <0xNN> tokens become their UTF-8 text (one U+FFFD per byte when invalid).
struct ByteFallbackDecode {};
/// All tokens joined into one.
struct FuseDecode {};
/// Removes up to `start` leading and `stop` trailing `content` characters of each token.
struct StripDecode {
  char32_t content = ' ';
  std::size_t start = 0, stop = 0;
};

/// A decoder: its steps in order (a Sequence flattened); none = tokens joined by spaces.
struct Decoder {
  std::vector<
      std::variant<ByteLevelDecode, ReplaceDecode, ByteFallbackDecode, FuseDecode, StripDecode>>
      steps;
  bool present = false;
  /// The text of `tokens`.
  std::string decode(std::vector<std::string> tokens) const;
  /// The bytes one token contributes inside a text: the steps on `token` alone, without the
  /// lossy UTF-8 step and without Strip (Tokenizer::token_bytes).
  std::string raw_bytes(std::string token) const;
};

/// Parses tokenizer.json's "decoder" (null = none); unknown types are Error(unsupported).
Decoder parse_decoder(const json& j);

} // namespace tpullm::text::detail
