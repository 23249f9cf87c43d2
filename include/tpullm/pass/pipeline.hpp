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
std::string pipeline_entry_text(std::string_view name, const std::vector<OptionText>& opts);

/// Looks up pass `name` and binds `options`; throws PipelineError (column from the options,
/// or `column` for an unknown pass).
PipelineEntry bind_pass(std::string_view name, const std::vector<OptionText>& options,
                        int column = 0);

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
std::vector<PipelineEntry> parse_pipeline(std::string_view text);

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
  std::string text() const;
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
