#pragma once
// Normalizers of tokenizer.json: NFC, Prepend, Replace and Sequence (flattened into steps).
#include <string>
#include <variant>
#include <vector>

#include "json_fields.hpp"

namespace tpullm::text::detail {

/// Unicode NFC.
struct NfcStep {};
/// Prepends `text` to a non-empty string.
struct PrependStep {
  std::string text;
};
/// Replaces every match of `pattern` with `content`.
struct ReplaceStep {
  Pattern pattern;
  std::string content;
};

/// A normalizer: its steps in order (a Sequence flattened); no steps = none.
struct Normalizer {
  std::vector<std::variant<NfcStep, PrependStep, ReplaceStep>> steps;
  /// `s` normalized.
  std::string apply(std::string s) const;
};

/// `s` with every match of `p` replaced by `content`.
std::string replace_all(const Pattern& p, std::string_view s, const std::string& content);

/// Parses tokenizer.json's "normalizer" (null = none); unknown types are Error(unsupported).
Normalizer parse_normalizer(const json& j);

} // namespace tpullm::text::detail
