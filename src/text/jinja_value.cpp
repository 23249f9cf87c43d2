// Python semantics of template values: truthiness, str() / repr(), json.dumps, == and <.
#include "jinja_value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tpullm/support/utf8.hpp"

namespace tpullm::text::jinja {

std::string one_line(std::string_view message) {
  std::string out;
  for (char c : message) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  return out;
}

void fail(int line, std::string_view message) {
  throw Error(ErrorKind::invalid_input, str_cat("chat template line ", line), one_line(message));
}

void refuse(int line, std::string_view message) {
  throw Error(ErrorKind::unsupported, str_cat("chat template line ", line), one_line(message));
}

namespace {
thread_local RenderBudget* t_budget = nullptr;
} // namespace

BudgetScope::BudgetScope(RenderBudget& b) : saved_(t_budget) {
  t_budget = &b;
}

BudgetScope::~BudgetScope() {
  t_budget = saved_;
}

std::uint64_t value_cost(const Json& j, int line) {
  constexpr std::uint64_t item = 32;
  if (j.is_string())
    return item + j.get_ref<const std::string&>().size();
  if (!j.is_structured())
    return item;
  std::uint64_t cost = 0;
  std::vector<std::pair<const Json*, int>> todo{{&j, 1}};
  while (!todo.empty()) {
    const auto [x, depth] = todo.back();
    todo.pop_back();
    cost += item;
    if (x->is_string()) {
      cost += x->get_ref<const std::string&>().size();
    } else if (x->is_structured()) {
      if (depth >= max_value_depth && !x->empty())
        fail(line, str_cat("a value nested deeper than ", max_value_depth, " levels"));
      for (auto it = x->begin(); it != x->end(); ++it) {
        if (x->is_object())
          cost += it.key().size();
        todo.emplace_back(&*it, depth + 1);
      }
    }
  }
  return cost;
}

void charge_bytes(std::uint64_t bytes) {
  RenderBudget* b = t_budget;
  if (b == nullptr)
    return;
  b->work += bytes;
  if (b->work > b->max_work)
    fail(b->line, str_cat("the template built more than ", b->max_work,
                          " bytes of values (its work budget)"));
}

void charge(const Json& j) {
  RenderBudget* b = t_budget;
  if (b == nullptr)
    return;
  charge_bytes(value_cost(j, b->line));
}

bool truthy(const Value& v) {
  switch (v.kind()) {
  case Value::Kind::undefined:
    return false;
  case Value::Kind::ns:
  case Value::Kind::callable:
    return true;
  case Value::Kind::data:
    break;
  }
  const Json& j = v.data();
  switch (j.type()) {
  case Json::value_t::null:
  case Json::value_t::discarded:
    return false;
  case Json::value_t::boolean:
    return j.get<bool>();
  case Json::value_t::number_integer:
    return j.get<std::int64_t>() != 0;
  case Json::value_t::number_unsigned:
    return j.get<std::uint64_t>() != 0;
  case Json::value_t::number_float:
    return j.get<double>() != 0.0;
  case Json::value_t::string:
    return !j.get_ref<const std::string&>().empty();
  case Json::value_t::array:
  case Json::value_t::object:
  case Json::value_t::binary:
    return !j.empty();
  }
  return false;
}

std::string py_float(double d) {
  if (std::isnan(d))
    return "nan";
  if (std::isinf(d))
    return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits and exponent, then Python's repr layout: fixed notation when the
  // decimal point falls within [-4, 16), else d.ddde[+-]XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const auto e = s.find('e');
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(s.substr(e + 1));
  const int decpt = exp10 + 1;
  std::string out;
  if (decpt > 16 || decpt < -3) {
    out = digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  } else if (decpt <= 0) {
    out = "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
  } else if (static_cast<std::size_t>(decpt) >= digits.size()) {
    out = digits + std::string(static_cast<std::size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<std::size_t>(decpt)) + "." +
          digits.substr(static_cast<std::size_t>(decpt));
  }
  return sign + out;
}

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    char32_t cp = 0;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    bool ok = i + static_cast<std::size_t>(n) < s.size();
    for (int k = 1; ok && k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((cc & 0xC0) != 0x80)
        ok = false;
      else
        cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<std::size_t>(n) + 1;
  }
  return out;
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t c : cps)
    append_utf8(out, c);
  return out;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

namespace {

// Python str.isprintable() for the code points repr() escapes in practice: controls, the
// separators other than ' ', and the common format characters (soft hyphen, zero-width ones,
// bidi controls, BOM).
bool py_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD)
    return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || c == 0x3000 || c == 0xFEFF)
    return false;
  return true;
}

