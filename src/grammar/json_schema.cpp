// JSON Schema subset -> grammar text (docs/grammar.md), then parse_grammar; json_object_grammar.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>

#include "grammar_impl.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::grammar {

namespace {

using nlohmann::json;

constexpr std::size_t kMaxCount = 1000; // the largest minItems/maxItems/minLength/maxLength

// The shared rules, each emitted once when used (with the rules it uses).
const std::map<std::string, std::pair<std::string, std::vector<std::string>>>& common_rules() {
  static const std::map<std::string, std::pair<std::string, std::vector<std::string>>> rules = {
      {"ws", {R"(" "?)", {}}},
      {"char", {R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))", {}}},
      {"string", {R"("\"" char* "\"")", {"char"}}},
      {"integer", {R"("-"? ("0" | [1-9] [0-9]{0,15}))", {}}},
      {"number",
       {R"("-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?)", {}}},
      {"boolean", {R"("true" | "false")", {}}},
      {"null", {R"("null")", {}}},
      {"value",
       {R"(object | array | string | number | boolean | null)",
        {"object", "array", "string", "number", "boolean", "null"}}},
      {"object", {R"("{" ws (member ("," ws member)* ws)? "}")", {"ws", "member"}}},
      {"member", {R"(string ":" ws value)", {"string", "ws", "value"}}},
      {"array", {R"("[" ws (value ("," ws value)* ws)? "]")", {"ws", "value"}}},
      {"date",
       {R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]))", {}}},
      {"time",
       {R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))",
        {}}},
      {"date-time", {R"(date "T" time)", {"date", "time"}}},
      {"uuid",
       {R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})",
        {}}},
      {"ipv4-part",
       {R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])", {}}},
      {"ipv4", {R"(ipv4-part "." ipv4-part "." ipv4-part "." ipv4-part)", {"ipv4-part"}}},
  };
  return rules;
}

