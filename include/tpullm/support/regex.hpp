#pragma once
/// Regular expressions that come from a user or a file (`--keep-float`, a checkpoint's GPTQModel
/// `dynamic`, AutoRound `extra_config`, compressed-tensors `re:` targets, the lowering's
/// `keep-float` option): PCRE2 (Perl / Python syntax, bytes, no JIT) with bounds, so that a
/// hostile pattern ends in a one-line Error instead of a crash or a hang. The pattern length and
/// its parenthesis nesting are checked before anything is compiled; each match runs under
/// PCRE2's match limit (backtracking steps), depth limit and heap limit, and a match that hits
/// one of them is an Error naming the pattern, never a silent "no match".
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpullm {

/// The bounds of a UserRegex (docs/guarantees.md lists the defaults).
struct RegexLimits {
  std::size_t max_length = 1024;            ///< pattern bytes
  std::uint32_t max_nesting = 32;           ///< parenthesis nesting depth
  std::uint32_t match_limit = 1'000'000;    ///< PCRE2 match limit (backtracking steps) per match
  std::uint32_t depth_limit = 10'000;       ///< PCRE2 depth limit (nested backtracking points)
  std::uint32_t heap_limit_kib = 16 * 1024; ///< PCRE2 heap limit per match, KiB
};

/// A compiled, bounded regex. Matching is thread-safe (match data per call).
class UserRegex {
public:
  /// Compiles `pattern`; Error(invalid_input, where, ...) when it is too long, nests too deep or
  /// does not compile.
  UserRegex(std::string pattern, std::string where, const RegexLimits& limits = {});
  /// Whether the whole of `s` matches (Python re.fullmatch, std::regex_match). Throws
  /// Error(invalid_input, where, ...) when a limit is hit.
  bool full_match(std::string_view s) const;
  /// Whether a prefix of `s` matches (Python re.match: anchored at the start only).
  bool prefix_match(std::string_view s) const;
  /// The pattern as given.
  const std::string& pattern() const { return pattern_; }

private:
  bool match(std::string_view s, bool whole) const;
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
  std::string where_;
  RegexLimits limits_;
};

/// The names of a pattern `^(?:a|b|...)$` whose alternatives are literals (metacharacters
/// escaped with '\\', as resolve_keep_float writes them), unescaped; nullopt for any other
/// pattern. Such a pattern is matched by set lookup: it may list more names than PCRE2 can
/// compile into one program.
std::optional<std::vector<std::string>> literal_alternation(std::string_view pattern);

} // namespace tpullm
