// The filter table: Jinja2's built-in filters that chat templates use, plus transformers'
// `tojson` (Python json.dumps, ensure_ascii=False by default, optional indent / sort_keys).
#include <cmath>
#include <functional>
#include <map>

#include "jinja_builtins.hpp"

namespace tpullm::text::jinja {
namespace {

using FilterFn = std::function<Value(const Value&, CallArgs&, int)>;

Json to_json_data(const Value& v, int line) {
  if (!v.is_data())
    fail(line, "Object of type " + type_name(v) + " is not JSON serializable");
  return v.data();
}

// \uXXXX escapes (UTF-16 surrogate pairs above the BMP) of non-ASCII code points, for
// json.dumps(ensure_ascii=True).
std::string ascii_escape(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    char buf[16];
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c <= 0xFFFF) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      const char32_t v = c - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      out += buf;
    }
  }
  return out;
}

Value f_tojson(const Value& v, CallArgs& a, int line) {
  check_args(a, 4, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson", line);
  const auto ea = take_arg(a, 0, "ensure_ascii");
  const auto ind = take_arg(a, 1, "indent");
  const auto sep = take_arg(a, 2, "separators");
  const auto sk = take_arg(a, 3, "sort_keys");
  if (sep && !sep->is_null())
    refuse(line, "tojson(separators=...) is not supported");
  int indent = -1;
  if (ind && !ind->is_null()) {
    const std::int64_t n = as_int(*ind, "tojson indent", line);
    if (n < 0 || n > 64)
      refuse(line, "tojson indent must be within [0, 64]");
    indent = static_cast<int>(n);
  }
  std::string s = py_json_dumps(to_json_data(v, line), indent, sk && truthy(*sk));
  if (ea && truthy(*ea))
    s = ascii_escape(s);
  return Value(Json(std::move(s)));
}

Value f_trim(const Value& v, CallArgs& a, int line) {
  check_args(a, 1, {"chars"}, "trim", line);
  const auto c = take_arg(a, 0, "chars");
  std::optional<std::string> chars;
  if (c && !c->is_null())
    chars = as_string(*c, "trim chars", line);
  return Value(Json(py_strip(to_str(v, line), chars, 0)));
}

Value f_items(const Value& v, CallArgs& a, int line) {
  check_args(a, 0, {}, "items", line);
  if (v.is_undefined())
    return Value(Json::array());
  if (!v.is_object())
    fail(line, "items filter: can only get item pairs from a mapping, not '" + type_name(v) + "'");
  Json out = Json::array();
  for (auto it = v.data().begin(); it != v.data().end(); ++it)
    out.push_back(Json::array({it.key(), it.value()}));
  return Value(std::move(out));
}

Value f_length(const Value& v, CallArgs& a, int line) {
  check_args(a, 0, {}, "length", line);
  return Value(Json(length_of(v, line)));
}

// Jinja's attribute getter for filters: "a.b.0" walks getitem on each part.
Value attr_path(const Value& v, const std::string& path, int line) {
  Value cur = v;
  std::size_t b = 0;
  while (true) {
    const std::size_t e = path.find('.', b);
    const std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    bool digits = !part.empty();
    for (char c : part)
      digits = digits && c >= '0' && c <= '9';
    if (cur.is_undefined())
      return cur;
    cur = digits ? get_item(cur, Value(Json(std::stoll(part))), line)
                 : get_item(cur, Value(Json(part)), line);
    if (e == std::string::npos)
      return cur;
    b = e + 1;
  }
}

Value f_join(const Value& v, CallArgs& a, int line) {
  check_args(a, 2, {"d", "attribute"}, "join", line);
  const auto d = take_arg(a, 0, "d");
  const auto attr = take_arg(a, 1, "attribute");
  const std::string sep = d ? to_str(*d, line) : "";
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v, line)) {
    if (!first)
      out += sep;
    first = false;
    out += to_str(attr && !attr->is_null() ? attr_path(x, to_str(*attr, line), line) : x, line);
    if (out.size() > max_value_size)
      fail(line, "join result too large");
  }
  return Value(Json(out));
}

