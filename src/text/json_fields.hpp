#pragma once
// Typed reads of tokenizer.json fields: each failure is one Error naming the file and the field
// path ("tokenizer.json: pre_tokenizer.behavior: expected a string").
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "regex.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::text::detail {

using json = nlohmann::json;

/// std::visit over lambdas.
template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

/// Where tokenizer.json errors point.
inline constexpr std::string_view kFile = "tokenizer.json";

/// Throws Error(invalid_input, "tokenizer.json", path, ": ", what).
[[noreturn]] inline void bad_field(const std::string& path, std::string_view what) {
  throw_error(ErrorKind::invalid_input, std::string(kFile), path, ": ", what);
}

/// The object member `key` of `j` (null when absent).
inline const json& member(const json& j, const char* key) {
  static const json null;
  if (!j.is_object())
    return null;
  const auto it = j.find(key);
  return it == j.end() ? null : *it;
}

/// A required string member.
inline std::string str_field(const json& j, const char* key, const std::string& path) {
  const json& v = member(j, key);
  if (!v.is_string())
    bad_field(path + "." + key, "expected a string");
  return v.get<std::string>();
}

/// An optional bool member (`dflt` when absent or null).
inline bool bool_field(const json& j, const char* key, const std::string& path, bool dflt) {
  const json& v = member(j, key);
  if (v.is_null())
    return dflt;
  if (!v.is_boolean())
    bad_field(path + "." + key, "expected true or false");
  return v.get<bool>();
}

/// The "type" of a pipeline stage object.
inline std::string type_of(const json& j, const std::string& path) {
  if (!j.is_object())
    bad_field(path, "expected an object");
  return str_field(j, "type", path);
}

/// Throws Error(unsupported): "tokenizer.json: <stage> type '<type>' is not supported".
[[noreturn]] inline void unsupported_type(std::string_view stage, const std::string& type) {
  throw_error(ErrorKind::unsupported, std::string(kFile), stage, " type '", type,
              "' is not supported");
}

/// Deepest nesting of "Sequence" stages inside one normalizer, pre_tokenizer, decoder or
/// post_processor (real files nest at most 2).
inline constexpr int kMaxSequenceNesting = 8;
/// Most steps one of those stages may hold in all (real files hold at most 6).
inline constexpr std::size_t kMaxStageSteps = 256;

/// The list `key` of the Sequence `j` at nesting `depth` (1 for the stage itself), checked
/// against kMaxSequenceNesting and kMaxStageSteps (`steps`: steps the stage holds so far).
inline const json& sequence_list(const json& j, const char* key, const std::string& path, int depth,
                                 std::size_t steps) {
  if (depth > kMaxSequenceNesting)
    bad_field(path, "Sequence nested deeper than " + std::to_string(kMaxSequenceNesting));
  const json& list = member(j, key);
  if (!list.is_array())
    bad_field(path + "." + key, "expected a list");
  if (steps + list.size() > kMaxStageSteps)
    bad_field(path + "." + key, "more than " + std::to_string(kMaxStageSteps) + " steps");
  return list;
}

/// A {"String": s} or {"Regex": r} pattern member.
inline Pattern pattern_field(const json& j, const std::string& path) {
  const json& p = member(j, "pattern");
  const std::string where = path + ".pattern";
  if (p.is_object() && p.size() == 1 && member(p, "String").is_string())
    return Pattern{p["String"].get<std::string>(), nullptr};
  if (p.is_object() && p.size() == 1 && member(p, "Regex").is_string())
    return Pattern{{},
                   std::make_shared<const Regex>(p["Regex"].get<std::string>(),
                                                 std::string(kFile) + ": " + where)};
  bad_field(where, "expected {\"String\": ...} or {\"Regex\": ...}");
}

} // namespace tpullm::text::detail
