#pragma once
// Shared pieces of the `tpullm` driver's subcommands: exit codes, the command table entry,
// the stage-shape options and a progress line. Each subcommand lives in its own cmd_<name>.cpp.
#include <charconv>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::cli {

namespace po = boost::program_options;

/// Seconds of steady clock elapsed since `t0`.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Exit status of every subcommand: success; a check failed; an output could not be written
/// (run_tool maps OutputError to it); unusable input, usage or an internal error.
constexpr int kOk = 0, kCheckFailed = 1, kOutputFailed = 1, kBadInput = 2;

/// How every tpullm command line is parsed: the usual GNU style without guessing, so that a
/// misspelt or not-yet-existing option (`--mode` for `--model`) is reported as unknown instead
/// of being read as another option whose name it prefixes.
constexpr int kOptionStyle =
    po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

/// One subcommand: its name, a one-line usage for the top-level help, and its entry point
/// (arguments after the command name).
struct Command {
  const char* name;
  const char* usage;
  int (*run)(const std::vector<std::string>& args);
};

/// Every subcommand, in the order `tpullm --help` lists them (commands.cpp).
const std::vector<Command>& commands();

/// Parses `args` against `o` (kOptionStyle) with one positional argument stored as option
/// `positional` (e.g. "bundle"), into `vm`. Returns false after printing help (nothing else to
/// do); otherwise notifies `vm` (required options checked, values stored).
bool parse_command_line(const std::vector<std::string>& args, const po::options_description& o,
                        const char* positional, po::variables_map& vm);

/// A field of /proc/self/status in bytes ("VmHWM": peak resident set, "VmRSS"), 0 when
/// unavailable.
std::int64_t proc_status_bytes(const std::string& key);

/// `args` joined by single spaces: a command line as one string (what ranks compare).
inline std::string command_line(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args)
    s += (s.empty() ? "" : " ") + a;
  return s;
}

/// Options shared by every command that builds stage modules, writing into `p`.
po::options_description stage_options(frontend::StageParams& p);

/// Parses a `<command> MODEL_DIR [options]` line (kOptionStyle): adds the stage options to `o`
/// and MODEL_DIR as the first positional argument. Returns false after printing help (nothing
/// else to do).
bool parse_model_command(const std::vector<std::string>& args, po::options_description& o,
                         frontend::StageParams& params, po::variables_map* parsed = nullptr);

/// Parses a comma-separated list of integers ("1,2,3"); throws Error(invalid_input) naming
/// `option` and the bad item (empty items, signs on unsigned types, overflow, trailing text).
template <class T>
std::vector<T> parse_id_list(std::string_view text, const char* option) {
  std::vector<T> out;
  check(!text.empty(), ErrorKind::invalid_input, option, "expects a comma-separated list");
  std::size_t i = 0;
  while (i <= text.size()) {
    const std::size_t j = std::min(text.find(',', i), text.size());
    const std::string_view item = text.substr(i, j - i);
    T v{};
    const auto r = std::from_chars(item.data(), item.data() + item.size(), v);
    check(!item.empty() && r.ec == std::errc() && r.ptr == item.data() + item.size(),
          ErrorKind::invalid_input, option, "'", item, "' is not an integer in range");
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

/// Options about how inputs are read, shared by every command that reads a checkpoint:
/// `--no-mmap` (read the safetensors files into memory instead of mapping them).
po::options_description input_options(bool& no_mmap);

/// How a command that runs a bundle opens it: `--no-mmap`, `--verify-weights`,
/// `--no-verify-weights`.
struct BundleOpenOptions {
  bool no_mmap = false;     ///< read the bundle into memory instead of mapping it
  bool verify = false;      ///< check every weight chunk, whatever the record says
  bool skip_verify = false; ///< do not check the weights
};

/// The options of BundleOpenOptions, for run, chat, serve and bench.
po::options_description bundle_open_options(BundleOpenOptions& o);

/// Refuses (Error(invalid_input)) `--verify-weights` with `--no-verify-weights`.
void check_bundle_open_options(const BundleOpenOptions& o);

/// `--no-mmap` alone, for commands that read a bundle without running it (inspect, tokenize).
po::options_description bundle_read_options(bool& no_mmap);

/// Opens bundle `file` as `o` says and checks its weights (bundle::check_weights: by default
/// once per unchanged file, remembered; on `threads` threads, 0: all usable cores). Refuses
/// `--verify-weights` with `--no-verify-weights` (check_bundle_open_options). `report`, when given,
/// receives one line on what was checked ("weights: ...").
std::shared_ptr<const bundle::Bundle> open_bundle(const std::string& file,
                                                  const BundleOpenOptions& o,
                                                  std::int64_t threads = 0,
                                                  std::string* report = nullptr);

/// Refuses (Error(invalid_input) naming "--output") an output directory that is the model
/// directory or contains it: replacing it would delete the model.
void refuse_output_over_model(const std::string& output, const std::string& model);

/// Refuses (Error(invalid_input) naming `output_option`, "--output" by default) an output file
/// that is one of the model's own files (config.json, *.json, *.safetensors in the model
/// directory): replacing it would destroy the checkpoint being read.
void refuse_output_over_model_file(const std::string& output, const std::string& model,
                                   const std::string& output_option = "--output");

/// Refuses (Error(invalid_input) naming `output_option`, "--output" by default) an output file
/// that is the file `input` names (an existing path, the same file through any link): the
/// command reads `input`, and replacing it would lose it. `option` names where `input` came
/// from (e.g. "--calib").
void refuse_output_over_input(const std::string& output, const std::string& input,
                              const char* option, const std::string& output_option = "--output");

/// Progress on stderr: an updating line on a terminal, nothing when redirected.
void print_progress(const std::string& what, std::size_t done, std::size_t total);

} // namespace tpullm::cli