// select / reject / selectattr / rejectattr: keep the items for which the test (or truthiness)
// is `keep`.
Value select_like(const Value& v, CallArgs& a, int line, bool keep, bool by_attr,
                  const std::string& what) {
  if (!a.kw.empty())
    fail(line, what + " takes no keyword arguments");
  std::size_t k = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty())
      fail(line, what + " needs an attribute name");
    attr = as_string(a.pos[k++], what + " attribute", line);
  }
  std::string test;
  if (k < a.pos.size())
    test = as_string(a.pos[k++], what + " test", line);
  if (!test.empty() && !is_test(test))
    refuse(line, "no test named '" + test + "'");
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k), a.pos.end());
  Json out = Json::array();
  for (const Value& x : iterate(v, line)) {
    const Value subject = by_attr ? attr_path(x, attr, line) : x;
    CallArgs ta = rest;
    const bool pass = test.empty() ? truthy(subject) : apply_test(test, subject, ta, line);
    if (pass == keep) {
      if (!x.is_data())
        refuse(line, what + " over non-data items is not supported");
      out.push_back(x.data());
    }
  }
  return Value(std::move(out));
}

Value f_map(const Value& v, CallArgs& a, int line) {
  Json out = Json::array();
  const auto attr = take_arg(a, 99, "attribute");
  if (attr) {
    const auto dflt = take_arg(a, 99, "default");
    check_args(a, 0, {}, "map(attribute=...)", line);
    for (const Value& x : iterate(v, line)) {
      Value y = attr_path(x, to_str(*attr, line), line);
      if (y.is_undefined() && dflt)
        y = *dflt;
      if (y.is_undefined())
        refuse(line, "map(attribute=...) producing undefined items is not supported");
      out.push_back(to_json_data(y, line));
    }
    return Value(std::move(out));
  }
  if (a.pos.empty())
    fail(line, "map needs a filter name or attribute=");
  const std::string filter = as_string(a.pos[0], "map filter", line);
  if (!is_filter(filter))
    refuse(line, "no filter named '" + filter + "'");
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& x : iterate(v, line)) {
    CallArgs fa = rest;
    out.push_back(to_json_data(apply_filter(filter, x, fa, line), line));
  }
  return Value(std::move(out));
}

Value f_first_last(const Value& v, CallArgs& a, int line, bool first) {
  check_args(a, 0, {}, first ? "first" : "last", line);
  std::vector<Value> items = iterate(v, line);
  if (items.empty())
    return Value::undefined("No first item, sequence was empty.");
  return first ? items.front() : items.back();
}

Value f_case(const Value& v, CallArgs& a, int line, const std::string& method) {
  check_args(a, 0, {}, method, line);
  CallArgs none;
  auto m = bound_method(Value(Json(to_str(v, line))), method, line);
  return m->fn().call(none);
}

// Python int() of a string: optional sign, digits with single underscores, surrounding spaces.
std::optional<std::int64_t> parse_int(const std::string& s, std::int64_t base) {
  const std::string t = py_strip(s, std::nullopt, 0);
  if (t.empty())
    return std::nullopt;
  std::size_t i = 0;
  bool neg = false;
  if (t[0] == '+' || t[0] == '-') {
    neg = t[0] == '-';
    i = 1;
  }
  if (i >= t.size())
    return std::nullopt;
  std::int64_t v = 0;
  bool prev_us = true;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_') {
      if (prev_us)
        return std::nullopt;
      prev_us = true;
      continue;
    }
    int d = -1;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'z')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'Z')
      d = c - 'A' + 10;
    if (d < 0 || d >= base)
      return std::nullopt;
    if (v > (INT64_MAX - d) / base)
      return std::nullopt;
    v = v * base + d;
    prev_us = false;
  }
  if (prev_us)
    return std::nullopt;
  return neg ? -v : v;
}

