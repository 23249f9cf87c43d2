// The test table (`x is defined`, `x is not none`, ...): Jinja2's built-in tests over Python
// values.
#include <cmath>
#include <functional>
#include <map>

#include "jinja_builtins.hpp"

namespace tpullm::text::jinja {
namespace {

using TestFn = std::function<bool(const Value&, CallArgs&, int)>;

Value one_arg(CallArgs& a, const std::string& what, int line) {
  check_args(a, 1, {}, what, line);
  if (a.pos.size() != 1)
    fail(line, "test '" + what + "' takes one argument");
  return a.pos[0];
}

TestFn no_arg(std::function<bool(const Value&)> f, std::string what) {
  return [f = std::move(f), what = std::move(what)](const Value& v, CallArgs& a, int line) {
    check_args(a, 0, {}, "test '" + what + "'", line);
    return f(v);
  };
}

/// Python's str.islower / str.isupper over ASCII: a string with at least one letter of case
/// `want` (its first letter 'a' or 'A') and none of the other (`other`).
bool all_cased_as(const Value& v, char want, char other) {
  if (!v.is_string())
    return false;
  bool cased = false;
  for (char c : v.data().get_ref<const std::string&>()) {
    if (c >= other && c <= other + 25)
      return false;
    cased = cased || (c >= want && c <= want + 25);
  }
  return cased;
}

TestFn cmp_test(std::function<bool(int)> ok, std::string what) {
  return [ok = std::move(ok), what = std::move(what)](const Value& v, CallArgs& a, int line) {
    return ok(compare(v, one_arg(a, what, line), line));
  };
}

bool in_test(const Value& v, const Value& container, int line) {
  if (container.is_string()) {
    if (!v.is_string())
      fail(line, "'in <string>' requires string as left operand, not " + type_name(v));
    return container.data().get_ref<const std::string&>().find(
               v.data().get_ref<const std::string&>()) != std::string::npos;
  }
  if (container.is_object())
    return v.is_string() && container.data().contains(v.data().get<std::string>());
  if (container.is_array()) {
    for (const Json& e : container.data())
      if (equals(v, Value(e)))
        return true;
    return false;
  }
  if (container.is_undefined())
    fail(line, container.hint().empty() ? "use of an undefined value" : container.hint());
  fail(line, "argument of type '" + type_name(container) + "' is not iterable");
}

const std::map<std::string, TestFn, std::less<>>& test_table() {
  static const std::map<std::string, TestFn, std::less<>> t = {
      {"defined", no_arg([](const Value& v) { return !v.is_undefined(); }, "defined")},
      {"undefined", no_arg([](const Value& v) { return v.is_undefined(); }, "undefined")},
      {"none", no_arg([](const Value& v) { return v.is_null(); }, "none")},
      {"string", no_arg([](const Value& v) { return v.is_string(); }, "string")},
      {"mapping", no_arg([](const Value& v) { return v.is_object(); }, "mapping")},
      {"iterable", no_arg(
                       [](const Value& v) {
                         return v.is_undefined() || v.is_string() || v.is_array() || v.is_object();
                       },
                       "iterable")},
      {"sequence", no_arg(
                       [](const Value& v) {
                         return v.is_undefined() || v.is_string() || v.is_array() || v.is_object();
                       },
                       "sequence")},
      {"number", no_arg([](const Value& v) { return v.is_number() || v.is_bool(); }, "number")},
      {"integer", no_arg([](const Value& v) { return v.is_integer(); }, "integer")},
      {"float",
       no_arg([](const Value& v) { return v.is_data() && v.data().is_number_float(); }, "float")},
      {"boolean", no_arg([](const Value& v) { return v.is_bool(); }, "boolean")},
      {"true", no_arg([](const Value& v) { return v.is_bool() && v.data().get<bool>(); }, "true")},
      {"false",
       no_arg([](const Value& v) { return v.is_bool() && !v.data().get<bool>(); }, "false")},
      {"callable",
       no_arg([](const Value& v) { return v.kind() == Value::Kind::callable; }, "callable")},
      {"lower", no_arg([](const Value& v) { return all_cased_as(v, 'a', 'A'); }, "lower")},
      {"upper", no_arg([](const Value& v) { return all_cased_as(v, 'A', 'a'); }, "upper")},
      {"even",
       [](const Value& v, CallArgs& a, int l) {
         check_args(a, 0, {}, "test 'even'", l);
         return as_int(v, "even", l) % 2 == 0;
       }},
      {"odd",
       [](const Value& v, CallArgs& a, int l) {
         check_args(a, 0, {}, "test 'odd'", l);
         return as_int(v, "odd", l) % 2 != 0;
       }},
      {"divisibleby",
       [](const Value& v, CallArgs& a, int l) {
         const std::int64_t d = as_int(one_arg(a, "divisibleby", l), "divisibleby", l);
         if (d == 0)
           fail(l, "integer division or modulo by zero");
         return as_int(v, "divisibleby", l) % d == 0;
       }},
      {"eq", [](const Value& v, CallArgs& a, int l) { return equals(v, one_arg(a, "eq", l)); }},
      {"equalto",
       [](const Value& v, CallArgs& a, int l) { return equals(v, one_arg(a, "equalto", l)); }},
      {"==", [](const Value& v, CallArgs& a, int l) { return equals(v, one_arg(a, "==", l)); }},
      {"ne", [](const Value& v, CallArgs& a, int l) { return !equals(v, one_arg(a, "ne", l)); }},
      {"!=", [](const Value& v, CallArgs& a, int l) { return !equals(v, one_arg(a, "!=", l)); }},
      {"sameas",
       [](const Value& v, CallArgs& a, int l) {
         const Value o = one_arg(a, "sameas", l);
         // Python identity: only singletons (None, True, False) compare reliably.
         if (!(o.is_null() || o.is_bool()))
           refuse(l, "'sameas' is supported only against none / true / false");
         return v.is_data() && o.data().type() == v.data().type() && v.data() == o.data();
       }},
      {"lt", cmp_test([](int c) { return c < 0; }, "lt")},
      {"<", cmp_test([](int c) { return c < 0; }, "<")},
      {"lessthan", cmp_test([](int c) { return c < 0; }, "lessthan")},
      {"le", cmp_test([](int c) { return c <= 0; }, "le")},
      {"<=", cmp_test([](int c) { return c <= 0; }, "<=")},
      {"gt", cmp_test([](int c) { return c > 0; }, "gt")},
      {">", cmp_test([](int c) { return c > 0; }, ">")},
      {"greaterthan", cmp_test([](int c) { return c > 0; }, "greaterthan")},
      {"ge", cmp_test([](int c) { return c >= 0; }, "ge")},
      {">=", cmp_test([](int c) { return c >= 0; }, ">=")},
      {"in", [](const Value& v, CallArgs& a, int l) { return in_test(v, one_arg(a, "in", l), l); }},
  };
  return t;
}

} // namespace

bool is_test(const std::string& name) {
  return test_table().count(name) != 0;
}

bool apply_test(const std::string& name, const Value& subject, CallArgs& args, int line) {
  auto it = test_table().find(name);
  if (it == test_table().end())
    refuse(line, "no test named '" + name + "'");
  return it->second(subject, args, line);
}

/// `a in b` for the evaluator.
bool contains(const Value& container, const Value& item, int line) {
  return in_test(item, container, line);
}

} // namespace tpullm::text::jinja
