// tpullm: the compiler driver. `tpullm --help` lists the subcommands (commands.cpp); each
// lives in tools/tpullm/cmd_<name>.cpp.
// Exit status: 0 success, 1 a check failed (verify bound exceeded), 2 unusable input or usage.
#include <iostream>
#include <string>
#include <vector>

#include "command.hpp"
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
  if (args.empty()) {
    print_usage(std::cerr);
    return kBadInput;
  }
  std::string cmd = args.front();
  args.erase(args.begin());
  try {
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      if (args.empty()) {
        print_usage(std::cout);
        return kOk;
      }
      cmd = args.front();
      return dispatch(cmd, {"--help"});
    }
    if (cmd == "--version") {
      std::cout << "tpullm " << kVersionString << "\n";
      return kOk;
    }
    return dispatch(cmd, args);
  } catch (const po::error& e) {
    std::cerr << "tpullm " << cmd << ": " << e.what() << " (see 'tpullm " << cmd << " --help')\n";
    return kBadInput;
  } catch (const std::exception& e) {
    std::cerr << "tpullm " << cmd << ": " << e.what() << "\n";
    return kBadInput;
  }
}
