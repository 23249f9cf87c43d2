// Global functions of a render: Jinja2's namespace / range / dict and the two transformers adds,
// raise_exception(message) and strftime_now(format).
#include <ctime>

#include "jinja_builtins.hpp"

namespace tpullm::text::jinja {

std::vector<std::pair<std::string, Value>> global_functions() {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("namespace", Value::make_callable("namespace", [](CallArgs& a) {
                   auto attrs = std::make_shared<Json>(Json::object());
                   if (a.pos.size() > 1)
                     fail(0, "namespace() takes at most one positional argument (a dict)");
                   if (!a.pos.empty()) {
                     if (!a.pos[0].is_object())
                       fail(0, "namespace() positional argument must be a dict");
                     *attrs = a.pos[0].data();
                   }
                   for (auto& [k, v] : a.kw) {
                     if (!v.is_data())
                       refuse(0, "namespace() attributes must be data (not functions / "
                                 "namespaces / undefined)");
                     (*attrs)[k] = v.data();
                   }
                   return Value::make_namespace(attrs);
                 }));
  g.emplace_back("range", Value::make_callable("range", [](CallArgs& a) {
                   check_args(a, 3, {}, "range()", 0);
                   if (a.pos.empty())
                     fail(0, "range expected at least 1 argument");
                   std::int64_t b = 0, e = 0, s = 1;
                   if (a.pos.size() == 1) {
                     e = as_int(a.pos[0], "range()", 0);
                   } else {
                     b = as_int(a.pos[0], "range()", 0);
                     e = as_int(a.pos[1], "range()", 0);
                     if (a.pos.size() == 3)
                       s = as_int(a.pos[2], "range()", 0);
                   }
                   if (s == 0)
                     fail(0, "range() arg 3 must not be zero");
                   Json out = Json::array();
                   for (std::int64_t i = b; s > 0 ? i < e : i > e; i += s) {
                     // The sandbox caps range() at 100000 items (MAX_RANGE).
                     if (out.size() >= 100000)
                       fail(0, "range too big (the sandbox allows at most 100000 items)");
                     out.push_back(i);
                   }
                   return Value(std::move(out));
                 }));
  g.emplace_back("dict", Value::make_callable("dict", [](CallArgs& a) {
                   if (!a.pos.empty())
                     refuse(0, "dict() with positional arguments is not supported");
                   Json out = Json::object();
                   for (auto& [k, v] : a.kw) {
                     if (!v.is_data())
                       refuse(0, "dict() values must be data");
                     out[k] = v.data();
                   }
                   return Value(std::move(out));
                 }));
  g.emplace_back("raise_exception", Value::make_callable("raise_exception", [](CallArgs& a) {
                   std::string msg = a.pos.empty() ? std::string() : to_str(a.pos[0], 0);
                   throw Error(ErrorKind::invalid_input, "chat template",
                               "the template raised an exception: " + one_line(msg));
                   return Value();
                 }));
  g.emplace_back("strftime_now", Value::make_callable("strftime_now", [](CallArgs& a) {
                   check_args(a, 1, {}, "strftime_now()", 0);
                   if (a.pos.size() != 1)
                     fail(0, "strftime_now() takes one argument (a format)");
                   const std::string& fmt = as_string(a.pos[0], "strftime_now() format", 0);
                   const std::time_t now = std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&now, &tm);
                   char buf[512];
                   const std::size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
                   if (n == 0 && !fmt.empty())
                     fail(0, "strftime_now(): the format gives an empty or too long result");
                   return Value(Json(std::string(buf, n)));
                 }));
  return g;
}

} // namespace tpullm::text::jinja
