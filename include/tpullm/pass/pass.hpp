#pragma once
/// What a pass is: a plain function `void(ir::Module&, const Options&)` (or
/// `void(ir::Module&, const Options&, const PassContext&)` when it needs what the pipeline's
/// owner shares, such as the weight converter) that changes the module only through a
/// rewrite::Rewriter (or the greedy driver) and throws tpullm::Error (DiagnosticError at the
/// offending op) when it cannot do its job. make_pass() turns such a function into a PassInfo
/// row of the registry table.

#include <any>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "tpullm/ir/module.hpp"
#include "tpullm/pass/options.hpp"

namespace tpullm::conversion {
class WeightConverter;
} // namespace tpullm::conversion

namespace tpullm::pass {

/// What every pass of one pipeline run shares, built once by the pipeline's owner (the
/// compiler, tpullm-opt, a test). Passes read it; none owns it.
struct PassContext {
  /// The compilation's weight converter (lower-to-tpu, fuse-qkv), so a weight read by many
  /// modules is converted once; nullptr: each pass converts with a private one.
  conversion::WeightConverter* converter = nullptr;
};

/// A pass bound to its options, ready to run with a context.
using PassFn = std::function<void(ir::Module&, const PassContext&)>;

/// One row of the pass table.
struct PassInfo {
  std::string name;                ///< pipeline spelling, e.g. "canonicalize"
  std::string description;         ///< one line for --list-passes
  std::vector<OptionInfo> options; ///< typed options with defaults
  /// Parses the given options (OptionError when malformed) and returns the bound pass.
  std::function<PassFn(const std::vector<OptionText>&)> bind;
  /// Binds typed options (an std::any holding the pass's options struct, exactly).
  std::function<PassFn(const std::any&)> bind_typed;
};

/// The pass function `fn` bound to `opts`, called with the context when it takes one.
template <class Opts, class Fn>
PassFn bind_options(Fn fn, Opts opts) {
  return [fn, opts](ir::Module& m, const PassContext& ctx) {
    if constexpr (std::is_invocable_v<Fn, ir::Module&, const Opts&, const PassContext&>)
      fn(m, opts, ctx);
    else
      fn(m, opts);
  };
}

/// A PassInfo whose options struct is Opts and whose `bind(opts)` returns the pass bound to
/// them: what a pass derives from its options once, when bound, rather than at every run
/// (lower-to-tpu's quantization plan), is built there. An Error thrown by `bind` is a refusal
/// of the options (bind_pass reports it as a PipelineError).
template <class Opts, class Bind>
PassInfo make_bound_pass(std::string name, std::string description, Bind bind) {
  PassInfo info;
  info.name = name;
  info.description = std::move(description);
  info.options = describe_options<Opts>();
  info.bind = [name, bind](const std::vector<OptionText>& given) -> PassFn {
    return bind(parse_options<Opts>(name, given));
  };
  info.bind_typed = [name, bind](const std::any& opts) -> PassFn {
    const Opts* o = std::any_cast<Opts>(&opts);
    check(o != nullptr, ErrorKind::internal, "pass '" + name + "'",
          "bound with options of another pass");
    return bind(*o);
  };
  return info;
}

/// A PassInfo for `fn(module, opts)` whose options struct is Opts.
template <class Opts, class Fn>
PassInfo make_pass(std::string name, std::string description, Fn fn) {
  return make_bound_pass<Opts>(std::move(name), std::move(description),
                               [fn](const Opts& opts) { return bind_options<Opts>(fn, opts); });
}

/// Runs fn(module, function) on each function of `m` (for function-local passes).
template <class Fn>
void for_each_function(ir::Module& m, Fn&& fn) {
  for (const auto& f : m.functions())
    fn(m, *f);
}

} // namespace tpullm::pass
