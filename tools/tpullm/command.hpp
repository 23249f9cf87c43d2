#pragma once
// Shared pieces of the `tpullm` driver's subcommands: exit codes, the command table entry,
// the stage-shape options and a progress line. Each subcommand lives in its own cmd_<name>.cpp.
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "tpullm/frontend/stage_params.hpp"

namespace tpullm::cli {

namespace po = boost::program_options;

/// Exit status of every subcommand: success, a check failed, unusable input or usage.
constexpr int kOk = 0, kCheckFailed = 1, kBadInput = 2;

/// One subcommand: its name, a one-line usage for the top-level help, and its entry point
/// (arguments after the command name).
struct Command {
  const char* name;
  const char* usage;
  int (*run)(const std::vector<std::string>& args);
};

/// Every subcommand, in the order `tpullm --help` lists them (commands.cpp).
const std::vector<Command>& commands();

/// Options shared by every command that builds stage modules, writing into `p`.
po::options_description stage_options(frontend::StageParams& p);

/// Parses a `<command> MODEL_DIR [options]` line: adds the stage options to `o` and MODEL_DIR
/// as the first positional argument. Returns false after printing help (nothing else to do).
bool parse_model_command(const std::vector<std::string>& args, po::options_description& o,
                         frontend::StageParams& params);

/// Progress on stderr: an updating line on a terminal, nothing when redirected.
void print_progress(const std::string& what, std::size_t done, std::size_t total);

} // namespace tpullm::cli