Value f_int(const Value& v, CallArgs& a, int line) {
  check_args(a, 2, {"default", "base"}, "int", line);
  const auto d = take_arg(a, 0, "default");
  const auto b = take_arg(a, 1, "base");
  const Value dflt = d ? *d : Value(Json(0));
  const std::int64_t base = b ? as_int(*b, "int base", line) : 10;
  if (base < 2 || base > 36)
    refuse(line, "int base must be within [2, 36]");
  if (v.is_integer())
    return v;
  if (v.is_bool())
    return Value(Json(v.data().get<bool>() ? 1 : 0));
  if (v.is_number()) {
    const double x = v.data().get<double>();
    if (!std::isfinite(x) || std::fabs(x) > 9.2e18)
      return dflt;
    return Value(Json(static_cast<std::int64_t>(std::trunc(x))));
  }
  if (v.is_string()) {
    if (auto n = parse_int(v.data().get<std::string>(), base))
      return Value(Json(*n));
    // Jinja tries float(value) next.
    try {
      std::size_t used = 0;
      const std::string t = py_strip(v.data().get<std::string>(), std::nullopt, 0);
      const double x = std::stod(t, &used);
      if (used == t.size() && std::isfinite(x) && std::fabs(x) < 9.2e18)
        return Value(Json(static_cast<std::int64_t>(std::trunc(x))));
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

Value f_default(const Value& v, CallArgs& a, int line) {
  check_args(a, 2, {"default_value", "boolean"}, "default", line);
  const auto d = take_arg(a, 0, "default_value");
  const auto b = take_arg(a, 1, "boolean");
  const bool use = v.is_undefined() || (b && truthy(*b) && !truthy(v));
  if (use)
    return d ? *d : Value(Json(""));
  return v;
}

Value f_list(const Value& v, CallArgs& a, int line) {
  check_args(a, 0, {}, "list", line);
  Json out = Json::array();
  for (const Value& x : iterate(v, line))
    out.push_back(to_json_data(x, line));
  return Value(std::move(out));
}

Value f_reverse(const Value& v, CallArgs& a, int line) {
  check_args(a, 0, {}, "reverse", line);
  if (v.is_string())
    return get_slice(v, std::nullopt, std::nullopt, -1, line);
  Json out = Json::array();
  std::vector<Value> items = iterate(v, line);
  for (auto it = items.rbegin(); it != items.rend(); ++it)
    out.push_back(to_json_data(*it, line));
  return Value(std::move(out));
}

Value f_replace(const Value& v, CallArgs& a, int line) {
  check_args(a, 3, {"old", "new", "count"}, "replace", line);
  CallArgs m = a;
  auto fn = bound_method(Value(Json(to_str(v, line))), "replace", line);
  return fn->fn().call(m);
}

const std::map<std::string, FilterFn, std::less<>>& table() {
  static const std::map<std::string, FilterFn, std::less<>> t = {
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"items", f_items},
      {"length", f_length},
      {"count", f_length},
      {"join", f_join},
      {"select", [](const Value& v, CallArgs& a,
                    int l) { return select_like(v, a, l, true, false, "select"); }},
      {"reject", [](const Value& v, CallArgs& a,
                    int l) { return select_like(v, a, l, false, false, "reject"); }},
      {"selectattr", [](const Value& v, CallArgs& a,
                        int l) { return select_like(v, a, l, true, true, "selectattr"); }},
      {"rejectattr", [](const Value& v, CallArgs& a,
                        int l) { return select_like(v, a, l, false, true, "rejectattr"); }},
      {"map", f_map},
      {"first", [](const Value& v, CallArgs& a, int l) { return f_first_last(v, a, l, true); }},
      {"last", [](const Value& v, CallArgs& a, int l) { return f_first_last(v, a, l, false); }},
      {"upper", [](const Value& v, CallArgs& a, int l) { return f_case(v, a, l, "upper"); }},
      {"lower", [](const Value& v, CallArgs& a, int l) { return f_case(v, a, l, "lower"); }},
      {"title", [](const Value& v, CallArgs& a, int l) { return f_case(v, a, l, "title"); }},
      {"capitalize",
       [](const Value& v, CallArgs& a, int l) { return f_case(v, a, l, "capitalize"); }},
      {"string",
       [](const Value& v, CallArgs& a, int l) {
         check_args(a, 0, {}, "string", l);
         return Value(Json(to_str(v, l)));
       }},
      {"safe",
       [](const Value& v, CallArgs& a, int l) {
         check_args(a, 0, {}, "safe", l);
         return Value(Json(to_str(v, l)));
       }},
      {"int", f_int},
      {"default", f_default},
      {"d", f_default},
      {"list", f_list},
      {"reverse", f_reverse},
      {"replace", f_replace},
  };
  return t;
}

} // namespace

bool is_filter(const std::string& name) {
  return table().count(name) != 0;
}

Value apply_filter(const std::string& name, const Value& subject, CallArgs& args, int line) {
  auto it = table().find(name);
  if (it == table().end())
    refuse(line, "no filter named '" + name + "'");
  return it->second(subject, args, line);
}

} // namespace tpullm::text::jinja
