// Bounded PCRE2 regexes for user and file patterns (tpullm/support/regex.hpp).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tpullm/support/regex.hpp"

#include <pcre2.h>

#include "tpullm/support/error.hpp"

namespace tpullm {

struct UserRegex::Code {
  pcre2_code* code = nullptr;
  pcre2_match_context* ctx = nullptr;
  ~Code() {
    pcre2_match_context_free(ctx);
    pcre2_code_free(code);
  }
};

namespace {
std::string pcre2_text(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return std::string(reinterpret_cast<const char*>(buf));
}

// At most 80 bytes of `s` for a message, control bytes as '?', so the message stays one line.
std::string excerpt(std::string_view s) {
  std::string out(s.substr(0, 80));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = '?';
  if (s.size() > 80)
    out += "...";
  return out;
}

// The deepest parenthesis nesting of `p` (escapes and character classes skipped).
std::uint32_t paren_depth(std::string_view p) {
  std::uint32_t depth = 0, deepest = 0;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      if (c == ']')
        in_class = false;
    } else if (c == '[') {
      in_class = true;
      if (i + 1 < p.size() && p[i + 1] == '^')
        ++i;
      if (i + 1 < p.size() && p[i + 1] == ']') // a leading ']' is a member
        ++i;
    } else if (c == '(') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ')' && depth > 0) {
      --depth;
    }
  }
  return deepest;
}
} // namespace

UserRegex::UserRegex(std::string pattern, std::string where, const RegexLimits& limits)
    : pattern_(std::move(pattern)), where_(std::move(where)), limits_(limits) {
  check(pattern_.size() <= limits_.max_length, ErrorKind::invalid_input, where_, "regex of ",
        pattern_.size(), " bytes is too long (at most ", limits_.max_length, ")");
  const std::uint32_t depth = paren_depth(pattern_);
  check(depth <= limits_.max_nesting, ErrorKind::invalid_input, where_, "regex '",
        excerpt(pattern_), "' nests parentheses ", depth, " deep (at most ", limits_.max_nesting,
        ")");
  auto code = std::make_shared<Code>();
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  check(cc != nullptr, ErrorKind::internal, where_, "out of memory for a regex");
  pcre2_set_max_pattern_length(cc, limits_.max_length);
  pcre2_set_parens_nest_limit(cc, limits_.max_nesting);
  int err = 0;
  PCRE2_SIZE off = 0;
  // No start optimizations: whether a backtracking pattern hits its limit depends on the
  // pattern, not on whether a name happens to lack the pattern's last literal.
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                             PCRE2_NO_START_OPTIMIZE, &err, &off, cc);
  pcre2_compile_context_free(cc);
  if (code->code == nullptr)
    throw_error(ErrorKind::invalid_input, where_, "pattern '", excerpt(pattern_),
                "' is not a valid regular expression (offset ", off, ": ", pcre2_text(err), ")");
  code->ctx = pcre2_match_context_create(nullptr);
  check(code->ctx != nullptr, ErrorKind::internal, where_, "out of memory for a regex");
  pcre2_set_match_limit(code->ctx, limits_.match_limit);
  pcre2_set_depth_limit(code->ctx, limits_.depth_limit);
  pcre2_set_heap_limit(code->ctx, limits_.heap_limit_kib);
  code_ = std::move(code);
}

bool UserRegex::match(std::string_view s, bool whole) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  check(md != nullptr, ErrorKind::internal, where_, "out of memory for a regex match");
  const std::uint32_t opts = PCRE2_ANCHORED | (whole ? PCRE2_ENDANCHORED : 0u);
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, opts,
                             md, code_->ctx);
  pcre2_match_data_free(md);
  if (rc >= 0)
    return true;
  if (rc == PCRE2_ERROR_NOMATCH)
    return false;
  const char* which = rc == PCRE2_ERROR_MATCHLIMIT   ? "match limit"
                      : rc == PCRE2_ERROR_DEPTHLIMIT ? "depth limit"
                      : rc == PCRE2_ERROR_HEAPLIMIT  ? "heap limit"
                                                     : nullptr;
  if (which)
    throw_error(ErrorKind::invalid_input, where_, "regex '", excerpt(pattern_), "' hit its ", which,
                " on '", excerpt(s),
                "' (catastrophic backtracking; write it without nested repetition)");
  throw_error(ErrorKind::invalid_input, where_, "regex '", excerpt(pattern_), "' failed on '",
              excerpt(s), "': ", pcre2_text(rc));
}

bool UserRegex::full_match(std::string_view s) const {
  return match(s, true);
}

bool UserRegex::prefix_match(std::string_view s) const {
  return match(s, false);
}

std::optional<std::vector<std::string>> literal_alternation(std::string_view p) {
  constexpr std::string_view head = "^(?:", tail = ")$", meta = ".^$|()[]{}*+?\\";
  if (p.size() < head.size() + tail.size() || p.substr(0, head.size()) != head ||
      p.substr(p.size() - tail.size()) != tail)
    return std::nullopt;
  p = p.substr(head.size(), p.size() - head.size() - tail.size());
  std::vector<std::string> names(1);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size() || meta.find(p[i + 1]) == std::string_view::npos)
        return std::nullopt; // \d, \w, ...: not a literal
      names.back() += p[++i];
    } else if (c == '|') {
      names.emplace_back();
    } else if (meta.find(c) != std::string_view::npos) {
      return std::nullopt;
    } else {
      names.back() += c;
    }
  }
  return names;
}

} // namespace tpullm
