// tpullm-opt: reads a .tir module, verifies it, runs a pass pipeline and prints the result.
// Exit codes: 0 success, 1 invalid IR or pipeline (diagnostics on stderr as
// `file:line:col: error: message`), an unreadable input or an output that cannot be written,
// 2 usage errors and internal errors (docs/guarantees.md). `-o FILE` is replaced atomically and
// only when every part succeeded; on failure it is left as it was.

#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

#include "tpullm/ir/text/parser.hpp"
#include "tpullm/ir/text/printer.hpp"
#include "tpullm/ir/verifier.hpp"
#include "tpullm/pass/pass_manager.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/output_file.hpp"
#include "tpullm/devtools/tool_main.hpp"
#include "tpullm/version.hpp"

namespace po = boost::program_options;
using namespace tpullm;

namespace {

constexpr int kExitInvalid = 1;
constexpr int kExitUsage = 2;
constexpr std::string_view kSplitMarker = "// -----";

/// Prints `loc: error: message`; a location without a line is reported at `file`.
void report(const Location& loc, const std::string& message, const std::string& file) {
  std::cerr << (loc.line > 0 ? loc.str() : file) << ": error: " << message << "\n";
}

/// One `// -----`-separated piece of the input (a view into it) and the line it starts on.
struct Chunk {
  std::string_view text;
  int first_line = 1;
};

/// Splits `text` at lines that are exactly `// -----` (surrounding blanks ignored), in one
/// pass: linear in the size of the input whatever the number of pieces.
std::vector<Chunk> split_input(std::string_view text) {
  std::vector<Chunk> chunks;
  std::size_t chunk_begin = 0, pos = 0;
  int number = 0, first_line = 1;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    const std::size_t next = nl == std::string_view::npos ? text.size() : nl + 1;
    ++number;
    std::string_view line = text.substr(pos, end - pos);
    const auto b = line.find_first_not_of(" \t\r");
    const auto e = line.find_last_not_of(" \t\r");
    if (b != std::string_view::npos && line.substr(b, e - b + 1) == kSplitMarker) {
      chunks.push_back({text.substr(chunk_begin, pos - chunk_begin), first_line});
      chunk_begin = next;
      first_line = number + 1;
    }
    pos = next;
  }
  chunks.push_back({text.substr(chunk_begin), first_line});
  return chunks;
}

/// Parses, verifies and transforms one chunk; appends its printed module to `out`.
bool process(const Chunk& chunk, const std::string& file, pass::PassManager& pm, std::string& out) {
  try {
    ir::Module m = ir::text::parse_module(chunk.text, file, chunk.first_line);
    const auto errs = ir::verify_module(m);
    for (const auto& e : errs)
      report(e.location(), e.message(), file);
    if (!errs.empty())
      return false;
    pm.run(m);
    out += ir::text::print_module(m);
    return true;
  } catch (const DiagnosticError& e) {
    report(e.location(), e.message(), file);
  } catch (const pass::PassFailure& e) {
    for (const auto& d : e.diagnostics())
      report(d.location(), d.message(), file);
  }
  return false;
}

void list_passes(std::ostream& os) {
  os << "Passes (pipeline syntax: name{key=value,...},name,...):\n";
  for (const auto& p : pass::pass_registry()) {
    os << "  " << p.name << "\n      " << p.description << "\n";
    for (const auto& o : p.options)
      os << "      " << o.key << "=<" << o.type << "> (default " << o.default_value
         << "): " << o.help << "\n";
  }
}

