// Attribute, item and slice access, iteration and len(), as Jinja2's sandboxed environment does
// them over Python values (a missing key or attribute is Undefined; touching Undefined fails).
#include "jinja_builtins.hpp"

namespace tpullm::text::jinja {

namespace {

[[noreturn]] void undefined_use(const Value& v, int line) {
  fail(line, v.hint().empty() ? std::string("use of an undefined value") : v.hint());
}

std::string what_of(const Value& v) {
  return "'" + type_name(v) + " object'";
}

} // namespace

Value get_attr(const Value& obj, const std::string& name, int line) {
  switch (obj.kind()) {
  case Value::Kind::undefined:
    undefined_use(obj, line);
  case Value::Kind::ns: {
    auto it = obj.ns()->find(name);
    if (it == obj.ns()->end())
      return Value::undefined("'Namespace' has no attribute '" + name + "'");
    return Value(*it);
  }
  case Value::Kind::callable:
    return Value::undefined("a function has no attribute '" + name + "'");
  case Value::Kind::data:
    break;
  }
  // Python getattr first: methods of str / dict / list.
  if (auto m = bound_method(obj, name, line))
    return *m;
  if (obj.is_object()) {
    auto it = obj.data().find(name);
    if (it != obj.data().end())
      return Value(*it);
  }
  return Value::undefined(what_of(obj) + " has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key, int line) {
  if (obj.is_undefined())
    undefined_use(obj, line);
  if (key.is_undefined())
    undefined_use(key, line);
  if (obj.is_data()) {
    const Json& j = obj.data();
    if (j.is_object() && key.is_string()) {
      auto it = j.find(key.data().get_ref<const std::string&>());
      if (it != j.end())
        return Value(*it);
    } else if ((j.is_array() || j.is_string()) && (key.is_integer() || key.is_bool())) {
      std::int64_t i =
          key.is_bool() ? (key.data().get<bool>() ? 1 : 0) : key.data().get<std::int64_t>();
      if (j.is_array()) {
        const auto n = static_cast<std::int64_t>(j.size());
        if (i < 0)
          i += n;
        if (i >= 0 && i < n)
          return Value(j[static_cast<std::size_t>(i)]);
      } else {
        const auto cps = utf8_decode(j.get_ref<const std::string&>());
        const auto n = static_cast<std::int64_t>(cps.size());
        if (i < 0)
          i += n;
        if (i >= 0 && i < n)
          return Value(Json(utf8_encode({cps[static_cast<std::size_t>(i)]})));
      }
      return Value::undefined(what_of(obj) + " has no element " + std::to_string(i));
    }
  }
  if (obj.kind() == Value::Kind::ns && key.is_string())
    return get_attr(obj, key.data().get<std::string>(), line);
  // Jinja's getitem falls back to getattr for string keys.
  if (key.is_string()) {
    if (auto m = bound_method(obj, key.data().get<std::string>(), line))
      return *m;
    return Value::undefined(what_of(obj) + " has no attribute '" + key.data().get<std::string>() +
                            "'");
  }
  return Value::undefined(what_of(obj) + " has no element " + to_str(key, line));
}

Value get_slice(const Value& obj, std::optional<std::int64_t> start,
                std::optional<std::int64_t> stop, std::optional<std::int64_t> step, int line) {
  if (obj.is_undefined())
    undefined_use(obj, line);
  if (!obj.is_array() && !obj.is_string())
    fail(line, "'" + type_name(obj) + "' object is not subscriptable with a slice");
  const std::int64_t st = step.value_or(1);
  if (st == 0)
    fail(line, "slice step cannot be zero");
  std::vector<char32_t> cps;
  std::int64_t n = 0;
  if (obj.is_string()) {
    cps = utf8_decode(obj.data().get_ref<const std::string&>());
    n = static_cast<std::int64_t>(cps.size());
  } else {
    n = static_cast<std::int64_t>(obj.data().size());
  }
  // Python's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
    if (!v)
      return dflt;
    std::int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0)
        x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const std::int64_t b = adjust(start, st < 0 ? n - 1 : 0);
  const std::int64_t e = adjust(stop, st < 0 ? -1 : n);
  std::vector<std::int64_t> idx;
  if (st > 0)
    for (std::int64_t i = b; i < e; i += st)
      idx.push_back(i);
  else
    for (std::int64_t i = b; i > e; i += st)
      idx.push_back(i);
  if (obj.is_string()) {
    std::vector<char32_t> out;
    for (std::int64_t i : idx)
      out.push_back(cps[static_cast<std::size_t>(i)]);
    return Value(Json(utf8_encode(out)));
  }
  Json out = Json::array();
  for (std::int64_t i : idx)
    out.push_back(obj.data()[static_cast<std::size_t>(i)]);
  return Value(std::move(out));
}

std::vector<Value> iterate(const Value& v, int line) {
  std::vector<Value> out;
  switch (v.kind()) {
  case Value::Kind::undefined:
    return out;
  case Value::Kind::ns:
  case Value::Kind::callable:
    fail(line, "'" + type_name(v) + "' object is not iterable");
  case Value::Kind::data:
    break;
  }
  const Json& j = v.data();
  if (j.is_array()) {
    for (const Json& e : j)
      out.emplace_back(e);
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      out.emplace_back(Json(it.key()));
  } else if (j.is_string()) {
    for (char32_t c : utf8_decode(j.get_ref<const std::string&>()))
      out.emplace_back(Json(utf8_encode({c})));
  } else {
    fail(line, "'" + type_name(v) + "' object is not iterable");
  }
  return out;
}

std::int64_t length_of(const Value& v, int line) {
  if (v.is_undefined())
    return 0;
  if (v.is_string())
    return static_cast<std::int64_t>(utf8_decode(v.data().get_ref<const std::string&>()).size());
  if (v.is_array() || v.is_object())
    return static_cast<std::int64_t>(v.data().size());
  if (v.kind() == Value::Kind::ns)
    fail(line, "object of type 'Namespace' has no len()");
  fail(line, "object of type '" + type_name(v) + "' has no len()");
}

} // namespace tpullm::text::jinja
