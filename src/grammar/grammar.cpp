// Grammar: code point sets, the checks and the byte-level compilation of rules, the grammar text
// format (docs/grammar.md) and wrap().
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "grammar_impl.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/utf8.hpp"

namespace tpullm::grammar {

namespace {

constexpr char32_t kMaxCp = 0x10FFFF;
constexpr int kMaxRepeat = 1000; // the largest m or n of x{m,n}

// The byte ranges of every UTF-8 sequence of the code points [lo, hi] (no surrogates inside):
// each sequence is a product of byte ranges (the split of regex engines' UTF-8 automata).
using ByteSeq = std::vector<std::pair<std::uint8_t, std::uint8_t>>;

void utf8_sequences(char32_t lo, char32_t hi, std::vector<ByteSeq>& out) {
  static constexpr char32_t kBounds[] = {0x7F, 0x7FF, 0xFFFF};
  for (const char32_t b : kBounds)
    if (lo <= b && hi > b) {
      utf8_sequences(lo, b, out);
      utf8_sequences(b + 1, hi, out);
      return;
    }
  const int n = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, z;
  append_utf8(a, lo);
  append_utf8(z, hi);
  ByteSeq seq;
  for (std::size_t k = 0; k < a.size(); ++k)
    seq.emplace_back(static_cast<std::uint8_t>(a[k]), static_cast<std::uint8_t>(z[k]));
  out.push_back(std::move(seq));
}

[[noreturn]] void fail(const std::string& msg) {
  throw Error(ErrorKind::invalid_input, "grammar", msg);
}

// --- checks and compilation -----------------------------------------------------------------

struct Compiler {
  Grammar::Impl& g;
  std::map<Ranges, std::int32_t> class_rules; // non-ASCII class -> compiled helper rule
  std::map<std::array<std::uint64_t, 4>, std::int32_t> set_ids;
  std::vector<std::vector<std::vector<Elem>>> helper_alts; // helpers' sequences, compiled last

  std::int32_t set_id(const std::array<std::uint64_t, 4>& bits) {
    const auto [it, fresh] = set_ids.emplace(bits, static_cast<std::int32_t>(g.sets.size()));
    if (fresh)
      g.sets.push_back(bits);
    return it->second;
  }
  static void set_bits(std::array<std::uint64_t, 4>& bits, unsigned a, unsigned z) {
    for (unsigned b = a; b <= z; ++b)
      bits[b / 64] |= std::uint64_t{1} << (b % 64);
  }

  // The elements of one item.
  Elem item(const Item& it) {
    if (it.rule >= 0)
      return Elem{Elem::ref, it.rule};
    if (it.chars.empty())
      fail("a character class matches no character");
    if (it.chars.back().second < 0x80) {
      std::array<std::uint64_t, 4> bits{};
      for (const auto& [a, z] : it.chars)
        set_bits(bits, static_cast<unsigned>(a), static_cast<unsigned>(z));
      return Elem{Elem::bytes, set_id(bits)};
    }
    if (const auto f = class_rules.find(it.chars); f != class_rules.end())
      return Elem{Elem::ref, f->second};
    std::vector<std::vector<Elem>> alts;
    std::array<std::uint64_t, 4> ascii{};
    bool any_ascii = false;
    std::vector<ByteSeq> seqs;
    for (const auto& [a, z] : it.chars) {
      if (a < 0x80) {
        set_bits(ascii, static_cast<unsigned>(a),
                 static_cast<unsigned>(std::min<char32_t>(z, 0x7F)));
        any_ascii = true;
      }
      const char32_t lo = std::max<char32_t>(a, 0x80);
      if (lo > z)
        continue;
      // Surrogates are no characters: left out.
      if (lo < 0xD800 && z >= 0xD800) {
        utf8_sequences(lo, 0xD7FF, seqs);
        if (z > 0xDFFF)
          utf8_sequences(0xE000, z, seqs);
      } else if (lo >= 0xD800 && lo <= 0xDFFF) {
        if (z > 0xDFFF)
          utf8_sequences(0xE000, z, seqs);
      } else {
        utf8_sequences(lo, z, seqs);
      }
    }
    if (any_ascii)
      alts.push_back({Elem{Elem::bytes, set_id(ascii)}});
    for (const ByteSeq& s : seqs) {
      std::vector<Elem> seq;
      for (const auto& [a, z] : s) {
        std::array<std::uint64_t, 4> bits{};
        set_bits(bits, a, z);
        seq.push_back(Elem{Elem::bytes, set_id(bits)});
      }
      alts.push_back(std::move(seq));
    }
    const auto id = static_cast<std::int32_t>(g.rules.size() + helper_alts.size());
    helper_alts.push_back(std::move(alts));
    class_rules.emplace(it.chars, id);
    return Elem{Elem::ref, id};
  }

