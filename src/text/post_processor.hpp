#pragma once
// Post-processors of tokenizer.json: ByteLevel (offsets only: ids unchanged), TemplateProcessing
// (its "single" template) and Sequence. Applied only with add_special_tokens.
#include <cstdint>
#include <vector>

#include "json_fields.hpp"

namespace tpullm::text::detail {

/// The single-sequence template: special ids before and after the sequence, in order.
struct PostProcessor {
  std::vector<std::int32_t> before, after;
  /// `ids` wrapped in the template's special tokens.
  void apply(std::vector<std::int32_t>& ids) const;
};

/// Parses tokenizer.json's "post_processor" (null = none); unknown types are
/// Error(unsupported).
PostProcessor parse_post_processor(const json& j);

} // namespace tpullm::text::detail
