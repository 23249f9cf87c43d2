#pragma once
// Internal to the chat-template engine: the values a template computes with. Data is an
// insertion-ordered JSON value (Python dict order); beside it the things JSON cannot hold:
// Jinja's Undefined, a namespace() object (shared and mutable), and callables (globals, macros,
// bound string / dict methods).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tpullm/support/error.hpp"
#include "tpullm/text/chat_template.hpp"

namespace tpullm::text::jinja {

using Json = nlohmann::ordered_json;

class Value;

/// Deepest nesting of a value a render may build or receive (lists and dicts).
inline constexpr int max_value_depth = 512;
/// Most items of one list a render may build.
inline constexpr std::size_t max_list_items = std::size_t{1} << 20;

/// The budget of the render running on this thread (RenderLimits): steps taken, bytes of values
/// built, the line being evaluated (for messages).
struct RenderBudget {
  std::int64_t steps = 0;
  std::int64_t max_steps = 0;
  std::uint64_t work = 0;
  std::uint64_t max_work = 0;
  const std::atomic<bool>* cancel = nullptr;
  int line = 0;
};

/// Installs `b` as this thread's render budget for its lifetime (the previous one after).
class BudgetScope {
public:
  explicit BudgetScope(RenderBudget& b);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

private:
  RenderBudget* saved_;
};

/// The cost of `j` in budget bytes: 32 per item (dict keys' bytes added) plus string bytes. Fails
/// (at `line`) when `j` nests deeper than max_value_depth.
std::uint64_t value_cost(const Json& j, int line);
/// Charges value_cost(j) to this thread's render budget (nothing outside a render); fails when
/// the budget is spent.
void charge(const Json& j);
/// Charges `bytes` (text appended to the output) to this thread's render budget.
void charge_bytes(std::uint64_t bytes);

/// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

/// A callable value: a global function, a macro or a method bound to its receiver.
struct Callable {
  std::string name; ///< for messages ("raise_exception", "str.split", macro name)
  std::function<Value(CallArgs&)> call;
};

/// One value: undefined, JSON data, a namespace or a callable.
class Value {
public:
  enum class Kind { undefined, data, ns, callable };

  /// An undefined value; `hint` names what was missing (for the error of using it).
  static Value undefined(std::string hint = {}) {
    Value v;
    v.hint_ = std::move(hint);
    return v;
  }
  Value() = default;
  /// JSON data (string, number, bool, null, array, object). Values share it (copying a Value
  /// is O(1), so looking up `messages` does not copy the conversation); it is never mutated.
  /// Building one is charged to the render's work budget (charge()).
  Value(Json j) : kind_(Kind::data) {
    charge(j);
    data_ = std::make_shared<const Json>(std::move(j));
  }
  /// A namespace() object; attribute assignment mutates the shared object.
  static Value make_namespace(std::shared_ptr<Json> attrs) {
    Value v;
    v.kind_ = Kind::ns;
    v.ns_ = std::move(attrs);
    return v;
  }
  /// A callable.
  static Value make_callable(std::string name, std::function<Value(CallArgs&)> fn) {
    Value v;
    v.kind_ = Kind::callable;
    v.fn_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_data() const { return kind_ == Kind::data; }
  /// The JSON data (only for Kind::data).
  const Json& data() const { return data_ ? *data_ : null_json(); }
  /// The namespace's attributes (only for Kind::ns).
  const std::shared_ptr<Json>& ns() const { return ns_; }
  /// The callable (only for Kind::callable).
  const Callable& fn() const { return *fn_; }
  /// What an undefined value stands for ("'x' is undefined").
  const std::string& hint() const { return hint_; }

  bool is_string() const { return is_data() && data().is_string(); }
  bool is_null() const { return is_data() && data().is_null(); }
  bool is_array() const { return is_data() && data().is_array(); }
  bool is_object() const { return is_data() && data().is_object(); }
  bool is_bool() const { return is_data() && data().is_boolean(); }
  /// int or float, bool excluded.
  bool is_number() const { return is_data() && data().is_number(); }
  bool is_integer() const { return is_data() && data().is_number_integer(); }

private:
  static const Json& null_json() {
    static const Json null;
    return null;
  }

  Kind kind_ = Kind::undefined;
  std::shared_ptr<const Json> data_;
  std::shared_ptr<Json> ns_;
  std::shared_ptr<const Callable> fn_;
  std::string hint_;
};

/// `message` with its newlines escaped (\n, \r), so that every error stays on one line.
std::string one_line(std::string_view message);
/// A render-time failure with the template line; becomes Error(invalid_input, "chat template
/// line N", ...) at the boundary.
[[noreturn]] void fail(int line, std::string_view message);
/// A refused construct (outside the subset): Error(unsupported, "chat template line N", ...).
[[noreturn]] void refuse(int line, std::string_view message);

/// Python truthiness (undefined, None, false, 0, "", [], {} are false).
bool truthy(const Value& v);
/// Python str(): strings as they are, others as Python prints them (True, None, [1, 'a']).
/// Undefined prints as "". Callables are refused.
std::string to_str(const Value& v, int line);
/// Python repr() of JSON data ('a', [1, 'b'], {'k': None}).
std::string py_repr(const Json& j);
/// Python repr() of a float (shortest round trip, "1.0", "1e-05", "1e+16").
std::string py_float(double d);
/// Python json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=...): ", " / ": "
/// separators without indent, "," / ": " with it; `indent` < 0 means None.
std::string py_json_dumps(const Json& j, int indent, bool sort_keys);
/// Python ==: numbers by value (True == 1), containers elementwise, different types unequal.
bool equals(const Value& a, const Value& b);
/// Python <, for numbers and strings (else refused): -1, 0, 1.
int compare(const Value& a, const Value& b, int line);
/// The type name Python would give ("str", "int", "list", "dict", "NoneType", "undefined").
std::string type_name(const Value& v);

/// Unicode code points of UTF-8 text (invalid bytes map to U+FFFD).
std::vector<char32_t> utf8_decode(std::string_view s);
/// UTF-8 of code points.
std::string utf8_encode(const std::vector<char32_t>& cps);
/// Python str.isspace() of one code point.
bool py_isspace(char32_t c);

} // namespace tpullm::text::jinja