  void run() {
    std::vector<std::vector<std::vector<Elem>>> rule_alts;
    for (const Rule& r : g.rules) {
      std::vector<std::vector<Elem>> alts;
      for (const auto& seq : r.alts) {
        std::vector<Elem> out;
        for (const Item& it : seq)
          out.push_back(item(it));
        alts.push_back(std::move(out));
      }
      rule_alts.push_back(std::move(alts));
    }
    for (auto& h : helper_alts)
      rule_alts.push_back(std::move(h));
    for (const auto& alts : rule_alts) {
      std::vector<std::int32_t> starts;
      for (const auto& seq : alts) {
        starts.push_back(static_cast<std::int32_t>(g.code.size()));
        g.code.insert(g.code.end(), seq.begin(), seq.end());
        g.code.push_back(Elem{Elem::end, 0});
      }
      g.alts.push_back(std::move(starts));
    }
  }
};

// Refuses left recursion (a rule that reaches itself before any character) by name.
void check_rules(const std::vector<Rule>& rules) {
  const std::size_t n = rules.size();
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (nullable[r])
        continue;
      for (const auto& seq : rules[r].alts) {
        bool all = true;
        for (const Item& it : seq)
          all = all && it.rule >= 0 && nullable[static_cast<std::size_t>(it.rule)];
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // left[r]: the rules r may start with (through nullable prefixes).
  std::vector<std::vector<int>> left(n);
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& seq : rules[r].alts)
      for (const Item& it : seq) {
        if (it.rule < 0)
          break;
        left[r].push_back(it.rule);
        if (!nullable[static_cast<std::size_t>(it.rule)])
          break;
      }
  std::vector<int> color(n, 0); // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int, std::size_t>> stack;
  for (std::size_t s = 0; s < n; ++s) {
    if (color[s])
      continue;
    stack.emplace_back(static_cast<int>(s), 0);
    color[s] = 1;
    while (!stack.empty()) {
      auto& [r, k] = stack.back();
      const auto ur = static_cast<std::size_t>(r);
      if (k == left[ur].size()) {
        color[ur] = 2;
        stack.pop_back();
        continue;
      }
      const int next = left[ur][k++];
      const auto un = static_cast<std::size_t>(next);
      if (color[un] == 1) {
        const Rule& bad = rules[un];
        if (!bad.repeat_of.empty())
          fail("a repetition of an expression that can match the empty string in rule '" +
               bad.repeat_of + "'");
        fail("left recursion in rule '" + bad.name + "'");
      }
      if (color[un] == 0) {
        color[un] = 1;
        stack.emplace_back(next, 0);
      }
    }
  }
}

// --- printing -------------------------------------------------------------------------------

void print_char(std::string& out, char32_t c, bool in_class) {
  switch (c) {
  case '\n':
    out += "\\n";
    return;
  case '\t':
    out += "\\t";
    return;
  case '\r':
    out += "\\r";
    return;
  case '\\':
    out += "\\\\";
    return;
  default:
    break;
  }
  if ((!in_class && c == '"') || (in_class && (c == ']' || c == '-' || c == '^' || c == '['))) {
    out += '\\';
    out += static_cast<char>(c);
    return;
  }
  if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0) || (c >= 0xD800 && c <= 0xDFFF)) {
    char buf[16];
    std::snprintf(buf, sizeof buf, c < 0x100 ? "\\x%02X" : "\\u%04X", static_cast<unsigned>(c));
    out += buf;
    return;
  }
  append_utf8(out, c);
}

void print_item(std::string& out, const Item& it, const std::vector<Rule>& rules) {
  if (it.rule >= 0) {
    out += rules[static_cast<std::size_t>(it.rule)].name;
    return;
  }
  if (it.chars.size() == 1 && it.chars[0].first == it.chars[0].second) {
    out += '"';
    print_char(out, it.chars[0].first, false);
    out += '"';
    return;
  }
  out += '[';
  for (const auto& [a, z] : it.chars) {
    print_char(out, a, true);
    if (z != a) {
      out += '-';
      print_char(out, z, true);
    }
  }
  out += ']';
}

// --- the text format ------------------------------------------------------------------------

bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
public:
  explicit Parser(std::string_view text) : s_(text) {}

  std::shared_ptr<const Grammar> run() {
    skip();
    while (i_ < s_.size()) {
      const std::size_t at = i_;
      const std::string name = ident();
      skip();
      if (s_.substr(i_, 3) != "::=")
        error(i_, "expected '::=' after the rule name '" + name + "'");
      i_ += 3;
      const int id = rule_id(name, at);
      if (defined_[static_cast<std::size_t>(id)])
        error(at, "rule '" + name + "' is defined twice");
      defined_[static_cast<std::size_t>(id)] = 1;
      current_ = name;
      rules_[static_cast<std::size_t>(id)].alts = alternatives();
      if (i_ < s_.size() && s_[i_] == ')')
        error(i_, "unbalanced ')'");
    }
    for (std::size_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r])
        error(first_use_[r], "rule '" + rules_[r].name + "' is not defined");
    std::map<std::string, int> next;
    for (const int h : helpers_) {
      Rule& r = rules_[static_cast<std::size_t>(h)];
      std::string name;
      do
        name = r.name + "-" + std::to_string(++next[r.name]);
      while (names_.count(name));
      names_.emplace(name, h);
      r.name = name;
    }
    const auto root = names_.find("root");
    if (root == names_.end())
      error(s_.size(), "no rule named 'root'");
    return compile(std::move(rules_), root->second);
  }