std::string str_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    char buf[16];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<char32_t>(q)) {
      out += '\\';
      out += q;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_printable(c)) {
      if (c <= 0xFF)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c <= 0xFFFF)
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += utf8_encode({c});
    }
  }
  out += q;
  return out;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      } else {
        out += ch;
      }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Json& j, int indent, bool sort_keys, int depth) {
  const auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent * d), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (j.type()) {
  case Json::value_t::null:
  case Json::value_t::discarded:
  case Json::value_t::binary:
    out += "null";
    return;
  case Json::value_t::boolean:
    out += j.get<bool>() ? "true" : "false";
    return;
  case Json::value_t::number_integer:
    out += std::to_string(j.get<std::int64_t>());
    return;
  case Json::value_t::number_unsigned:
    out += std::to_string(j.get<std::uint64_t>());
    return;
  case Json::value_t::number_float: {
    const double d = j.get<double>();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py_float(d);
    return;
  }
  case Json::value_t::string:
    json_string(out, j.get_ref<const std::string&>());
    return;
  case Json::value_t::array: {
    if (j.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    bool first = true;
    for (const Json& e : j) {
      if (!first)
        out += item_sep;
      first = false;
      if (indent >= 0)
        newline(depth + 1);
      json_dump(out, e, indent, sort_keys, depth + 1);
    }
    if (indent >= 0)
      newline(depth);
    out += ']';
    return;
  }
  case Json::value_t::object: {
    if (j.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::string*> keys;
    for (auto it = j.begin(); it != j.end(); ++it)
      keys.push_back(&it.key());
    if (sort_keys)
      std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return *a < *b; });
    out += '{';
    bool first = true;
    for (const std::string* k : keys) {
      if (!first)
        out += item_sep;
      first = false;
      if (indent >= 0)
        newline(depth + 1);
      json_string(out, *k);
      out += ": ";
      json_dump(out, j.at(*k), indent, sort_keys, depth + 1);
    }
    if (indent >= 0)
      newline(depth);
    out += '}';
    return;
  }
  }
}

} // namespace

std::string py_json_dumps(const Json& j, int indent, bool sort_keys) {
  std::string out;
  json_dump(out, j, indent, sort_keys, 0);
  return out;
}

std::string py_repr(const Json& j) {
  switch (j.type()) {
  case Json::value_t::null:
  case Json::value_t::discarded:
  case Json::value_t::binary:
    return "None";
  case Json::value_t::boolean:
    return j.get<bool>() ? "True" : "False";
  case Json::value_t::number_integer:
    return std::to_string(j.get<std::int64_t>());
  case Json::value_t::number_unsigned:
    return std::to_string(j.get<std::uint64_t>());
  case Json::value_t::number_float:
    return py_float(j.get<double>());
  case Json::value_t::string:
    return str_repr(j.get_ref<const std::string&>());
  case Json::value_t::array: {
    std::string out = "[";
    bool first = true;
    for (const Json& e : j) {
      if (!first)
        out += ", ";
      first = false;
      out += py_repr(e);
    }
    return out + "]";
  }
  case Json::value_t::object: {
    std::string out = "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first)
        out += ", ";
      first = false;
      out += str_repr(it.key()) + ": " + py_repr(it.value());
    }
    return out + "}";
  }
  }
  return "None";
}

std::string to_str(const Value& v, int line) {
  switch (v.kind()) {
  case Value::Kind::undefined:
    return "";
  case Value::Kind::ns:
    return "<Namespace " + py_repr(*v.ns()) + ">";
  case Value::Kind::callable:
    refuse(line, "printing a function ('" + v.fn().name + "') is not supported");
  case Value::Kind::data:
    break;
  }
  if (v.is_string())
    return v.data().get<std::string>();
  return py_repr(v.data());
}

namespace {

/// A JSON number or boolean as Python's numeric tower sees it (True == 1), widened to compare.
long double num(const Json& x) {
  if (x.is_boolean())
    return x.get<bool>() ? 1 : 0;
  if (x.is_number_integer())
    return static_cast<long double>(x.get<std::int64_t>());
  if (x.is_number_unsigned())
    return static_cast<long double>(x.get<std::uint64_t>());
  return x.get<double>();
}

bool json_equals(const Json& a, const Json& b) {
  const bool an = a.is_number() || a.is_boolean();
  const bool bn = b.is_number() || b.is_boolean();
  if (an && bn) {
    return num(a) == num(b);
  }
  if (a.type() != b.type())
    return false;
  if (a.is_array()) {
    if (a.size() != b.size())
      return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!json_equals(a[i], b[i]))
        return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size())
      return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto f = b.find(it.key());
      if (f == b.end() || !json_equals(it.value(), *f))
        return false;
    }
    return true;
  }
  return a == b;
}

} // namespace

bool equals(const Value& a, const Value& b) {
  if (a.kind() != b.kind())
    return false;
  switch (a.kind()) {
  case Value::Kind::undefined:
    return true;
  case Value::Kind::ns:
    return a.ns() == b.ns();
  case Value::Kind::callable:
    return &a.fn() == &b.fn();
  case Value::Kind::data:
    break;
  }
  return json_equals(a.data(), b.data());
}

int compare(const Value& a, const Value& b, int line) {
  const bool an = a.is_data() && (a.data().is_number() || a.data().is_boolean());
  const bool bn = b.is_data() && (b.data().is_number() || b.data().is_boolean());
  if (an && bn) {
    const long double x = num(a.data()), y = num(b.data());
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 is code point order, as Python compares str.
    const int c =
        a.data().get_ref<const std::string&>().compare(b.data().get_ref<const std::string&>());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  fail(line,
       "'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
  case Value::Kind::undefined:
    return "undefined";
  case Value::Kind::ns:
    return "Namespace";
  case Value::Kind::callable:
    return "function";
  case Value::Kind::data:
    break;
  }
  switch (v.data().type()) {
  case Json::value_t::null:
  case Json::value_t::discarded:
  case Json::value_t::binary:
    return "NoneType";
  case Json::value_t::boolean:
    return "bool";
  case Json::value_t::number_integer:
  case Json::value_t::number_unsigned:
    return "int";
  case Json::value_t::number_float:
    return "float";
  case Json::value_t::string:
    return "str";
  case Json::value_t::array:
    return "list";
  case Json::value_t::object:
    return "dict";
  }
  return "object";
}

} // namespace tpullm::text::jinja
