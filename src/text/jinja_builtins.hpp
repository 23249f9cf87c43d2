#pragma once
// Internal to the chat-template engine: what a template can reach besides its own syntax —
// attribute and item access (Jinja's getattr / getitem), string / dict methods, the filter and
// test tables, and the global functions transformers provides.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "jinja_value.hpp"

namespace tpullm::text::jinja {

/// Largest string or list a template may build (bytes / items); beyond it rendering fails.
inline constexpr std::size_t max_value_size = std::size_t{64} << 20;

/// `obj.name`: a dict's key (or its method when `name` is one), a string's method, a namespace's
/// attribute; a missing one is Undefined. Undefined `obj` fails.
Value get_attr(const Value& obj, const std::string& name, int line);
/// `obj[key]`: list / string index (negative from the end), dict key, else as get_attr for a
/// string key; a missing one is Undefined. Undefined `obj` fails.
Value get_item(const Value& obj, const Value& key, int line);
/// `obj[start:stop:step]` of a list or string (Python slice rules; code points for strings).
Value get_slice(const Value& obj, std::optional<std::int64_t> start,
                std::optional<std::int64_t> stop, std::optional<std::int64_t> step, int line);
/// The items a for loop visits: list items, dict keys, string characters; Undefined: none.
std::vector<Value> iterate(const Value& v, int line);
/// Python len(): code points of a string, items of a list / dict; Undefined: 0.
std::int64_t length_of(const Value& v, int line);

/// The method `name` of a string / dict / list bound to `obj`, or nullopt when it has none.
std::optional<Value> bound_method(const Value& obj, const std::string& name, int line);

/// Whether `name` is a filter of the table (checked at parse time, as Jinja2 does).
bool is_filter(const std::string& name);
/// Applies filter `name` to `subject` with `args`.
Value apply_filter(const std::string& name, const Value& subject, CallArgs& args, int line);
/// Whether `name` is a test of the table (checked at parse time).
bool is_test(const std::string& name);
/// Applies test `name` (`subject is name(args)`).
bool apply_test(const std::string& name, const Value& subject, CallArgs& args, int line);

/// Python `item in container` (substring, list membership, dict key).
bool contains(const Value& container, const Value& item, int line);

/// The globals every render sees: namespace, range, dict, raise_exception, strftime_now.
std::vector<std::pair<std::string, Value>> global_functions();

/// Takes the argument `name` from `args` (keyword, else the next positional at `index`), or
/// nullopt when absent.
std::optional<Value> take_arg(CallArgs& args, std::size_t index, const std::string& name);
/// Fails when `args` holds keyword arguments other than `allowed` or more than `max_pos`
/// positional ones.
void check_args(const CallArgs& args, std::size_t max_pos,
                std::initializer_list<std::string_view> allowed, const std::string& what, int line);

/// Python str.strip / lstrip / rstrip: `chars` null means whitespace. `side`: 0 both, 1 left,
/// 2 right.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, int side);
/// An integer argument (bool counts as int, as in Python), else fails naming `what`.
std::int64_t as_int(const Value& v, const std::string& what, int line);
/// A string argument, else fails naming `what`.
const std::string& as_string(const Value& v, const std::string& what, int line);

} // namespace tpullm::text::jinja