private:
  [[noreturn]] void error(std::size_t at, const std::string& msg) const {
    std::size_t line = 1, col = 1;
    for (std::size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(s_[k]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    fail("line " + std::to_string(line) + " col " + std::to_string(col) + ": " + msg);
  }

  void skip() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n')
          ++i_;
      } else {
        break;
      }
    }
  }

  std::string ident() {
    const std::size_t a = i_;
    while (i_ < s_.size() && ident_char(s_[i_]))
      ++i_;
    if (a == i_)
      error(a, "expected a rule name");
    return std::string(s_.substr(a, i_ - a));
  }

  int rule_id(const std::string& name, std::size_t at) {
    const auto [it, fresh] = names_.emplace(name, static_cast<int>(rules_.size()));
    if (fresh) {
      rules_.push_back(Rule{name, {}, {}});
      defined_.push_back(0);
      first_use_.push_back(at);
    }
    return it->second;
  }

  // A rule for a group or repetition; named after parsing (unlike any name of the text).
  int helper(std::vector<std::vector<Item>> alts, bool repeat) {
    const int id = static_cast<int>(rules_.size());
    rules_.push_back(Rule{current_, std::move(alts), {}});
    defined_.push_back(1);
    first_use_.push_back(i_);
    helpers_.push_back(id);
    if (repeat)
      rules_[static_cast<std::size_t>(id)].repeat_of = current_;
    return id;
  }

  // Is the next thing `name ::=` (the start of the next rule)?
  bool at_rule_start() const {
    std::size_t k = i_;
    while (k < s_.size() && ident_char(s_[k]))
      ++k;
    if (k == i_)
      return false;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t' || s_[k] == '\n' || s_[k] == '\r'))
      ++k;
    return s_.substr(k, 3) == "::=";
  }

  std::vector<std::vector<Item>> alternatives() {
    std::vector<std::vector<Item>> alts;
    alts.push_back(sequence());
    while (i_ < s_.size() && s_[i_] == '|') {
      ++i_;
      alts.push_back(sequence());
    }
    return alts;
  }

  std::vector<Item> sequence() {
    std::vector<Item> seq;
    for (;;) {
      skip();
      if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')' || at_rule_start())
        return seq;
      std::vector<Item> p = primary();
      skip();
      postfix(p);
      seq.insert(seq.end(), p.begin(), p.end());
    }
  }

  int number() {
    const std::size_t a = i_;
    long v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + (s_[i_++] - '0');
      if (v > kMaxRepeat)
        error(a, "a repetition count above " + std::to_string(kMaxRepeat));
    }
    if (a == i_)
      error(a, "expected a number");
    return static_cast<int>(v);
  }

  void postfix(std::vector<Item>& p) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      int lo = 0, hi = -1; // hi < 0: unbounded
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        ++i_;
        lo = 1;
      } else if (c == '?') {
        ++i_;
        hi = 1;
      } else if (c == '{') {
        const std::size_t at = i_++;
        skip();
        lo = number();
        skip();
        hi = lo;
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          skip();
          hi = i_ < s_.size() && s_[i_] == '}' ? -1 : number();
          skip();
        }
        if (i_ >= s_.size() || s_[i_] != '}')
          error(i_, "expected '}'");
        ++i_;
        if (hi >= 0 && hi < lo)
          error(at, "repetition {m,n} with n < m");
      } else {
        return;
      }
      p = repeat(std::move(p), lo, hi);
      skip();
    }
  }

  std::vector<Item> repeat(std::vector<Item> x, int lo, int hi) {
    std::vector<Item> out;
    for (int k = 0; k < lo; ++k)
      out.insert(out.end(), x.begin(), x.end());
    if (hi < 0) {
      const int r = helper({}, true);
      std::vector<Item> more = x;
      more.push_back(Item{r, {}});
      rules_[static_cast<std::size_t>(r)].alts = {std::move(more), {}};
      out.push_back(Item{r, {}});
    } else if (hi > lo) {
      // (x (x (x)?)?)? for hi - lo optional copies.
      int inner = -1;
      for (int k = lo; k < hi; ++k) {
        std::vector<Item> seq = x;
        if (inner >= 0)
          seq.push_back(Item{inner, {}});
        inner = helper({std::move(seq), {}}, true);
      }
      out.push_back(Item{inner, {}});
    }
    return out;
  }

  char32_t utf8_char() {
    const auto b0 = static_cast<unsigned char>(s_[i_]);
    int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + static_cast<std::size_t>(n) > s_.size())
      error(i_, "invalid UTF-8");
    char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s_[i_ + static_cast<std::size_t>(k)]);
      if ((b & 0xC0) != 0x80)
        error(i_, "invalid UTF-8");
      c = (c << 6) | (b & 0x3F);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kMin[n] || c > kMaxCp || (c >= 0xD800 && c <= 0xDFFF))
      error(i_, "invalid UTF-8");
    i_ += static_cast<std::size_t>(n);
    return c;
  }

  char32_t hex(int digits) {
    char32_t v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      if (i_ >= s_.size())
        error(i_, "expected a hex digit");
      const char c = s_[i_];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0)
        error(i_, "expected a hex digit");
      v = v * 16 + static_cast<char32_t>(d);
    }
    return v;
  }

  // One character of a literal or class (escapes decoded).
  char32_t character() {
    if (i_ >= s_.size())
      error(i_, "unexpected end of text");
    if (s_[i_] != '\\')
      return utf8_char();
    const std::size_t at = i_++;
    if (i_ >= s_.size())
      error(at, "unexpected end of text after '\\'");
    const char e = s_[i_++];
    char32_t c = 0;
    switch (e) {
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case 'r':
      return '\r';
    case 'x':
      return hex(2);
    case 'u':
      c = hex(4);
      break;
    case 'U':
      c = hex(8);
      break;
    case '\\':
    case '"':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/':
    case '.':
      return static_cast<char32_t>(e);
    default:
      error(at, std::string("unknown escape '\\") + e + "'");
    }
    if (c > kMaxCp || (c >= 0xD800 && c <= 0xDFFF))
      error(at, "escape of a code point that is not a character");
    return c;
  }

  std::vector<Item> primary() {
    const std::size_t at = i_;
    const char c = s_[i_];
    if (c == '"') {
      ++i_;
      std::vector<Item> lit;
      while (i_ < s_.size() && s_[i_] != '"')
        lit.push_back(Item{-1, single(character())});
      if (i_ >= s_.size())
        error(at, "unterminated string");
      ++i_;
      return lit;
    }
    if (c == '[') {
      ++i_;
      const bool negated = i_ < s_.size() && s_[i_] == '^';
      if (negated)
        ++i_;
      Ranges r;
      while (i_ < s_.size() && s_[i_] != ']') {
        const char32_t a = character();
        char32_t z = a;
        if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
          ++i_;
          z = character();
          if (z < a)
            error(at, "a character range with its end before its start");
        }
        r.emplace_back(a, z);
      }
      if (i_ >= s_.size())
        error(at, "unterminated character class");
      ++i_;
      r = normalize(std::move(r));
      if (negated)
        r = complement(r);
      if (r.empty())
        error(at, "a character class that matches no character");
      return {Item{-1, std::move(r)}};
    }
    if (c == '.') {
      ++i_;
      return {Item{-1, complement({})}};
    }
    if (c == '(') {
      // The parser recurses per group: a bound keeps hostile text from overflowing the stack.
      if (++group_depth_ > kMaxGroupDepth)
        error(at, "groups nested deeper than " + std::to_string(kMaxGroupDepth));
      ++i_;
      auto alts = alternatives();
      --group_depth_;
      if (i_ >= s_.size() || s_[i_] != ')')
        error(at, "unbalanced '('");
      ++i_;
      if (alts.size() == 1)
        return std::move(alts[0]);
      return {Item{helper(std::move(alts), false), {}}};
    }
    if (ident_char(c)) {
      const std::string name = ident();
      return {Item{rule_id(name, at), {}}};
    }
    error(at, std::string("unexpected character '") + c + "'");
  }

  static constexpr int kMaxGroupDepth = 256; ///< deepest nesting of '(' groups
  std::string_view s_;
  std::size_t i_ = 0;
  int group_depth_ = 0;
  std::vector<Rule> rules_;
  std::map<std::string, int> names_;
  std::vector<char> defined_;
  std::vector<std::size_t> first_use_;
  std::string current_;
  std::vector<int> helpers_;
};

} // namespace

