#pragma once
/// What a pass is: a plain function `void(ir::Module&, const Options&)` that changes the module
/// only through a rewrite::Rewriter (or the greedy driver) and throws (DiagnosticError at the
/// offending op, or std::runtime_error) when it cannot do its job. make_pass() turns such a
/// function into a PassInfo row of the registry table.

#include <functional>
#include <string>
#include <vector>

#include "tpullm/ir/module.hpp"
#include "tpullm/pass/options.hpp"

namespace tpullm::pass {

/// A pass bound to its options, ready to run.
using PassFn = std::function<void(ir::Module&)>;

/// One row of the pass table.
struct PassInfo {
  std::string name;                ///< pipeline spelling, e.g. "canonicalize"
  std::string description;         ///< one line for --list-passes
  std::vector<OptionInfo> options; ///< typed options with defaults
  /// Parses the given options (OptionError when malformed) and returns the bound pass.
  std::function<PassFn(const std::vector<OptionText>&)> bind;
};

/// A PassInfo for `fn(module, opts)` whose options struct is Opts.
template <class Opts, class Fn>
PassInfo make_pass(std::string name, std::string description, Fn fn) {
  PassInfo info;
  info.name = name;
  info.description = std::move(description);
  info.options = describe_options<Opts>();
  info.bind = [name, fn](const std::vector<OptionText>& given) -> PassFn {
    Opts opts = parse_options<Opts>(name, given);
    return [fn, opts](ir::Module& m) { fn(m, opts); };
  };
  return info;
}

/// Runs fn(module, function) on each function of `m` (for function-local passes).
template <class Fn>
void for_each_function(ir::Module& m, Fn&& fn) {
  for (const auto& f : m.functions())
    fn(m, *f);
}

} // namespace tpullm::pass
