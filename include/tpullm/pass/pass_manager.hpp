#pragma once
/// Runs a pipeline of passes over a module: verify the input, then each pass followed by the
/// verifier (verify-each, on by default) so a broken invariant is blamed on the pass that broke
/// it, optional printing of the IR after all or named passes, and per-pass wall-clock timing.
///
///   pass::PassManager pm({.print_after = {"cse"}, .print_stream = &std::cerr});
///   pm.add_pipeline("canonicalize,cse,dce");
///   pm.run(module);                     // throws pass::PassFailure
///   pm.print_timing(std::cerr);

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tpullm/ir/text/printer.hpp"
#include "tpullm/ir/verifier.hpp"
#include "tpullm/pass/pipeline.hpp"

namespace tpullm::pass {

/// How a PassManager runs its passes.
struct PassManagerConfig {
  bool verify_each = true;              ///< verify the input and the IR after every pass
  std::vector<std::string> print_after; ///< pass names whose output is printed; "all" = every pass
  std::ostream* print_stream = nullptr; ///< where print-after goes (nullptr: std::cerr)
  bool timing = false;                  ///< collect per-pass wall-clock times
  PassContext context;                  ///< what the passes share (the weight converter)
};

/// A pass failed or left the IR invalid. diagnostics() hold located errors; each message names
/// the pass (e.g. "after pass 'cse': 'top.Add' operand #0 is not defined before its use").
class PassFailure : public Error {
public:
  PassFailure(std::string pass, std::vector<DiagnosticError> diagnostics)
      : Error(ErrorKind::invalid_input, pass, join(diagnostics), join(diagnostics)),
        pass_(std::move(pass)), diagnostics_(std::move(diagnostics)) {}
  /// The pass to blame ("" when the input already failed to verify).
  const std::string& pass() const { return pass_; }
  const std::vector<DiagnosticError>& diagnostics() const { return diagnostics_; }

private:
  static std::string join(const std::vector<DiagnosticError>& d);
  std::string pass_;
  std::vector<DiagnosticError> diagnostics_;
};

/// Wall-clock time spent in one pipeline entry (accumulated over runs).
struct PassTiming {
  std::string pass;          ///< canonical spelling, e.g. "canonicalize{max-iterations=4}"
  double seconds = 0;        ///< time inside the pass
  double verify_seconds = 0; ///< time verifying after it
};

/// A pipeline of bound passes plus run settings.
class PassManager {
public:
  explicit PassManager(PassManagerConfig config = {}) : config_(std::move(config)) {}

  /// Appends the passes of a pipeline string (throws PipelineError).
  PassManager& add_pipeline(std::string_view pipeline) {
    return add_pipeline(Pipeline::parse(pipeline));
  }
  /// Appends the passes of a pipeline.
  PassManager& add_pipeline(const Pipeline& pipeline) {
    for (const auto& e : pipeline.entries())
      add_entry(e);
    return *this;
  }
  /// Appends registered pass `name` with options (throws PipelineError).
  PassManager& add(std::string_view name, const std::vector<OptionText>& options = {}) {
    add_entry(bind_pass(name, options));
    return *this;
  }
  /// Appends an unregistered pass (embedders and tests; tools use the registry).
  PassManager& add(std::string name, std::function<void(ir::Module&)> fn);

  /// The pipeline as text (canonical spelling).
  std::string pipeline() const;
  std::size_t size() const { return entries_.size(); }

  /// Runs every pass over `m`. Throws PassFailure when the input does not verify, a pass throws,
  /// or (verify_each) a pass leaves the IR invalid.
  void run(ir::Module& m);

  /// Accumulated timings, one per pipeline entry (zero unless config.timing).
  const std::vector<PassTiming>& timings() const { return timings_; }
  void reset_timings() {
    for (auto& t : timings_)
      t.seconds = t.verify_seconds = 0;
  }
  /// Prints the timing table: one row per pass, then the verifier and the total.
  void print_timing(std::ostream& os) const;

private:
  static std::string name_of(const PipelineEntry& e) { return e.info ? e.info->name : e.text; }
  bool prints_after(const PipelineEntry& e) const;
  void add_entry(PipelineEntry e) {
    timings_.push_back({e.text, 0, 0});
    entries_.push_back(std::move(e));
  }
  static void check(const ir::Module& m, const std::string& pass, const std::string& prefix);

  PassManagerConfig config_;
  std::vector<PipelineEntry> entries_;
  std::vector<PassTiming> timings_;
};

} // namespace tpullm::pass
