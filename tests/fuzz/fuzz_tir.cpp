// libFuzzer target: arbitrary bytes as `.tir` text. The parser must return a module or throw a
// DiagnosticError located in the input; a module that verifies must print, re-parse and print
// identically, and canonicalize, cse and dce must each leave it valid or refuse with
// tpullm::Error. Any other exception, crash or sanitizer report
// (e.g. signed overflow in shape arithmetic) is a bug.
#include "tpullm/ir/ir.hpp"
#include "tpullm/pass/passes/canonicalize.hpp"
#include "tpullm/pass/passes/cse.hpp"
#include "tpullm/pass/passes/dce.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<tpullm::ir::Module> m;
  try {
    m.emplace(tpullm::ir::text::parse_module(text, "fuzz.tir"));
  } catch (const tpullm::DiagnosticError& e) {
    if (e.location().file != "fuzz.tir" || e.location().line < 1)
      __builtin_trap(); // a parse error must point into the input
    return 0;
  }
  if (!tpullm::ir::verify_module(*m).empty())
    return 0;
  const std::string once = tpullm::ir::text::print_module(*m);
  try {
    tpullm::ir::Module again = tpullm::ir::text::parse_module(once, "printed.tir");
    if (tpullm::ir::text::print_module(again) != once)
      __builtin_trap(); // round trip changed the text
  } catch (const tpullm::DiagnosticError&) {
    __builtin_trap(); // printed text of a valid module must parse
  }
  // The passes directly (the pass registry would pull in the compiled back end): each must
  // keep the module valid or refuse with tpullm::Error.
  try {
    tpullm::pass::run_canonicalize(*m, {});
    if (!tpullm::ir::verify_module(*m).empty())
      __builtin_trap();
    tpullm::pass::run_cse(*m, {});
    if (!tpullm::ir::verify_module(*m).empty())
      __builtin_trap();
    tpullm::pass::run_dce(*m, {});
    if (!tpullm::ir::verify_module(*m).empty())
      __builtin_trap();
  } catch (const tpullm::Error&) {
  }
  return 0;
}