Ranges single(char32_t c) {
  return {{c, c}};
}

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& p : r) {
    if (!out.empty() && p.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, p.second);
    else
      out.push_back(p);
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  char32_t next = 0;
  for (const auto& [a, z] : r) {
    if (a > next)
      out.emplace_back(next, a - 1);
    next = z + 1;
  }
  if (next <= kMaxCp)
    out.emplace_back(next, kMaxCp);
  // Surrogates are no characters.
  Ranges cut;
  for (const auto& [a, z] : out) {
    if (z < 0xD800 || a > 0xDFFF) {
      cut.emplace_back(a, z);
      continue;
    }
    if (a < 0xD800)
      cut.emplace_back(a, 0xD7FF);
    if (z > 0xDFFF)
      cut.emplace_back(0xE000, z);
  }
  return cut;
}

std::shared_ptr<const Grammar> compile(std::vector<Rule> rules, int root) {
  check_rules(rules);
  auto impl = std::make_unique<Grammar::Impl>();
  impl->rules = std::move(rules);
  impl->root = root;
  Compiler{*impl, {}, {}, {}}.run();
  return std::make_shared<const Grammar>(std::move(impl));
}

Grammar::Grammar(std::unique_ptr<const Impl> impl) : impl_(std::move(impl)) {}
Grammar::~Grammar() = default;

std::string Grammar::text() const {
  const auto& rules = impl_->rules;
  std::string out;
  // root first, then the others in order
  std::vector<std::size_t> order{static_cast<std::size_t>(impl_->root)};
  for (std::size_t r = 0; r < rules.size(); ++r)
    if (r != static_cast<std::size_t>(impl_->root))
      order.push_back(r);
  for (const std::size_t r : order) {
    out += rules[r].name;
    out += " ::=";
    for (std::size_t a = 0; a < rules[r].alts.size(); ++a) {
      if (a)
        out += " |";
      for (const Item& it : rules[r].alts[a]) {
        out += ' ';
        print_item(out, it, rules);
      }
    }
    out += '\n';
  }
  return out;
}

std::shared_ptr<const Grammar> parse_grammar(std::string_view text) {
  return Parser(text).run();
}

std::shared_ptr<const Grammar> wrap(std::string prefix, std::shared_ptr<const Grammar> inner,
                                    std::string suffix) {
  if (!inner)
    throw Error(ErrorKind::invalid_input, "grammar", "wrap of a null grammar");
  std::vector<Rule> rules = inner->impl().rules;
  // Names stay unique: the inner root keeps its name unless it is "root".
  std::set<std::string> names;
  for (const Rule& r : rules)
    names.insert(r.name);
  auto& inner_root = rules[static_cast<std::size_t>(inner->impl().root)];
  if (inner_root.name == "root") {
    std::string n = "inner";
    for (int k = 1; names.count(n); ++k)
      n = "inner" + std::to_string(k);
    inner_root.name = n;
  }
  std::vector<Item> seq;
  const auto add_literal = [&](std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
      const auto b0 = static_cast<unsigned char>(s[i]);
      const int n = b0 < 0x80         ? 1
                    : (b0 >> 5) == 6  ? 2
                    : (b0 >> 4) == 14 ? 3
                    : (b0 >> 3) == 30 ? 4
                                      : 0;
      bool ok = n > 0 && i + static_cast<std::size_t>(n) <= s.size();
      char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
      for (int k = 1; ok && k < n; ++k) {
        const auto b = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
        ok = (b & 0xC0) == 0x80;
        c = (c << 6) | (b & 0x3F);
      }
      if (!ok)
        throw Error(ErrorKind::invalid_input, "grammar", "wrap: the prefix or suffix is not UTF-8");
      seq.push_back(Item{-1, single(c)});
      i += static_cast<std::size_t>(n);
    }
  };
  add_literal(prefix);
  seq.push_back(Item{inner->impl().root, {}});
  add_literal(suffix);
  const int root = static_cast<int>(rules.size());
  rules.push_back(Rule{"root", {std::move(seq)}, {}});
  return compile(std::move(rules), root);
}

} // namespace tpullm::grammar
