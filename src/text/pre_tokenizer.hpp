#pragma once
// Pre-tokenizers of tokenizer.json: Split (regex or literal, every HF delimiter behaviour,
// invert), ByteLevel (add_prefix_space, use_regex) and Sequence (flattened into steps).
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "json_fields.hpp"

namespace tpullm::text::detail {

/// How Split treats the delimiters it finds (HF's SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

/// Split: cuts each piece at the matches of `pattern` (or, inverted, at what lies between them).
struct SplitStep {
  Pattern pattern;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
};
/// ByteLevel: optional prefix space, optional GPT-2 regex split, then each byte as its
/// byte-level character.
struct ByteLevelStep {
  bool add_prefix_space = false;
  std::shared_ptr<const Regex> regex; ///< the GPT-2 split pattern when use_regex, else null
};

/// A pre-tokenizer: its steps in order; no steps = the whole text is one piece.
struct PreTokenizer {
  std::vector<std::variant<SplitStep, ByteLevelStep>> steps;
  /// Splits `text` into the pieces the model encodes (empty pieces dropped).
  std::vector<std::string> apply(std::string_view text) const;
};

/// Parses tokenizer.json's "pre_tokenizer" (null = none); unknown types are Error(unsupported).
PreTokenizer parse_pre_tokenizer(const json& j);

/// The GPT-2 pre-tokenization regex (ByteLevel with use_regex).
std::shared_ptr<const Regex> gpt2_regex();

} // namespace tpullm::text::detail
