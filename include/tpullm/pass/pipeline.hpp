#pragma once
/// Textual pass pipelines:
///   pipeline ::= ( pass ( ',' pass )* )?
///   pass     ::= name ( '{' ( option ( ',' option )* )? '}' )?
///   option   ::= key '=' value        (value: any text without ',', '{', '}', trimmed)
///   name, key ::= [A-Za-z0-9_-]+      (whitespace around every token is ignored)
/// e.g. `canonicalize{max-iterations=4},cse,dce`. Errors name the 1-based column.

#include <any>
#include <cctype>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tpullm/pass/pass_registry.hpp"

namespace tpullm::pass {

/// A malformed pipeline: message and the 1-based column in the pipeline text.
class PipelineError : public Error {
public:
  PipelineError(const std::string& message, int column)
      : Error(ErrorKind::invalid_input, "", message,
              "column " + std::to_string(column) + ": " + message),
        column_(column) {}
  int column() const { return column_; }

private:
  int column_;
};

/// One pass of a parsed pipeline, bound to its options.
struct PipelineEntry {
  const PassInfo* info = nullptr;  ///< its registry row
  std::vector<OptionText> options; ///< options as given
  std::string text;                ///< canonical spelling, e.g. "dce{keep-weights=true}"
  PassFn run;                      ///< the pass bound to its options
};

/// Canonical spelling of a pass with options: `name` or `name{k=v,...}`.
inline std::string pipeline_entry_text(std::string_view name, const std::vector<OptionText>& opts) {
  std::string s(name);
  if (opts.empty())
    return s;
  s += "{";
  for (std::size_t i = 0; i < opts.size(); ++i)
    append_item(s, i ? "," : "", opts[i].key + "=" + opts[i].value);
  return s + "}";
}

/// Looks up pass `name` and binds `options`; throws PipelineError (column from the options,
/// or `column` for an unknown pass).
inline PipelineEntry bind_pass(std::string_view name, const std::vector<OptionText>& options,
                               int column = 0) {
  const PassInfo* info = find_pass(name);
  if (!info) {
    std::string known;
    for (const auto& p : pass_registry())
      append_item(known, ", ", p.name);
    throw PipelineError("unknown pass '" + std::string(name) + "' (passes: " + known + ")", column);
  }
  PipelineEntry e;
  e.info = info;
  e.options = options;
  e.text = pipeline_entry_text(name, options);
  try {
    e.run = info->bind(options);
  } catch (const OptionError& err) {
    throw PipelineError(err.what(), err.column() ? err.column() : column);
  }
  return e;
}

/// Binds registered pass `name` to typed options `opts` (its own options struct); the entry's
/// text spells exactly these options, so parsing it binds the same values.
template <class Opts>
PipelineEntry bind_pass(std::string_view name, const Opts& opts) {
  PipelineEntry e = bind_pass(name, std::vector<OptionText>{});
  e.options = option_texts(opts);
  e.text = pipeline_entry_text(name, e.options);
  e.run = e.info->bind_typed(std::any(opts));
  return e;
}

/// Parses a pipeline string into bound passes.
inline std::vector<PipelineEntry> parse_pipeline(std::string_view text) {
  std::size_t pos = 0;
  auto col = [&](std::size_t p) { return static_cast<int>(p) + 1; };
  auto skip_ws = [&] {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  };
  auto ident = [&](const char* what) {
    skip_ws();
    const std::size_t start = pos;
    while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) ||
                                 text[pos] == '-' || text[pos] == '_'))
      ++pos;
    if (pos == start) {
      const std::string got =
          pos < text.size() ? "'" + std::string(1, text[pos]) + "'" : "end of pipeline";
      throw PipelineError(std::string("expected ") + what + ", got " + got, col(pos));
    }
    return std::string(text.substr(start, pos - start));
  };
  std::vector<PipelineEntry> out;
  skip_ws();
  if (pos == text.size())
    return out;
  while (true) {
    skip_ws();
    const int name_col = col(pos);
    const std::string name = ident("a pass name");
    std::vector<OptionText> opts;
    skip_ws();
    if (pos < text.size() && text[pos] == '{') {
      const std::size_t open = pos++;
      skip_ws();
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
      } else {
        while (true) {
          skip_ws();
          OptionText o;
          o.key_column = col(pos);
          o.key = ident("an option name");
          skip_ws();
          if (pos >= text.size() || text[pos] != '=')
            throw PipelineError("expected '=' after option '" + o.key + "'", col(pos));
          ++pos;
          skip_ws();
          o.value_column = col(pos);
          const std::size_t start = pos;
          while (pos < text.size() && text[pos] != ',' && text[pos] != '}' && text[pos] != '{')
            ++pos;
          std::size_t end = pos;
          while (end > start && std::isspace(static_cast<unsigned char>(text[end - 1])))
            --end;
          o.value = std::string(text.substr(start, end - start));
          opts.push_back(std::move(o));
          if (pos < text.size() && text[pos] == ',') {
            ++pos;
            continue;
          }
          if (pos < text.size() && text[pos] == '}') {
            ++pos;
            break;
          }
          throw PipelineError("expected ',' or '}' to close the options of '" + name +
                                  "' opened at column " + std::to_string(col(open)),
                              col(pos));
        }
      }
    }
    out.push_back(bind_pass(name, opts, name_col));
    skip_ws();
    if (pos == text.size())
      return out;
    if (text[pos] != ',')
      throw PipelineError("expected ',' between passes, got '" + std::string(1, text[pos]) + "'",
                          col(pos));
    ++pos;
  }
}

} // namespace tpullm::pass

namespace tpullm::pass {

/// A pipeline: pass objects bound to their options, built once (typed by the compiler, parsed
/// from text by tpullm-opt) and run over any number of modules with a PassContext. text()
/// spells it so that Pipeline::parse(text()) is the same pipeline.
class Pipeline {
public:
  Pipeline() = default;
  /// The pipeline a text spells (throws PipelineError).
  static Pipeline parse(std::string_view text) {
    Pipeline p;
    p.entries_ = parse_pipeline(text);
    return p;
  }
  /// Appends registered pass `name` with typed options.
  template <class Opts>
  Pipeline& add(std::string_view name, const Opts& opts) {
    entries_.push_back(bind_pass(name, opts));
    return *this;
  }
  /// Appends every pass of `other`.
  Pipeline& append(const Pipeline& other) {
    entries_.insert(entries_.end(), other.entries_.begin(), other.entries_.end());
    return *this;
  }
  /// The passes in order.
  const std::vector<PipelineEntry>& entries() const { return entries_; }
  /// Canonical text: `name{k=v,...},name,...` (options that differ from their defaults).
  std::string text() const {
    std::string s;
    for (const auto& e : entries_)
      append_item(s, ",", e.text);
    return s;
  }
  /// Runs every pass over `m` in order, without verification between passes (PassManager adds
  /// verification, printing and timing). Exceptions of a pass propagate unchanged.
  void run(ir::Module& m, const PassContext& ctx = {}) const {
    for (const auto& e : entries_)
      e.run(m, ctx);
  }

private:
  std::vector<PipelineEntry> entries_;
};

} // namespace tpullm::pass
