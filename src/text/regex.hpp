#pragma once
// The tokenizer's regular expressions: PCRE2 (UTF + UCP, JIT when available) compiling the
// patterns of tokenizer.json verbatim, and a literal-string pattern, behind one interface.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpullm::text::detail {

/// Longest tokenizer.json regex accepted (bytes).
inline constexpr std::size_t kRegexMaxLength = 64 * 1024;
/// Deepest parenthesis nesting of a tokenizer.json regex.
inline constexpr std::uint32_t kRegexMaxNesting = 32;
/// PCRE2 match limit of one match from `pos`: kRegexBaseSteps + kRegexStepsPerByte x the bytes
/// left (the real patterns take about one step per byte of a whitespace run).
inline constexpr std::uint64_t kRegexBaseSteps = 10'000'000;
/// See kRegexBaseSteps.
inline constexpr std::uint64_t kRegexStepsPerByte = 4;
/// PCRE2 heap limit of one match (KiB) when JIT is unavailable.
inline constexpr std::uint32_t kRegexHeapLimitKiB = 256 * 1024;

/// A compiled PCRE2 pattern. Matching is thread-safe (per-thread match data and JIT stack).
class Regex {
public:
  /// Compiles `pattern`; throws Error(invalid_input) naming `where` when PCRE2 rejects it.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  /// Appends the [begin, end) byte ranges of the successive non-overlapping matches in `s`
  /// (valid UTF-8); an empty match advances by one character.
  void find_all(std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

private:
  struct Code;
  std::unique_ptr<Code> code_;
};

/// A tokenizer.json pattern: {"String": s} (a literal) or {"Regex": r}.
struct Pattern {
  std::string literal;                ///< the literal when regex is null
  std::shared_ptr<const Regex> regex; ///< the compiled regex, or null for a literal
  /// Appends the [begin, end) ranges of the non-overlapping matches in `s`.
  void find_all(std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& out) const;
};

} // namespace tpullm::text::detail
