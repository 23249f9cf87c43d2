// Methods templates call on Python values: str.strip / split / startswith / replace / upper ...,
// dict.items / keys / values / get. Other methods of those types are refused by name (the
// sandbox transformers uses refuses the mutating ones too).
#include <set>

#include "jinja_builtins.hpp"

namespace tpullm::text::jinja {

std::optional<Value> take_arg(CallArgs& args, std::size_t index, const std::string& name) {
  for (auto it = args.kw.begin(); it != args.kw.end(); ++it) {
    if (it->first == name) {
      Value v = std::move(it->second);
      args.kw.erase(it);
      return v;
    }
  }
  if (index < args.pos.size())
    return args.pos[index];
  return std::nullopt;
}

void check_args(const CallArgs& args, std::size_t max_pos,
                std::initializer_list<std::string_view> allowed, const std::string& what,
                int line) {
  if (args.pos.size() > max_pos)
    fail(line, str_cat(what, " takes at most ", max_pos, " positional arguments (", args.pos.size(),
                       " given)"));
  for (const auto& [k, v] : args.kw) {
    bool ok = false;
    for (std::string_view a : allowed)
      ok = ok || a == k;
    if (!ok)
      fail(line, str_cat(what, " got an unexpected keyword argument '", k, "'"));
  }
}

std::int64_t as_int(const Value& v, const std::string& what, int line) {
  if (v.is_integer())
    return v.data().get<std::int64_t>();
  if (v.is_bool())
    return v.data().get<bool>() ? 1 : 0;
  fail(line, str_cat(what, " must be an integer, not '", type_name(v), "'"));
}

const std::string& as_string(const Value& v, const std::string& what, int line) {
  if (!v.is_string())
    fail(line, str_cat(what, " must be a string, not '", type_name(v), "'"));
  return v.data().get_ref<const std::string&>();
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, int side) {
  const auto cps = utf8_decode(s);
  std::vector<char32_t> set;
  if (chars)
    set = utf8_decode(*chars);
  const auto strip_it = [&](char32_t c) {
    if (!chars)
      return py_isspace(c);
    for (char32_t x : set)
      if (x == c)
        return true;
    return false;
  };
  std::size_t b = 0, e = cps.size();
  if (side != 2)
    while (b < e && strip_it(cps[b]))
      ++b;
  if (side != 1)
    while (e > b && strip_it(cps[e - 1]))
      --e;
  return utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                           cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

namespace {

std::optional<std::string> opt_chars(const std::optional<Value>& v, const std::string& what,
                                     int line) {
  if (!v || v->is_null())
    return std::nullopt;
  return as_string(*v, what, line);
}

bool ascii_only(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80)
      return false;
  return true;
}

// Case mapping of ASCII text; non-ASCII text is refused (Python maps all of Unicode).
std::string case_map(const std::string& s, const std::string& method, int line) {
  if (!ascii_only(s))
    refuse(line, "str." + method + "() of non-ASCII text is not supported");
  std::string out = s;
  bool prev_cased = false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    char& c = out[i];
    const bool upper = c >= 'A' && c <= 'Z', lower = c >= 'a' && c <= 'z';
    const auto to_up = [&] { c = lower ? static_cast<char>(c - 32) : c; };
    const auto to_low = [&] { c = upper ? static_cast<char>(c + 32) : c; };
    if (method == "upper")
      to_up();
    else if (method == "lower")
      to_low();
    else if (method == "title")
      prev_cased ? to_low() : to_up();
    else if (method == "capitalize")
      i == 0 ? to_up() : to_low();
    prev_cased = upper || lower;
  }
  return out;
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  std::int64_t maxsplit, int line) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty())
      fail(line, "str.split(): empty separator");
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
      const std::size_t f = s.find(*sep, pos);
      if (f == std::string::npos)
        break;
      out.push_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  // Runs of whitespace separate; leading / trailing whitespace yields no empty pieces.
  const auto cps = utf8_decode(s);
  std::size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && py_isspace(cps[i]))
      ++i;
    if (i >= cps.size())
      break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) >= maxsplit) {
      std::size_t e = cps.size();
      while (e > i && py_isspace(cps[e - 1]))
        --e;
      out.push_back(
          utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(i),
                                            cps.begin() + static_cast<std::ptrdiff_t>(e))));
      break;
    }
    std::size_t j = i;
    while (j < cps.size() && !py_isspace(cps[j]))
      ++j;
    out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(i),
                                                    cps.begin() + static_cast<std::ptrdiff_t>(j))));
    i = j;
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       std::int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` before every code point and at the end.
    const auto cps = utf8_decode(s);
    std::int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out += utf8_encode({c});
      if (out.size() > max_value_size)
        fail(0, "str.replace() result too large");
    }
    if (count < 0 || done < count)
      out += repl;
    return out;
  }
  std::size_t pos = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const std::size_t f = s.find(old, pos);
    if (f == std::string::npos)
      break;
    out += s.substr(pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++done;
    if (out.size() > max_value_size)
      fail(0, "str.replace() result too large");
  }
  return out + s.substr(pos);
}

Value str_method(const std::string& self, const std::string& name, CallArgs& a, int line) {
  const std::string what = "str." + name + "()";
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    check_args(a, 1, {}, what, line);
    const int side = name == "strip" ? 0 : name == "lstrip" ? 1 : 2;
    return Value(Json(py_strip(self, opt_chars(take_arg(a, 0, "chars"), what, line), side)));
  }
  if (name == "split") {
    check_args(a, 2, {"sep", "maxsplit"}, what, line);
    const auto sep = opt_chars(take_arg(a, 0, "sep"), what, line);
    const auto ms = take_arg(a, 1, "maxsplit");
    Json out = Json::array();
    for (auto& p : py_split(self, sep, ms ? as_int(*ms, what, line) : -1, line))
      out.push_back(std::move(p));
    return Value(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    check_args(a, 1, {}, what, line);
    auto arg = take_arg(a, 0, "prefix");
    if (!arg)
      fail(line, what + " takes one argument");
    std::vector<std::string> cands;
    if (arg->is_array()) {
      for (const Json& e : arg->data()) {
        if (!e.is_string())
          fail(line, what + ": tuple items must be strings");
        cands.push_back(e.get<std::string>());
      }
    } else {
      cands.push_back(as_string(*arg, what, line));
    }
    for (const auto& c : cands) {
      const bool hit =
          c.size() <= self.size() &&
          (name == "startswith" ? self.compare(0, c.size(), c) == 0
                                : self.compare(self.size() - c.size(), c.size(), c) == 0);
      if (hit)
        return Value(Json(true));
    }
    return Value(Json(false));
  }
  if (name == "replace") {
    check_args(a, 3, {"count"}, what, line);
    auto o = take_arg(a, 0, "old"), n = take_arg(a, 1, "new");
    if (!o || !n)
      fail(line, what + " takes two arguments");
    const auto c = take_arg(a, 2, "count");
    return Value(Json(py_replace(self, as_string(*o, what, line), as_string(*n, what, line),
                                 c ? as_int(*c, what, line) : -1)));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    check_args(a, 0, {}, what, line);
    return Value(Json(case_map(self, name, line)));
  }
  if (name == "join") {
    check_args(a, 1, {}, what, line);
    auto items = take_arg(a, 0, "iterable");
    if (!items)
      fail(line, what + " takes one argument");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(*items, line)) {
      if (!first)
        out += self;
      first = false;
      out += as_string(v, what + " item", line);
      if (out.size() > max_value_size)
        fail(line, what + " result too large");
    }
    return Value(Json(out));
  }
  if (name == "find" || name == "count") {
    check_args(a, 1, {}, what, line);
    auto sub = take_arg(a, 0, "sub");
    if (!sub)
      fail(line, what + " takes one argument");
    const std::string& t = as_string(*sub, what, line);
    if (name == "find") {
      const std::size_t f = self.find(t);
      if (f == std::string::npos)
        return Value(Json(-1));
      return Value(Json(static_cast<std::int64_t>(utf8_decode(self.substr(0, f)).size())));
    }
    if (t.empty())
      return Value(Json(static_cast<std::int64_t>(utf8_decode(self).size()) + 1));
    std::int64_t n = 0;
    for (std::size_t p = self.find(t); p != std::string::npos; p = self.find(t, p + t.size()))
      ++n;
    return Value(Json(n));
  }
  refuse(line, "str." + name + "() is not supported");
}

Value dict_method(const Json& self, const std::string& name, CallArgs& a, int line) {
  const std::string what = "dict." + name + "()";
  if (name == "items" || name == "keys" || name == "values") {
    check_args(a, 0, {}, what, line);
    Json out = Json::array();
    for (auto it = self.begin(); it != self.end(); ++it) {
      if (name == "items")
        out.push_back(Json::array({it.key(), it.value()}));
      else if (name == "keys")
        out.push_back(it.key());
      else
        out.push_back(it.value());
    }
    return Value(std::move(out));
  }
  if (name == "get") {
    check_args(a, 2, {}, what, line);
    auto k = take_arg(a, 0, "key");
    if (!k)
      fail(line, what + " takes a key");
    auto d = take_arg(a, 1, "default");
    if (k->is_string()) {
      auto it = self.find(k->data().get<std::string>());
      if (it != self.end())
        return Value(*it);
    }
    return d ? *d : Value(Json(nullptr));
  }
  refuse(line, "dict." + name + "() is not supported");
}

const std::set<std::string, std::less<>>& str_methods() {
  static const std::set<std::string, std::less<>> s = {
      "strip", "lstrip", "rstrip", "split", "startswith", "endswith", "replace", "upper", "lower",
      "title", "capitalize", "join", "find", "count",
      // Python str methods outside the subset: refused when called.
      "casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum",
      "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
      "isprintable", "isspace", "istitle", "isupper", "ljust", "maketrans", "partition",
      "removeprefix", "removesuffix", "rfind", "rindex", "rjust", "rpartition", "rsplit",
      "splitlines", "swapcase", "translate", "zfill"};
  return s;
}

const std::set<std::string, std::less<>>& dict_methods() {
  static const std::set<std::string, std::less<>> s = {"items",   "keys",       "values",   "get",
                                                       "clear",   "copy",       "fromkeys", "pop",
                                                       "popitem", "setdefault", "update"};
  return s;
}

const std::set<std::string, std::less<>>& list_methods() {
  static const std::set<std::string, std::less<>> s = {"append", "clear",   "copy",   "count",
                                                       "extend", "index",   "insert", "pop",
                                                       "remove", "reverse", "sort"};
  return s;
}

} // namespace

std::optional<Value> bound_method(const Value& obj, const std::string& name, int line) {
  if (!obj.is_data())
    return std::nullopt;
  if (obj.is_string() && str_methods().count(name)) {
    const std::string self = obj.data().get<std::string>();
    return Value::make_callable(
        "str." + name, [self, name, line](CallArgs& a) { return str_method(self, name, a, line); });
  }
  if (obj.is_object() && dict_methods().count(name)) {
    const Json self = obj.data();
    return Value::make_callable("dict." + name, [self, name, line](CallArgs& a) {
      return dict_method(self, name, a, line);
    });
  }
  if (obj.is_array() && list_methods().count(name)) {
    return Value::make_callable("list." + name, [name, line](CallArgs&) -> Value {
      refuse(line, "list." + name + "() is not supported");
    });
  }
  return std::nullopt;
}

} // namespace tpullm::text::jinja
