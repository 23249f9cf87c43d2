#pragma once
/// The one way the project parses JSON text (requests, messages files, config.json,
/// tokenizer.json, tokenizer_config.json, calibration tables, targets, safetensors headers):
/// the nesting depth is checked by a linear scan before nlohmann builds anything, so a document
/// nested hundreds of thousands deep is a one-line Error instead of a stack overflow, and every
/// nlohmann exception becomes Error(invalid_input) naming the file or option.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tpullm {

/// Deepest nesting of arrays and objects accepted in any JSON the project reads (`[[1]]` is 2).
inline constexpr std::size_t kMaxJsonDepth = 256;

/// Throws Error(invalid_input, where, "JSON nested deeper than 256 levels (at byte N)") when
/// the arrays / objects of `text` nest deeper than kMaxJsonDepth. Brackets inside strings do
/// not count; the scan is linear and allocates nothing. Syntax is not checked here.
void check_json_depth(std::string_view text, const std::string& where);

/// Parses `text` after check_json_depth. A syntax error is Error(invalid_input, where,
/// "<what>: <nlohmann's reason>"). `callback` (may be empty) is nlohmann's parser callback.
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          std::string_view what = "invalid JSON",
                          const nlohmann::json::parser_callback_t& callback = nullptr);

/// Same, into an insertion-ordered value (Python dict order: messages, template kwargs).
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where,
                                          std::string_view what = "invalid JSON");

} // namespace tpullm
