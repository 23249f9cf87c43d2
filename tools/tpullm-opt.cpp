// tpullm-opt: reads a .tir module, verifies it, runs a pass pipeline and prints the result.
// Exit codes: 0 success, 1 invalid IR or pipeline (diagnostics on stderr as
// `file:line:col: error: message`), 2 usage errors.

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "tpullm/ir/text/parser.hpp"
#include "tpullm/ir/text/printer.hpp"
#include "tpullm/ir/verifier.hpp"
#include "tpullm/pass/pass_manager.hpp"
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

/// One `// -----`-separated piece of the input and the line it starts on.
struct Chunk {
  std::string text;
  int first_line = 1;
};

/// Splits `text` at lines that are exactly `// -----` (surrounding blanks ignored).
std::vector<Chunk> split_input(const std::string& text) {
  std::vector<Chunk> chunks(1);
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const auto b = line.find_first_not_of(" \t\r");
    const auto e = line.find_last_not_of(" \t\r");
    if (b != std::string::npos && line.substr(b, e - b + 1) == kSplitMarker) {
      chunks.push_back({"", number + 1});
      continue;
    }
    chunks.back().text += line + "\n";
  }
  return chunks;
}

/// Parses, verifies and transforms one chunk; appends its printed module to `out`.
bool process(const Chunk& chunk, const std::string& file, pass::PassManager& pm, std::string& out) {
  // Leading newlines keep the lexer's line numbers relative to the whole file.
  const std::string text = std::string(chunk.first_line - 1, '\n') + chunk.text;
  try {
    ir::Module m = ir::text::parse_module(text, file);
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

} // namespace

int main(int argc, char** argv) {
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
      "write the result to FILE ('-' = stdout)")("verify-each", po::bool_switch(&verify_each),
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
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
    if (verify_each && no_verify_each)
      throw po::error("--verify-each and --no-verify-each are mutually exclusive");
  } catch (const po::error& e) {
    std::cerr << "tpullm-opt: error: " << e.what() << "\nTry 'tpullm-opt --help'.\n";
    return kExitUsage;
  }
  if (vm.count("help")) {
    std::cout << visible << "\nExit status: 0 success, 1 invalid IR or pipeline, 2 usage error.\n";
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

  // Read the whole input.
  std::stringstream buffer;
  const std::string file = input == "-" ? "<stdin>" : input;
  if (input == "-") {
    buffer << std::cin.rdbuf();
  } else {
    std::ifstream in(input, std::ios::binary);
    if (!in) {
      std::cerr << input << ": error: cannot open input file\n";
      return kExitInvalid;
    }
    buffer << in.rdbuf();
  }
  const std::string text = buffer.str();

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

  if (output == "-") {
    std::cout << result << std::flush;
  } else {
    std::ofstream out(output, std::ios::binary);
    if (!(out << result)) {
      std::cerr << output << ": error: cannot write output file\n";
      return kExitInvalid;
    }
  }
  if (timing)
    pm.print_timing(std::cerr);
  return ok ? 0 : kExitInvalid;
}