int run(int argc, char** argv) {
  std::string input = "-", output = "-", pipeline;
  std::vector<std::string> print_after;
  bool no_verify_each = false, verify_each = false, timing = false, split = false;

  po::options_description visible(
      "Usage: tpullm-opt [options] [input.tir]\n\n"
      "Reads a .tir module (a file, or '-' / nothing for stdin), verifies it, runs the pass\n"
      "pipeline and prints the resulting module.\n\nOptions");
  visible.add_options()("help,h", "print this help and exit")("version",
                                                              "print the version and exit")(
      "pass-pipeline,p", po::value<std::string>(&pipeline),
      "passes to run, comma separated, with options in braces, e.g. "
      "'canonicalize{max-iterations=4},cse,dce'")(
      "output,o", po::value<std::string>(&output)->default_value("-"),
      "write the result to FILE ('-' = stdout); FILE is replaced atomically, and only when "
      "every part succeeded")("verify-each", po::bool_switch(&verify_each),
                              "verify the IR after every pass (the default)")(
      "no-verify-each", po::bool_switch(&no_verify_each),
      "do not verify between passes (the parsed input is always verified)")(
      "print-after", po::value<std::vector<std::string>>(&print_after)->composing(),
      "print the IR to stderr after PASS (a pass name, a comma-separated list, or 'all'); "
      "repeatable")("timing", po::bool_switch(&timing),
                    "print per-pass wall-clock times to stderr")(
      "list-passes", "list the registered passes and their options, then exit")(
      "split-input-file", po::bool_switch(&split),
      "split the input at '// -----' lines and process each part on its own; diagnostics keep "
      "whole-file line numbers, outputs are joined by '// -----', exit 1 if any part failed");
  po::options_description hidden;
  hidden.add_options()("input", po::value<std::string>(&input), "input file");
  po::options_description all;
  all.add(visible).add(hidden);
  po::positional_options_description positional;
  positional.add("input", 1);

  po::variables_map vm;
  try {
    // No prefix guessing: a misspelt option is unknown, never taken for another one.
    po::store(
        po::command_line_parser(argc, argv)
            .options(all)
            .positional(positional)
            .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
            .run(),
        vm);
    po::notify(vm);
    if (verify_each && no_verify_each)
      throw po::error("--verify-each and --no-verify-each are mutually exclusive");
  } catch (const po::error& e) {
    std::cerr << "tpullm-opt: error: " << e.what() << "\nTry 'tpullm-opt --help'.\n";
    return kExitUsage;
  }
  if (vm.count("help")) {
    std::cout << visible
              << "\nExit status: 0 success, 1 invalid IR or pipeline, 2 usage error.\n"
                 "Exit status 1 also reports an unreadable input or an output that cannot be "
                 "written\n(-o FILE is replaced only on success), 2 an internal error.\n";
    return 0;
  }
  if (vm.count("version")) {
    std::cout << "tpullm-opt " << kVersionString << "\n";
    return 0;
  }
  if (vm.count("list-passes")) {
    list_passes(std::cout);
    return 0;
  }

  pass::PassManagerConfig config;
  config.verify_each = !no_verify_each;
  config.timing = timing;
  for (const auto& p : print_after) {
    std::stringstream ss(p);
    for (std::string name; std::getline(ss, name, ',');)
      if (!name.empty())
        config.print_after.push_back(name);
  }
  pass::PassManager pm(config);
  try {
    pm.add_pipeline(pipeline);
  } catch (const pass::PipelineError& e) {
    std::cerr << "<pass-pipeline>:1:" << e.column() << ": error: " << e.message() << "\n";
    return kExitInvalid;
  }
  for (const auto& name : config.print_after)
    if (name != "all" && !pass::find_pass(name)) {
      std::cerr << "tpullm-opt: error: --print-after: unknown pass '" << name << "'\n";
      return kExitUsage;
    }

  // Refuse a bad output path before any work; the file is only replaced on success.
  std::optional<OutputFile> out_file;
  if (output != "-")
    out_file.emplace(output);

  // Read the whole input (a FIFO, directory or device is refused without blocking).
  const std::string file = input == "-" ? "<stdin>" : input;
  std::string text;
  try {
    text = input == "-" ? read_stdin() : read_regular_file(input);
  } catch (const Error& e) {
    constexpr std::string_view open_failed = "cannot open file: ";
    std::string_view why = e.message();
    if (why.substr(0, open_failed.size()) == open_failed)
      why.remove_prefix(open_failed.size());
    std::cerr << file << ": error: cannot open input file: " << why
              << (why.find("not a regular file") != std::string_view::npos
                      ? " (to read a pipe, redirect it to standard input and give '-')"
                      : "")
              << "\n";
    return kExitInvalid;
  }

  std::vector<Chunk> chunks = split ? split_input(text) : std::vector<Chunk>{{text, 1}};
  bool ok = true;
  std::string result;
  bool first_output = true;
  for (const auto& chunk : chunks) {
    std::string out;
    if (!process(chunk, file, pm, out)) {
      ok = false;
      continue;
    }
    if (!first_output)
      result += std::string(kSplitMarker) + "\n";
    first_output = false;
    result += out;
  }

  if (!out_file) {
    write_stdout(result);
  } else if (ok) {
    out_file->write(result);
    out_file->commit();
  }
  if (timing)
    pm.print_timing(std::cerr);
  return ok ? 0 : kExitInvalid;
}

} // namespace

int main(int argc, char** argv) {
  // Errors (an unwritable output is the usual one) exit 1, internal errors 2, never an abort.
  return run_tool(
      "tpullm-opt", [&] { return run(argc, argv); },
      ExitCodes{kExitInvalid, kExitInvalid, kExitUsage});
}
