// PCRE2 behind Regex / Pattern: see regex.hpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "regex.hpp"

#include <pcre2.h>

#include <algorithm>
#include <limits>

#include "tpullm/support/error.hpp"
#include "unicode.hpp"

namespace tpullm::text::detail {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  std::string pattern; // for messages (at most 80 bytes)
  std::string where;
  ~Code() { pcre2_code_free(code); }
};

namespace {
// Per-thread matching state: match data large enough for any pattern's ovector, a JIT stack that
// long runs (whitespace, one script) cannot exhaust, and the match context that points at it.
struct ThreadState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  ThreadState() {
    pcre2_jit_stack_assign(ctx, nullptr, stack);
    pcre2_set_heap_limit(ctx, kRegexHeapLimitKiB);
  }
  ~ThreadState() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};
ThreadState& thread_state() {
  thread_local ThreadState s;
  return s;
}
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return std::string(reinterpret_cast<const char*>(buf));
}
} // namespace

Regex::Regex(const std::string& pattern, const std::string& where) : code_(new Code) {
  check(pattern.size() <= kRegexMaxLength, ErrorKind::invalid_input, where, "regex of ",
        pattern.size(), " bytes is too long (at most ", kRegexMaxLength, ")");
  code_->pattern = pattern.substr(0, 80) + (pattern.size() > 80 ? "..." : "");
  code_->where = where;
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  check(cc != nullptr, ErrorKind::internal, where, "out of memory for a regex");
  pcre2_set_max_pattern_length(cc, kRegexMaxLength);
  pcre2_set_parens_nest_limit(cc, kRegexMaxNesting);
  int err = 0;
  PCRE2_SIZE off = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &off, cc);
  pcre2_compile_context_free(cc);
  if (code_->code == nullptr && err == PCRE2_ERROR_PARENTHESES_NEST_TOO_DEEP)
    throw_error(ErrorKind::invalid_input, where, "regex nests parentheses deeper than ",
                kRegexMaxNesting);
  if (code_->code == nullptr)
    throw_error(ErrorKind::invalid_input, where, "regex does not compile at offset ", off, ": ",
                pcre2_message(err));
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

void Regex::find_all(std::string_view s,
                     std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  ThreadState& ts = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  std::size_t pos = 0;
  while (pos <= s.size()) {
    // A match of the real patterns takes about one step per byte of the run it spans; a
    // backtracking pattern takes exponentially many and stops here.
    const std::uint64_t limit = kRegexBaseSteps + kRegexStepsPerByte * (s.size() - pos);
    pcre2_set_match_limit(ts.ctx, static_cast<std::uint32_t>(std::min<std::uint64_t>(
                                      limit, std::numeric_limits<std::uint32_t>::max())));
    pcre2_set_depth_limit(ts.ctx, static_cast<std::uint32_t>(std::min<std::uint64_t>(
                                      limit, std::numeric_limits<std::uint32_t>::max())));
    const int rc =
        code_->jit
            ? pcre2_jit_match(code_->code, subject, s.size(), pos, 0, ts.data, ts.ctx)
            : pcre2_match(code_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, ts.data, ts.ctx);
    if (rc == PCRE2_ERROR_NOMATCH)
      return;
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT)
      throw_error(ErrorKind::invalid_input, code_->where, "regex '", code_->pattern,
                  "' hit its limit (", pcre2_message(rc), ") on a ", s.size() - pos,
                  "-byte text (catastrophic backtracking)");
    if (rc < 0)
      throw_error(ErrorKind::invalid_input, code_->where,
                  "regex match failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ts.data);
    const std::size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b)
      pos = e;
    else if (e >= s.size())
      return;
    else
      pos = e + utf8_len(static_cast<unsigned char>(s[e]));
  }
}

void Pattern::find_all(std::string_view s,
                       std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  if (regex) {
    regex->find_all(s, out);
    return;
  }
  if (literal.empty())
    return;
  for (std::size_t p = s.find(literal); p != std::string_view::npos;
       p = s.find(literal, p + literal.size()))
    out.emplace_back(p, p + literal.size());
}

} // namespace tpullm::text::detail
