// tpullm: the compiler driver. `tpullm --help` lists the subcommands (commands.cpp); each
// lives in tools/tpullm/cmd_<name>.cpp.
// Exit status: 0 success, 1 a check failed (verify bound exceeded) or an output could not be
// written, 2 unusable input, usage, or an internal error (docs/guarantees.md).
#include <charconv>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "command.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/detail/matmul_gemm_bf16dot.hpp"
#include "tpullm/devtools/tool_main.hpp"
#include "tpullm/version.hpp"

using namespace tpullm;
using namespace tpullm::cli;

namespace {

void print_usage(std::ostream& os) {
  os << "usage: tpullm <command> [options]\n\ncommands:\n";
  for (const auto& c : commands())
    os << "  " << c.usage << "\n";
  os << "  help [COMMAND]                       show help\n\n"
        "Run 'tpullm <command> --help' for the options of a command.\n";
}

/// A bad TPULLM_ISA or TPULLM_BF16_DOT is a usage error, reported before any work (the kernels
/// would otherwise throw it from the middle of a run).
void check_isa_environment() {
  // OMP_NUM_THREADS sets the default target's cores: a value the target would refuse is named
  // as what it is, not as a target.cores the user never gave.
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp != nullptr && *omp != '\0') {
    const std::string_view first = std::string_view(omp).substr(0, std::string_view(omp).find(','));
    std::int64_t n = 0;
    const auto r = std::from_chars(first.data(), first.data() + first.size(), n);
    check(r.ec == std::errc() && r.ptr == first.data() + first.size() && n >= 1 && n <= 4096,
          ErrorKind::invalid_input, "OMP_NUM_THREADS", "'", omp,
          "' is not a thread count in [1, 4096]");
  }
  // Both throw Error(where = the variable's name): invalid input for a value that is not one,
  // unsupported for an ISA this CPU lacks.
  (void)kernels::detail::bf16_dot_disabled(); // reads TPULLM_BF16_DOT
  const char* env = std::getenv("TPULLM_ISA");
  if (env == nullptr || *env == '\0')
    return;
  (void)kernels::active_isa();
}

int dispatch(const std::string& cmd, const std::vector<std::string>& args) {
  for (const auto& c : commands())
    if (cmd == c.name)
      return c.run(args);
  std::cerr << "tpullm: unknown command '" << cmd << "'\n";
  print_usage(std::cerr);
  return kBadInput;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string cmd = args.empty() ? std::string() : args.front();
  const std::string program = cmd.empty() || cmd[0] == '-' ? "tpullm" : "tpullm " + cmd;
  return run_tool(
      program,
      [&]() -> int {
        if (args.empty()) {
          print_usage(std::cerr);
          return kBadInput;
        }
        args.erase(args.begin());
        try {
          if (cmd == "--help" || cmd == "-h" || cmd == "help") {
            if (args.empty() || args.front() == "help" || args.front() == "--help" ||
                args.front() == "-h") {
              print_usage(std::cout);
              return kOk;
            }
            cmd = args.front();
            return dispatch(cmd, {"--help"});
          }
          check_isa_environment();
          if (cmd == "--version") {
            std::cout << "tpullm " << kVersionString << "\n";
            return kOk;
          }
          return dispatch(cmd, args);
        } catch (const po::error& e) {
          std::cerr << "tpullm " << cmd << ": " << e.what() << " (see 'tpullm " << cmd
                    << " --help')\n";
          return kBadInput;
        }
      },
      ExitCodes{kBadInput, kOutputFailed, kBadInput});
}
