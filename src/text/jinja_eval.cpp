// The evaluator: walks the syntax tree with Jinja2's scoping (a for loop's body and a macro get
// their own frame, `if` does not; `set` writes the innermost frame, so a set inside a loop does
// not leak out, which is why templates use namespace()).
#include <cmath>
#include <map>
#include <unordered_map>

#include "jinja_ast.hpp"
#include "jinja_builtins.hpp"

namespace tpullm::text::jinja {
namespace {

constexpr int max_call_depth = 64;

class Evaluator {
public:
  // Statements and expressions one render may evaluate (real chat templates take thousands),
  // the bytes of values it may build and its cancellation flag: RenderLimits. A template
  // working longer fails instead of hanging its caller.
  Evaluator(const Json& globals, const RenderLimits& limits) {
    budget_.max_steps = limits.max_steps;
    budget_.cancel = limits.cancel;
    const std::uint64_t context = value_cost(globals, 0);
    budget_.max_work = limits.max_work_bytes + 16 * context;
    frames_.emplace_back();
    for (auto& [k, v] : global_functions())
      frames_.back()[k] = std::move(v);
    if (!globals.is_object())
      throw Error(ErrorKind::invalid_input, "chat template",
                  "the render context must be an object");
    for (auto it = globals.begin(); it != globals.end(); ++it)
      frames_.back()[it.key()] = Value(it.value());
  }

  std::string run(const Body& body) {
    const BudgetScope scope(budget_);
    std::string out;
    exec(body, out);
    return out;
  }

private:
  using Frame = std::unordered_map<std::string, Value>;

  enum class Flow { normal, break_, continue_ };

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end())
        return f->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  static void grow(std::string& out, const std::string& s, int line) {
    out += s;
    if (out.size() > max_value_size)
      fail(line, "rendered text too large");
    charge_bytes(s.size());
  }

  Flow exec(const Body& body, std::string& out) {
    for (const NodePtr& n : body) {
      const Flow f = exec(*n, out);
      if (f != Flow::normal)
        return f;
    }
    return Flow::normal;
  }

  void assign(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = v;
      return;
    }
    std::vector<Value> items = iterate(v, line);
    if (items.size() != targets.size())
      fail(line,
           str_cat("cannot unpack ", items.size(), " values into ", targets.size(), " names"));
    for (std::size_t i = 0; i < targets.size(); ++i)
      frames_.back()[targets[i]] = items[i];
  }

  void step(int line) {
    budget_.line = line;
    if (budget_.cancel != nullptr && budget_.cancel->load(std::memory_order_relaxed))
      throw RenderCancelled();
    if (++budget_.steps > budget_.max_steps)
      fail(line, str_cat("the template ran too long (more than ", budget_.max_steps, " steps)"));
  }

  Flow exec(const Node& n, std::string& out) {
    step(n.line);
    switch (n.kind) {
    case Node::Kind::text:
      grow(out, n.text, n.line);
      return Flow::normal;
    case Node::Kind::output:
      grow(out, to_str(eval(*n.expr), n.line), n.line);
      return Flow::normal;
    case Node::Kind::if_:
      for (const auto& [cond, body] : n.branches)
        if (!cond || truthy(eval(*cond)))
          return exec(body, out);
      return Flow::normal;
    case Node::Kind::for_:
      return exec_for(n, out);
    case Node::Kind::set:
      assign(n.targets, eval(*n.expr), n.line);
      return Flow::normal;
    case Node::Kind::set_attr: {
      const Value ns = lookup(n.targets[0]);
      if (ns.kind() != Value::Kind::ns)
        fail(n.line, "cannot assign attribute on non-namespace object '" + n.targets[0] + "'");
      const Value v = eval(*n.expr);
      if (!v.is_data())
        refuse(n.line, "namespace attributes must be data (not functions / namespaces / "
                       "undefined)");
      (*ns.ns())[n.targets[1]] = v.data();
      return Flow::normal;
    }
    case Node::Kind::set_block: {
      std::string s;
      frames_.emplace_back();
      exec(n.body, s);
      frames_.pop_back();
      frames_.back()[n.targets[0]] = Value(Json(std::move(s)));
      return Flow::normal;
    }
    case Node::Kind::macro:
      frames_.back()[n.targets[0]] = make_macro(n);
      return Flow::normal;
    case Node::Kind::break_:
      if (loop_depth_ == 0)
        fail(n.line, "'break' outside a for loop");
      return Flow::break_;
    case Node::Kind::continue_:
      if (loop_depth_ == 0)
        fail(n.line, "'continue' outside a for loop");
      return Flow::continue_;
    }
    return Flow::normal;
  }