// A grammar literal of `s` (UTF-8).
std::string literal(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

[[noreturn]] void unsupported(const std::string& keyword, const std::string& path) {
  throw Error(ErrorKind::unsupported, "json schema",
              "'" + keyword + "' is not supported at " + (path.empty() ? "/" : path));
}
[[noreturn]] void invalid(const std::string& path, const std::string& msg) {
  throw Error(ErrorKind::invalid_input, "json schema", (path.empty() ? "/" : path) + ": " + msg);
}

std::string pointer_escape(const std::string& key) {
  std::string out;
  for (const char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

// --- string patterns: a regular-expression subset -> grammar expression ----------------------

class PatternConverter {
public:
  PatternConverter(std::string_view re, std::string path) : re_(re), path_(std::move(path)) {}

  std::string run() {
    bool head = false, tail = false;
    if (!re_.empty() && re_.front() == '^') {
      head = true;
      re_.remove_prefix(1);
    }
    if (!re_.empty() && re_.back() == '$' && (re_.size() < 2 || re_[re_.size() - 2] != '\\')) {
      tail = true;
      re_.remove_suffix(1);
    }
    std::string e = alternation();
    if (i_ != re_.size())
      bad("unbalanced ')'");
    // An unanchored pattern matches anywhere in the string.
    return std::string(head ? "" : "char* ") + "(" + e + ")" + (tail ? "" : " char*");
  }

private:
  [[noreturn]] void bad(const std::string& what) const {
    throw Error(ErrorKind::unsupported, "json schema",
                "'pattern' " + what + " at " + path_ + " (only a regular-expression subset is)");
  }

  std::string alternation() {
    std::string out = sequence();
    while (i_ < re_.size() && re_[i_] == '|') {
      ++i_;
      out += " | " + sequence();
    }
    return out;
  }

  std::string sequence() {
    std::string out;
    while (i_ < re_.size() && re_[i_] != '|' && re_[i_] != ')') {
      std::string a = atom();
      a += quantifier();
      out += (out.empty() ? "" : " ") + a;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantifier() {
    if (i_ >= re_.size())
      return "";
    const char c = re_[i_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      q = std::string(1, c);
    } else if (c == '{') {
      const std::size_t close = re_.find('}', i_);
      if (close == std::string_view::npos)
        bad("has an unterminated '{'");
      q = std::string(re_.substr(i_, close - i_ + 1));
      for (std::size_t k = 1; k + 1 < q.size(); ++k)
        if (!((q[k] >= '0' && q[k] <= '9') || q[k] == ','))
          bad("has a malformed '{m,n}'");
      i_ = close + 1;
    }
    if (!q.empty() && i_ < re_.size() && (re_[i_] == '?' || re_[i_] == '+'))
      bad("has a lazy or possessive quantifier");
    return q;
  }

  std::string escape_class(char e) {
    switch (e) {
    case 'd':
      return "[0-9]";
    case 'w':
      return "[a-zA-Z0-9_]";
    case 's':
      return "(\" \" | \"\\\\t\" | \"\\\\n\" | \"\\\\r\")";
    case 'D':
      return "[^0-9\"\\\\\\x00-\\x1F]";
    case 'W':
      return "[^a-zA-Z0-9_\"\\\\\\x00-\\x1F]";
    default:
      return "";
    }
  }

  // One character as it appears inside a JSON string.
  static std::string json_char(char c) {
    if (c == '"')
      return literal("\\\"");
    if (c == '\\')
      return literal("\\\\");
    if (c == '\n')
      return literal("\\n");
    if (c == '\t')
      return literal("\\t");
    if (c == '\r')
      return literal("\\r");
    return literal(std::string(1, c));
  }

  std::string atom() {
    const char c = re_[i_];
    if (c == '(') {
      ++i_;
      if (re_.substr(i_, 2) == "?:")
        i_ += 2;
      else if (i_ < re_.size() && re_[i_] == '?')
        bad("has a lookaround or named group");
      std::string e = alternation();
      if (i_ >= re_.size() || re_[i_] != ')')
        bad("has an unbalanced '('");
      ++i_;
      return "(" + e + ")";
    }
    if (c == '[')
      return char_class();
    if (c == '.') {
      ++i_;
      return "char";
    }
    if (c == '^' || c == '$')
      bad("has an anchor inside");
    if (c == '*' || c == '+' || c == '?' || c == '{')
      bad("has a quantifier with nothing before it");
    if (c == '\\') {
      if (i_ + 1 >= re_.size())
        bad("ends with '\\'");
      const char e = re_[i_ + 1];
      i_ += 2;
      if (std::string cls = escape_class(e); !cls.empty())
        return cls;
      if (e == 'u')
        return json_cp(hex4());
      if (e == 'n')
        return json_char('\n');
      if (e == 't')
        return json_char('\t');
      if (e == 'r')
        return json_char('\r');
      if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
        bad(std::string("has the escape '\\") + e + "'");
      return json_char(e);
    }
    // A UTF-8 character: its bytes as one literal.
    std::size_t n = 1;
    while (i_ + n < re_.size() && (static_cast<unsigned char>(re_[i_ + n]) & 0xC0) == 0x80)
      ++n;
    const std::string ch(re_.substr(i_, n));
    i_ += n;
    return n == 1 ? json_char(ch[0]) : literal(ch);
  }

  // \uHHHH after the "\u" (a surrogate or a bad digit is refused).
  char32_t hex4() {
    if (i_ + 4 > re_.size())
      bad("has a short '\\u' escape");
    char32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = re_[i_++];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0)
        bad("has a bad '\\u' escape");
      v = v * 16 + static_cast<char32_t>(d);
    }
    if (v >= 0xD800 && v <= 0xDFFF)
      bad("has a '\\u' escape of a surrogate");
    return v;
  }

  // The grammar text of one code point as it appears inside a JSON string.
  static std::string json_cp(char32_t c) {
    if (c < 0x80)
      return json_char(static_cast<char>(c));
    char buf[16];
    std::snprintf(buf, sizeof buf, "\"\\U%08X\"", static_cast<unsigned>(c));
    return buf;
  }

  char32_t class_cp() {
    const auto b0 = static_cast<unsigned char>(re_[i_]);
    if (b0 < 0x80) {
      ++i_;
      return b0;
    }
    const int n = (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + static_cast<std::size_t>(n) > re_.size())
      bad("is not UTF-8");
    char32_t c = n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < n; ++k)
      c = (c << 6) | (static_cast<unsigned char>(re_[i_ + static_cast<std::size_t>(k)]) & 0x3F);
    i_ += static_cast<std::size_t>(n);
    return c;
  }

  // A class: its code points, less the characters a JSON string holds only escaped ('"', '\\'
  // and the control characters), which come back as their escapes.
  std::string char_class() {
    ++i_; // '['
    const bool negated = i_ < re_.size() && re_[i_] == '^';
    if (negated)
      ++i_;
    Ranges r;
    bool first = true;
    while (i_ < re_.size() && (re_[i_] != ']' || first)) {
      first = false;
      char32_t a = 0;
      if (re_[i_] == '\\') {
        if (i_ + 1 >= re_.size())
          bad("ends with '\\'");
        const char e = re_[i_ + 1];
        i_ += 2;
        if (e == 'd') {
          r.emplace_back('0', '9');
          continue;
        }
        if (e == 'w') {
          r.insert(r.end(), {{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}});
          continue;
        }
        if (e == 's') {
          r.insert(r.end(), {{' ', ' '}, {'\t', '\n'}, {'\r', '\r'}});
          continue;
        }
        if ((e >= 'a' && e <= 'z' && e != 'n' && e != 't' && e != 'r' && e != 'u') ||
            (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          bad(std::string("has the escape '\\") + e + "' in a class");
        a = e == 'n'   ? '\n'
            : e == 't' ? '\t'
            : e == 'r' ? '\r'
            : e == 'u' ? hex4()
                       : static_cast<unsigned char>(e);
      } else {
        a = class_cp();
      }
      char32_t z = a;
      if (i_ + 1 < re_.size() && re_[i_] == '-' && re_[i_ + 1] != ']') {
        ++i_;
        if (re_[i_] == '\\') {
          const char e = i_ + 1 < re_.size() ? re_[i_ + 1] : 'x';
          i_ += 2;
          if (e == 'u')
            z = hex4();
          else if (!std::isalnum(static_cast<unsigned char>(e)))
            z = static_cast<unsigned char>(e);
          else
            bad(std::string("has the escape '\\") + e + "' as the end of a range");
        } else {
          z = class_cp();
        }
        if (z < a)
          bad("has a range with its end before its start");
      }
      r.emplace_back(a, z);
    }
    if (i_ >= re_.size())
      bad("has an unterminated '['");
    ++i_;
    r = normalize(std::move(r));
    if (negated)
      r = complement(r);
    const auto has = [&](char32_t c) {
      for (const auto& [a, z] : r)
        if (a <= c && c <= z)
          return true;
      return false;
    };
    std::string alts;
    for (const char c : {'"', '\\', '\n', '\t', '\r'})
      if (has(static_cast<unsigned char>(c)))
        alts += " | " + json_char(c);
    Ranges unsafe = complement(r);
    unsafe.insert(unsafe.end(), {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    const Ranges safe = complement(normalize(std::move(unsafe)));
    std::string cls;
    if (!safe.empty()) {
      cls = "[";
      char buf[32];
      for (const auto& [a, z] : safe) {
        std::snprintf(buf, sizeof buf, "\\U%08X-\\U%08X", static_cast<unsigned>(a),
                      static_cast<unsigned>(z));
        cls += buf;
      }
      cls += "]";
    }
    if (cls.empty() && alts.empty())
      bad("has a class that matches no character");
    if (cls.empty())
      return "(" + alts.substr(3) + ")";
    return alts.empty() ? cls : "(" + cls + alts + ")";
  }

  std::string_view re_;
  std::string path_;
  std::size_t i_ = 0;
};

// --- the converter ----------------------------------------------------------------------------

class Converter {
public:
  explicit Converter(const json& root) : root_(root) {}

  std::string run() {
    const std::string body = visit(root_, "");
    std::string out = "root ::= " + body + "\n";
    for (const auto& [name, text] : rules_)
      out += name + " ::= " + text + "\n";
    for (const std::string& name : used_common_) {
      out += name + " ::= " + common_rules().at(name).first + "\n";
    }
    return out;
  }

private:
  // A shared rule by name (and those it uses).
  std::string use(const std::string& name) {
    if (used_common_.insert(name).second)
      for (const std::string& dep : common_rules().at(name).second)
        use(dep);
    return name;
  }

  std::string fresh(const std::string& base) {
    std::string clean;
    for (const char c : base)
      clean += (std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
    if (clean.empty())
      clean = "r";
    std::string name = "s-" + clean;
    for (int k = 1; rules_.count(name) || reserved_.count(name); ++k)
      name = "s-" + clean + "-" + std::to_string(k);
    reserved_.insert(name);
    return name;
  }

  std::string define(const std::string& base, const std::string& text) {
    const std::string name = fresh(base);
    rules_[name] = text;
    return name;
  }

  static std::string json_literal(const json& v) { return literal(v.dump()); }

  /// The alternatives of `values` (UTF-8 texts) as one expression sharing their common prefixes:
  /// "ab" | "ac" becomes "a" ("b" | "c"), so a matcher follows one parse per distinct next
  /// character instead of one per value (a 1000-value enum with a common prefix stays far within
  /// kMaxStacks). Splits only at character boundaries.
  static std::string trie_alternatives(std::vector<std::string> values) {
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    return trie(values, 0, values.size(), 0);
  }

  /// trie_alternatives of values[lo, hi) (sorted, distinct), which share their first `at` bytes.
  static std::string trie(const std::vector<std::string>& v, std::size_t lo, std::size_t hi,
                          std::size_t at) {
    const std::string& first = v[lo];
    std::size_t end = at;
    while (end < first.size() && v[hi - 1].size() > end && v[hi - 1][end] == first[end])
      ++end; // sorted: the first and the last share what every value between them shares
    while (end > at && end < first.size() &&
           (static_cast<unsigned char>(first[end]) & 0xC0) == 0x80)
      --end; // never inside a character
    std::string out = end > at ? literal(std::string_view(first).substr(at, end - at)) : "";
    const bool ends_here = first.size() == end; // sorted: the one that ends sorts first
    std::vector<std::string> alts;
    for (std::size_t i = lo + (ends_here ? 1 : 0); i < hi;) {
      const auto b = static_cast<unsigned char>(v[i][end]);
      const std::size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
      std::size_t j = i + 1;
      while (j < hi && v[j].compare(end, n, v[i], end, n) == 0)
        ++j;
      alts.push_back(trie(v, i, j, end));
      i = j;
    }
    if (alts.empty())
      return out;
    std::string rest;
    for (const auto& a : alts)
      rest += (rest.empty() ? "" : " | ") + a;
    if (alts.size() > 1 || ends_here)
      rest = "(" + rest + ")" + (ends_here ? "?" : "");
    return out.empty() ? rest : out + " " + rest;
  }

  std::string visit(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>())
        return use("value");
      invalid(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object())
      invalid(path, "a schema must be an object or a boolean");
    static const std::set<std::string> annotations = {
        "title",    "description", "default",  "examples",  "$schema", "$id",
        "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
    static const std::set<std::string> known = {
        "type",     "properties", "required", "additionalProperties",
        "enum",     "const",      "items",    "anyOf",
        "$ref",     "pattern",    "format",   "minItems",
        "maxItems", "minLength",  "maxLength"};
    for (const auto& [k, v] : s.items())
      if (!annotations.count(k) && !known.count(k))
        unsupported(k, path + "/" + pointer_escape(k));

    if (s.contains("$ref")) {
      for (const auto& [k, v] : s.items())
        if (known.count(k) && k != "$ref")
          unsupported(k + "' beside '$ref", path);
      return ref(s["$ref"], path + "/$ref");
    }
    if (s.contains("const"))
      return json_literal(s["const"]);
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty())
        invalid(path + "/enum", "expected a non-empty array");
      std::vector<std::string> values;
      for (const json& v : e)
        values.push_back(v.dump());
      return "(" + trie_alternatives(std::move(values)) + ")";
    }
    if (s.contains("anyOf")) {
      const json& a = s["anyOf"];
      if (!a.is_array() || a.empty())
        invalid(path + "/anyOf", "expected a non-empty array");
      for (const auto& [k, v] : s.items())
        if (known.count(k) && k != "anyOf")
          unsupported(k + "' beside 'anyOf", path);
      std::string out;
      for (std::size_t i = 0; i < a.size(); ++i)
        out += (i ? " | " : "") + visit(a[i], path + "/anyOf/" + std::to_string(i));
      return "(" + out + ")";
    }
    if (!s.contains("type")) {
      // Untyped: inferred from the keywords present, else any value.
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
        return object(s, path);
      if (s.contains("items"))
        return array(s, path);
      return use("value");
    }
    const json& t = s["type"];
    if (t.is_array()) {
      if (t.empty())
        invalid(path + "/type", "an empty list of types");
      std::string out;
      for (const json& one : t)
        out += (out.empty() ? "" : " | ") + typed(s, one, path);
      return "(" + out + ")";
    }
    return typed(s, t, path);
  }

  std::string typed(const json& s, const json& t, const std::string& path) {
    if (!t.is_string())
      invalid(path + "/type", "expected a string or a list of strings");
    const std::string type = t.get<std::string>();
    const auto only = [&](std::initializer_list<const char*> allowed) {
      static const std::set<std::string> per_type = {
          "properties", "required", "additionalProperties",
          "items",      "pattern",  "format",
          "minItems",   "maxItems", "minLength",
          "maxLength"};
      for (const auto& [k, v] : s.items()) {
        if (!per_type.count(k))
          continue;
        bool ok = false;
        for (const char* a : allowed)
          ok = ok || k == a;
        if (!ok)
          unsupported(k + "' for type '" + type, path + "/" + pointer_escape(k));
      }
    };
    if (type == "object") {
      only({"properties", "required", "additionalProperties"});
      return object(s, path);
    }
    if (type == "array") {
      only({"items", "minItems", "maxItems"});
      return array(s, path);
    }
    if (type == "string") {
      only({"pattern", "format", "minLength", "maxLength"});
      return string(s, path);
    }
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") {
      only({});
      return use(type);
    }
    invalid(path + "/type", "unknown type '" + type + "'");
  }

  static std::size_t count(const json& s, const char* key, const std::string& path,
                           std::size_t dflt) {
    if (!s.contains(key))
      return dflt;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
      invalid(path + "/" + key, "expected a non-negative integer");
    const auto n = v.get<std::uint64_t>();
    if (n > kMaxCount)
      unsupported(std::string(key) + "' above " + std::to_string(kMaxCount), path + "/" + key);
    return static_cast<std::size_t>(n);
  }

  // item ("," ws item){lo-1, hi-1}, optional when lo == 0; hi = SIZE_MAX: unbounded.
  static std::string list(const std::string& item, const std::string& sep, std::size_t lo,
                          std::size_t hi) {
    if (hi == 0)
      return "";
    const std::size_t more_lo = lo > 0 ? lo - 1 : 0;
    std::string rep = hi == SIZE_MAX
                          ? "{" + std::to_string(more_lo) + ",}"
                          : "{" + std::to_string(more_lo) + "," + std::to_string(hi - 1) + "}";
    std::string body = item + " (" + sep + " " + item + ")" + rep;
    return lo == 0 ? "(" + body + ")?" : body;
  }

  std::string array(const json& s, const std::string& path) {
    const std::size_t lo = count(s, "minItems", path, 0);
    const std::size_t hi = count(s, "maxItems", path, SIZE_MAX);
    if (hi < lo)
      invalid(path, "maxItems < minItems");
    const std::string item =
        s.contains("items") ? visit(s["items"], path + "/items") : use("value");
    use("ws");
    const std::string item_rule = define(path.empty() ? "item" : path + "-item", item);
    const std::string body = list(item_rule, "\",\" ws", lo, hi);
    return define(path.empty() ? "array" : path,
                  "\"[\" ws " + (body.empty() ? "" : "(" + body + " ws) ") + "\"]\"");
  }

  std::string string(const json& s, const std::string& path) {
    use("char");
    if (s.contains("format")) {
      if (s.contains("pattern"))
        unsupported("pattern' beside 'format", path);
      const json& f = s["format"];
      if (!f.is_string())
        invalid(path + "/format", "expected a string");
      const std::string name = f.get<std::string>();
      if (name != "date" && name != "time" && name != "date-time" && name != "uuid" &&
          name != "ipv4")
        unsupported("format' '" + name, path + "/format");
      return "\"\\\"\" " + use(name) + " \"\\\"\"";
    }
    if (s.contains("pattern")) {
      if (s.contains("minLength") || s.contains("maxLength"))
        unsupported("minLength' or 'maxLength' beside 'pattern", path);
      const json& p = s["pattern"];
      if (!p.is_string())
        invalid(path + "/pattern", "expected a string");
      const std::string e = PatternConverter(p.get<std::string>(), path + "/pattern").run();
      return "\"\\\"\" " + define(path + "-pattern", e) + " \"\\\"\"";
    }
    const std::size_t lo = count(s, "minLength", path, 0);
    const std::size_t hi = count(s, "maxLength", path, SIZE_MAX);
    if (hi < lo)
      invalid(path, "maxLength < minLength");
    if (lo == 0 && hi == SIZE_MAX)
      return use("string");
    const std::string rep = hi == SIZE_MAX
                                ? "{" + std::to_string(lo) + ",}"
                                : "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
    return "\"\\\"\" char" + rep + " \"\\\"\"";
  }

  std::string object(const json& s, const std::string& path) {
    use("ws");
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props && !props->is_object())
      invalid(path + "/properties", "expected an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array())
        invalid(path + "/required", "expected an array");
      for (const json& k : r) {
        if (!k.is_string())
          invalid(path + "/required", "expected strings");
        if (!props || !props->contains(k.get<std::string>()))
          invalid(path + "/required", "'" + k.get<std::string>() + "' is not in properties");
        required.insert(k.get<std::string>());
      }
    }
    const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    const bool closed = extra && extra->is_boolean() && !extra->get<bool>();
    if (props && !props->empty()) {
      if (extra && !closed)
        unsupported("additionalProperties' other than false beside 'properties",
                    path + "/additionalProperties");
      // Properties in the schema's order, each optional one may be left out:
      // first(i) = no property written yet, from i on; rest(i) = some written, from i on.
      std::vector<std::string> kv;
      std::vector<bool> optional;
      for (const auto& [k, v] : props->items()) {
        const std::string p = path + "/properties/" + pointer_escape(k);
        kv.push_back(define(p + "-kv", literal(json(k).dump()) + " \":\" ws " + visit(v, p)));
        optional.push_back(!required.count(k));
      }
      const std::size_t n = kv.size();
      const std::string base = path.empty() ? "obj" : path;
      std::vector<std::string> first(n + 1), rest(n + 1);
      for (std::size_t i = 0; i <= n; ++i) {
        first[i] = fresh(base + "-f" + std::to_string(i));
        rest[i] = fresh(base + "-r" + std::to_string(i));
      }
      for (std::size_t i = n + 1; i-- > 0;) {
        std::string f, r;
        bool skippable = true;
        for (std::size_t j = i; j < n && skippable; ++j) {
          f += (f.empty() ? "" : " | ") + kv[j] + " " + rest[j + 1];
          r += (r.empty() ? "" : " | ") + std::string("\",\" ws ") + kv[j] + " " + rest[j + 1];
          skippable = optional[j];
        }
        if (skippable) {
          f += f.empty() ? "\"\"" : " | \"\"";
          r += r.empty() ? "\"\"" : " | \"\"";
        }
        rules_[first[i]] = f;
        rules_[rest[i]] = r;
      }
      return define(base, "\"{\" ws " + first[0] + " ws \"}\"");
    }
    if (closed)
      return "\"{\" ws \"}\"";
    if (!extra || (extra->is_boolean() && extra->get<bool>()))
      return use("object");
    // additionalProperties: a schema for every value.
    const std::string v = visit(*extra, path + "/additionalProperties");
    use("string");
    const std::string member = define(path + "-member", "string \":\" ws " + v);
    return define(path.empty() ? "obj" : path,
                  "\"{\" ws (" + member + " (\",\" ws " + member + ")* ws)? \"}\"");
  }

  std::string ref(const json& r, const std::string& path) {
    if (!r.is_string())
      invalid(path, "expected a string");
    const std::string target = r.get<std::string>();
    if (const auto f = refs_.find(target); f != refs_.end())
      return f->second;
    const json* node = nullptr;
    if (target == "#") {
      node = &root_;
    } else if (target.rfind("#/", 0) == 0) {
      // A JSON pointer into the document ($defs/..., definitions/..., or any other place).
      try {
        node = &root_.at(json::json_pointer(target.substr(1)));
      } catch (const json::exception&) {
        invalid(path, "'" + target + "' does not resolve");
      }
    } else {
      unsupported("$ref' to '" + target, path);
    }
    // The rule is named before its body is built, so recursion refers to it.
    const std::string name = fresh("ref" + target.substr(1));
    refs_[target] = name;
    // Each new $ref inside the one being built recurses: a bound keeps a hostile chain of
    // references from overflowing the stack.
    if (++ref_depth_ > kMaxRefDepth)
      unsupported("$ref' chained deeper than " + std::to_string(kMaxRefDepth) + " at '" + target,
                  path);
    rules_[name] = visit(*node, target.substr(1));
    --ref_depth_;
    return name;
  }

  static constexpr int kMaxRefDepth = 256; ///< most $refs being resolved inside each other
  const json& root_;
  int ref_depth_ = 0;
  std::map<std::string, std::string> rules_;
  std::set<std::string> reserved_;
  std::set<std::string> used_common_;
  std::map<std::string, std::string> refs_;
};

} // namespace

std::shared_ptr<const Grammar> grammar_from_json_schema(const nlohmann::json& schema) {
  const std::string text = Converter(schema).run();
  return parse_grammar(text);
}

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> g =
      grammar_from_json_schema(json{{"type", "object"}});
  return g;
}

} // namespace tpullm::grammar
