#pragma once
/// Typed pass options. A pass's options are a plain struct listing its fields through
/// `static void fields(S& self, F&& f)` calling f("key", self.member, "help") for each; values
/// given as text in a pipeline (`canonicalize{max-iterations=4}`) are parsed by member type:
/// std::int64_t, double, bool (true/false/1/0), std::string, ir::DType, and any enum with
/// ir::EnumNames. Unknown keys, repeated keys and malformed values are OptionError.

#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tpullm/ir/attributes.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::pass {

/// One `key=value` given for a pass, with the 1-based columns in the pipeline text (0 when the
/// option did not come from text).
struct OptionText {
  std::string key;
  std::string value;
  int key_column = 0;
  int value_column = 0;
};

/// A malformed option: message plus the pipeline column it refers to (0 = none).
class OptionError : public Error {
public:
  OptionError(const std::string& message, int column)
      : Error(ErrorKind::invalid_input, "", message, message), column_(column) {}
  int column() const { return column_; }

private:
  int column_;
};

/// Describes one option for `--list-passes` and docs.
struct OptionInfo {
  std::string key;           ///< spelling in a pipeline
  std::string type;          ///< "int", "float", "bool", "string", "dtype" or "a|b|c"
  std::string default_value; ///< default, as text
  std::string help;          ///< one line
};

/// Options struct of a pass that takes none.
struct NoOptions {
  template <class S, class F>
  static void fields(S&, F&&) {}
};

/// Appends `item` to `list`, preceded by `sep` unless `list` is empty.
inline void append_item(std::string& list, std::string_view sep, std::string_view item) {
  if (!list.empty())
    list.append(sep);
  list.append(item);
}

namespace detail {

template <class V>
std::string option_type_name() {
  if constexpr (std::is_same_v<V, bool>) {
    return "bool";
  } else if constexpr (std::is_same_v<V, std::int64_t>) {
    return "int";
  } else if constexpr (std::is_same_v<V, double>) {
    return "float";
  } else if constexpr (std::is_same_v<V, std::string>) {
    return "string";
  } else if constexpr (std::is_same_v<V, ir::DType>) {
    return "dtype";
  } else {
    static_assert(ir::NamedEnum<V>, "unsupported pass option type");
    std::string s;
    for (const auto& [v, n] : ir::EnumNames<V>::items)
      append_item(s, "|", n);
    return s;
  }
}

template <class V>
std::string option_to_text(const V& v) {
  if constexpr (std::is_same_v<V, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<V, std::int64_t>) {
    return std::to_string(v);
  } else if constexpr (std::is_same_v<V, double>) {
    char buf[32]; // the shortest text that parses back to the same double
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
  } else if constexpr (std::is_same_v<V, std::string>) {
    return v;
  } else if constexpr (std::is_same_v<V, ir::DType>) {
    return std::string(ir::name(v));
  } else {
    return std::string(ir::enum_name(v));
  }
}

/// Parses `text` into `v`; returns an empty string on success, else what was expected.
template <class V>
std::string option_from_text(std::string_view text, V& v) {
  if constexpr (std::is_same_v<V, bool>) {
    if (text == "true" || text == "1")
      v = true;
    else if (text == "false" || text == "0")
      v = false;
    else
      return "true or false";
    return "";
  } else if constexpr (std::is_same_v<V, std::int64_t> || std::is_same_v<V, double>) {
    const char* b = text.data() + (!text.empty() && text[0] == '+');
    const char* e = text.data() + text.size();
    auto r = std::from_chars(b, e, v);
    if (text.empty() || r.ec != std::errc() || r.ptr != e)
      return std::is_same_v<V, double> ? "a number" : "an integer";
    return "";
  } else if constexpr (std::is_same_v<V, std::string>) {
    v = std::string(text);
    return "";
  } else if constexpr (std::is_same_v<V, ir::DType>) {
    auto d = ir::parse_dtype(text);
    if (!d)
      return "an element type (f32, bf16, ...)";
    v = *d;
    return "";
  } else {
    auto e = ir::parse_enum<V>(text);
    if (!e)
      return "one of " + option_type_name<V>();
    v = *e;
    return "";
  }
}

} // namespace detail

/// Parses the options given to pass `pass` into an Opts (defaults for keys not given).
template <class Opts>
Opts parse_options(std::string_view pass, const std::vector<OptionText>& given) {
  Opts opts{};
  std::vector<std::string> known;
  Opts::fields(opts, [&](const char* key, auto&, const char*) { known.emplace_back(key); });
  for (std::size_t i = 0; i < given.size(); ++i) {
    const OptionText& g = given[i];
    for (std::size_t j = 0; j < i; ++j)
      if (given[j].key == g.key)
        throw OptionError("option '" + g.key + "' of pass '" + std::string(pass) + "' given twice",
                          g.key_column);
    bool found = false;
    Opts::fields(opts, [&](const char* key, auto& member, const char*) {
      if (found || g.key != key)
        return;
      found = true;
      const std::string want = detail::option_from_text(g.value, member);
      if (!want.empty())
        throw OptionError("option '" + g.key + "' of pass '" + std::string(pass) + "' expects " +
                              want + ", got '" + g.value + "'",
                          g.value_column);
    });
    if (!found) {
      std::string list;
      for (const auto& k : known)
        append_item(list, ", ", k);
      throw OptionError("pass '" + std::string(pass) + "' has no option '" + g.key + "'" +
                            (list.empty() ? " (it takes none)" : " (options: " + list + ")"),
                        g.key_column);
    }
  }
  return opts;
}

/// The options of `opts` that differ from Opts's defaults, as text that parse_options reads back
/// into the same values (in the struct's field order).
template <class Opts>
std::vector<OptionText> option_texts(const Opts& opts) {
  std::vector<OptionText> out;
  const Opts defaults{};
  std::vector<std::string> default_text;
  Opts::fields(defaults, [&](const char*, const auto& member, const char*) {
    default_text.push_back(detail::option_to_text(member));
  });
  std::size_t i = 0;
  Opts::fields(opts, [&](const char* key, const auto& member, const char*) {
    std::string text = detail::option_to_text(member);
    if (text != default_text[i++])
      out.push_back({key, std::move(text)});
  });
  return out;
}

/// Describes the options of Opts with their defaults.
template <class Opts>
std::vector<OptionInfo> describe_options() {
  std::vector<OptionInfo> out;
  Opts opts{};
  Opts::fields(opts, [&](const char* key, auto& member, const char* help) {
    using V = std::decay_t<decltype(member)>;
    out.push_back({key, detail::option_type_name<V>(), detail::option_to_text(member), help});
  });
  return out;
}

} // namespace tpullm::pass