  Flow exec_for(const Node& n, std::string& out) {
    std::vector<Value> items = iterate(eval(*n.expr), n.line);
    if (n.cond) {
      // `for x in xs if cond`: filter first (loop.length counts the kept items).
      std::vector<Value> kept;
      for (Value& v : items) {
        frames_.emplace_back();
        assign(n.targets, v, n.line);
        const bool keep = truthy(eval(*n.cond));
        frames_.pop_back();
        if (keep)
          kept.push_back(std::move(v));
      }
      items = std::move(kept);
    }
    const auto len = static_cast<std::int64_t>(items.size());
    ++loop_depth_;
    for (std::int64_t i = 0; i < len; ++i) {
      step(n.line);
      frames_.emplace_back();
      assign(n.targets, items[static_cast<std::size_t>(i)], n.line);
      Json loop = {{"index", i + 1},      {"index0", i},
                   {"revindex", len - i}, {"revindex0", len - i - 1},
                   {"first", i == 0},     {"last", i == len - 1},
                   {"length", len},       {"depth", 1},
                   {"depth0", 0}};
      if (i > 0 && items[static_cast<std::size_t>(i - 1)].is_data())
        loop["previtem"] = items[static_cast<std::size_t>(i - 1)].data();
      if (i + 1 < len && items[static_cast<std::size_t>(i + 1)].is_data())
        loop["nextitem"] = items[static_cast<std::size_t>(i + 1)].data();
      frames_.back()["loop"] = Value(std::move(loop));
      const Flow f = exec(n.body, out);
      frames_.pop_back();
      if (f == Flow::break_)
        break;
    }
    --loop_depth_;
    if (len == 0)
      return exec(n.else_body, out);
    return Flow::normal;
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value::make_callable(n.targets[0], [this, node](CallArgs& a) {
      const std::size_t nparams = node->targets.size() - 1;
      if (a.pos.size() > nparams)
        fail(node->line,
             str_cat("macro '", node->targets[0], "' takes at most ", nparams, " arguments"));
      if (++call_depth_ > max_call_depth)
        fail(node->line, "macro calls nested too deeply");
      Frame args;
      for (std::size_t p = 0; p < nparams; ++p) {
        const std::string& name = node->targets[p + 1];
        if (auto v = take_arg(a, p, name))
          args[name] = *v;
        else if (node->defaults[p])
          args[name] = eval(*node->defaults[p]);
        else
          args[name] = Value::undefined("parameter '" + name + "' was not provided");
      }
      if (!a.kw.empty())
        fail(node->line,
             "macro '" + node->targets[0] + "' has no parameter '" + a.kw[0].first + "'");
      // The macro sees the template's top-level names and its arguments, not the caller's locals.
      std::vector<Frame> saved;
      saved.swap(frames_);
      frames_.push_back(saved.front());
      frames_.push_back(std::move(args));
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;
      std::string s;
      try {
        exec(node->body, s);
      } catch (...) {
        frames_.swap(saved);
        loop_depth_ = saved_loops;
        --call_depth_;
        throw;
      }
      frames_.swap(saved);
      loop_depth_ = saved_loops;
      --call_depth_;
      return Value(Json(std::move(s)));
    });
  }

  CallArgs eval_args(const Expr& e, std::size_t first) {
    CallArgs a;
    for (std::size_t i = first; i < e.args.size(); ++i)
      a.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs)
      a.kw.emplace_back(k, eval(*v));
    return a;
  }

  static std::optional<std::int64_t> slice_part(const Value& v, int line) {
    if (v.is_null())
      return std::nullopt;
    return as_int(v, "slice index", line);
  }

  Value eval(const Expr& e) {
    step(e.line);
    switch (e.kind) {
    case Expr::Kind::literal:
      return e.value;
    case Expr::Kind::name:
      return lookup(e.name);
    case Expr::Kind::list:
    case Expr::Kind::tuple: {
      Json out = Json::array();
      if (e.args.size() > max_list_items)
        fail(e.line, "list too large");
      for (const ExprPtr& x : e.args) {
        const Value v = eval(*x);
        if (!v.is_data())
          refuse(e.line, "lists of non-data values (functions, namespaces, undefined) are not "
                         "supported");
        out.push_back(v.data());
      }
      return Value(std::move(out));
    }
    case Expr::Kind::dict: {
      Json out = Json::object();
      for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value k = eval(*e.args[i]);
        const Value v = eval(*e.args[i + 1]);
        if (!k.is_string())
          refuse(e.line, "dict keys other than strings are not supported");
        if (!v.is_data())
          refuse(e.line, "dict values must be data");
        out[k.data().get<std::string>()] = v.data();
      }
      return Value(std::move(out));
    }
    case Expr::Kind::attr:
      return get_attr(eval(*e.args[0]), e.name, e.line);
    case Expr::Kind::subscript:
      return get_item(eval(*e.args[0]), eval(*e.args[1]), e.line);
    case Expr::Kind::slice: {
      const Value obj = eval(*e.args[0]);
      std::optional<std::int64_t> p[3];
      for (int k = 0; k < 3; ++k)
        if (e.args[static_cast<std::size_t>(k) + 1])
          p[k] = slice_part(eval(*e.args[static_cast<std::size_t>(k) + 1]), e.line);
      return get_slice(obj, p[0], p[1], p[2], e.line);
    }
    case Expr::Kind::call: {
      const Value fn = eval(*e.args[0]);
      if (fn.is_undefined())
        fail(e.line, fn.hint().empty() ? "call of an undefined value" : fn.hint());
      if (fn.kind() != Value::Kind::callable)
        fail(e.line, "'" + type_name(fn) + "' object is not callable");
      CallArgs a = eval_args(e, 1);
      try {
        return fn.fn().call(a);
      } catch (const Error& err) {
        if (err.where() == "chat template line 0")
          throw Error(err.kind(), str_cat("chat template line ", e.line), err.message());
        if (err.where() == "chat template")
          throw Error(err.kind(), str_cat("chat template line ", e.line), err.message());
        throw;
      }
    }
    case Expr::Kind::filter: {
      const Value subject = eval(*e.args[0]);
      CallArgs a = eval_args(e, 1);
      return apply_filter(e.name, subject, a, e.line);
    }
    case Expr::Kind::test: {
      const Value subject = eval(*e.args[0]);
      CallArgs a = eval_args(e, 1);
      const bool r = apply_test(e.name, subject, a, e.line);
      return Value(Json(e.negated ? !r : r));
    }
    case Expr::Kind::unary: {
      const Value v = eval(*e.args[0]);
      if (e.name == "not")
        return Value(Json(!truthy(v)));
      if (v.is_bool() || v.is_integer()) {
        const std::int64_t x = as_int(v, "operand", e.line);
        return Value(Json(e.name == "-" ? -x : x));
      }
      if (v.is_number())
        return Value(Json(e.name == "-" ? -v.data().get<double>() : v.data().get<double>()));
      fail(e.line, "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
    }
    case Expr::Kind::and_: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case Expr::Kind::or_: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case Expr::Kind::cond:
      if (truthy(eval(*e.args[0])))
        return eval(*e.args[1]);
      if (e.args[2])
        return eval(*e.args[2]);
      return Value::undefined("the conditional expression evaluated to false and had no else");
    case Expr::Kind::binary:
      return binary(e);
    }
    return Value();
  }

  static bool intlike(const Value& v) { return v.is_integer() || v.is_bool(); }
  static double as_double(const Value& v) {
    if (v.is_bool())
      return v.data().get<bool>() ? 1.0 : 0.0;
    return v.data().get<double>();
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    const Value a = eval(*e.args[0]);
    const Value b = eval(*e.args[1]);
    const int line = e.line;
    if (op == "~") {
      std::string s = to_str(a, line) + to_str(b, line);
      if (s.size() > max_value_size)
        fail(line, "string too large");
      return Value(Json(std::move(s)));
    }
    if (op == "==")
      return Value(Json(equals(a, b)));
    if (op == "!=")
      return Value(Json(!equals(a, b)));
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      for (const Value* v : {&a, &b})
        if (v->is_undefined())
          fail(line, v->hint().empty() ? "use of an undefined value" : v->hint());
      const int c = compare(a, b, line);
      const bool r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
      return Value(Json(r));
    }
    if (op == "in" || op == "not in") {
      const bool r = contains(b, a, line);
      return Value(Json(op == "in" ? r : !r));
    }
    for (const Value* v : {&a, &b})
      if (v->is_undefined())
        fail(line, v->hint().empty() ? "use of an undefined value" : v->hint());
    const auto type_error = [&]() -> Value {
      fail(line, "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                     type_name(b) + "'");
    };
    const bool na = a.is_number() || a.is_bool(), nb = b.is_number() || b.is_bool();
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        std::string s = a.data().get<std::string>() + b.data().get<std::string>();
        if (s.size() > max_value_size)
          fail(line, "string too large");
        return Value(Json(std::move(s)));
      }
      if (a.is_array() && b.is_array()) {
        Json out = a.data();
        for (const Json& x : b.data())
          out.push_back(x);
        if (out.size() > max_list_items)
          fail(line, str_cat("list too large (more than ", max_list_items, " items)"));
        return Value(std::move(out));
      }
    }
    if (op == "*") {
      const Value* seq = a.is_string() || a.is_array()   ? &a
                         : b.is_string() || b.is_array() ? &b
                                                         : nullptr;
      const Value* cnt = seq == &a ? &b : &a;
      if (seq && intlike(*cnt)) {
        const std::int64_t n = std::max<std::int64_t>(0, as_int(*cnt, "repeat count", line));
        const std::size_t unit = seq->is_string() ? seq->data().get_ref<const std::string&>().size()
                                                  : seq->data().size();
        if (unit == 0)
          return Value(seq->is_string() ? Json("") : Json::array());
        if (static_cast<std::uint64_t>(n) >
            (seq->is_string() ? max_value_size : max_list_items) / unit)
          fail(line, "repeated value too large");
        if (seq->is_string()) {
          std::string s;
          for (std::int64_t i = 0; i < n; ++i)
            s += seq->data().get_ref<const std::string&>();
          return Value(Json(std::move(s)));
        }
        Json out = Json::array();
        for (std::int64_t i = 0; i < n; ++i)
          for (const Json& x : seq->data())
            out.push_back(x);
        return Value(std::move(out));
      }
    }
    if (!na || !nb) {
      if (op == "%" && a.is_string())
        refuse(line, "printf-style string formatting ('%') is not supported");
      return type_error();
    }
    if (intlike(a) && intlike(b)) {
      const std::int64_t x = as_int(a, "operand", line), y = as_int(b, "operand", line);
      std::int64_t r = 0;
      if (op == "+") {
        if (__builtin_add_overflow(x, y, &r))
          refuse(line, "integer overflow (Python integers are unbounded)");
        return Value(Json(r));
      }
      if (op == "-") {
        if (__builtin_sub_overflow(x, y, &r))
          refuse(line, "integer overflow (Python integers are unbounded)");
        return Value(Json(r));
      }
      if (op == "*") {
        if (__builtin_mul_overflow(x, y, &r))
          refuse(line, "integer overflow (Python integers are unbounded)");
        return Value(Json(r));
      }
      if (op == "/") {
        if (y == 0)
          fail(line, "division by zero");
        return Value(Json(static_cast<double>(x) / static_cast<double>(y)));
      }
      if (op == "//" || op == "%") {
        if (y == 0)
          fail(line, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1)
          refuse(line, "integer overflow (Python integers are unbounded)");
        std::int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value(Json(op == "//" ? q : m));
      }
      if (op == "**") {
        if (y < 0)
          return Value(Json(std::pow(static_cast<double>(x), static_cast<double>(y))));
        std::int64_t acc = 1;
        for (std::int64_t i = 0; i < y; ++i) {
          if (__builtin_mul_overflow(acc, x, &acc))
            refuse(line, "integer overflow (Python integers are unbounded)");
          if (acc == 0 || acc == 1)
            break;
        }
        return Value(Json(acc));
      }
      return type_error();
    }
    const double x = as_double(a), y = as_double(b);
    if (op == "+")
      return Value(Json(x + y));
    if (op == "-")
      return Value(Json(x - y));
    if (op == "*")
      return Value(Json(x * y));
    if (op == "/") {
      if (y == 0)
        fail(line, "float division by zero");
      return Value(Json(x / y));
    }
    if (op == "//" || op == "%") {
      if (y == 0)
        fail(line, "float modulo by zero");
      const double m = std::fmod(x, y);
      double mod = m;
      if (mod != 0 && ((mod < 0) != (y < 0)))
        mod += y;
      if (op == "%")
        return Value(Json(mod));
      return Value(Json(std::floor(x / y)));
    }
    if (op == "**")
      return Value(Json(std::pow(x, y)));
    return type_error();
  }

  std::vector<Frame> frames_;
  int loop_depth_ = 0;
  int call_depth_ = 0;
  RenderBudget budget_;
};

} // namespace

std::string render_template(const Template& t, const Json& globals, const RenderLimits& limits) {
  Evaluator ev(globals, limits);
  return ev.run(t.body);
}

} // namespace tpullm::text::jinja
