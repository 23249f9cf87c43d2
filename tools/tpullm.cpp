// tpullm: the compiler driver. Subcommands:
//   import MODEL_DIR --emit top -o DIR   write every stage module as .tir
//   verify MODEL_DIR --level top         run the golden scenarios through the interpreted modules
// Exit status: 0 success, 1 a check failed (verify bound exceeded), 2 unusable input or usage.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include <boost/program_options.hpp>

#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/ir/ir.hpp"
#include "tpullm/runtime/interpreter_executor.hpp"
#include "tpullm/verify/golden_check.hpp"
#include "tpullm/version.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace tpullm;

namespace {

constexpr int kOk = 0, kCheckFailed = 1, kBadInput = 2;

const char* kUsage = R"(usage: tpullm <command> [options]

commands:
  import MODEL_DIR --emit top -o DIR   build the Top stage modules of a HuggingFace checkpoint
                                       and write one .tir file per module into DIR
  verify MODEL_DIR --level top         run the golden scenarios (goldens.safetensors) through
                                       the interpreted Top modules and compare logits
  help [COMMAND]                       show help

Run 'tpullm <command> --help' for the options of a command.
)";

/// Options shared by every command that builds stage modules.
po::options_description stage_options(frontend::StageParams& p) {
  po::options_description o("stage shapes");
  o.add_options()("seq-length", po::value(&p.seq_length)->default_value(p.seq_length),
                  "KV-cache capacity and RoPE table length (positions)")(
      "max-input-length", po::value(&p.max_input_length)->default_value(p.max_input_length),
      "tokens per prefill / prefill_kv call; longer prompts are segmented")(
      "decode-chunk", po::value(&p.decode_chunk)->default_value(128),
      "smallest decode variant: decode modules for seq_length, seq_length/2, ... down to this "
      "(0: only seq_length)")("no-history", "do not build prefill_kv (block_kv_i) modules");
  return o;
}

/// Parses a `<command> MODEL_DIR [options]` line: adds the stage options to `o` and MODEL_DIR
/// as the first positional argument. Returns false after printing help (nothing else to do).
bool parse_model_command(const std::vector<std::string>& args, po::options_description& o,
                         frontend::StageParams& params) {
  o.add(stage_options(params));
  po::positional_options_description pos;
  pos.add("model", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(o).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << o;
    return false;
  }
  po::notify(vm);
  params.with_history = !vm.count("no-history");
  return true;
}

/// Progress on stderr: an updating line on a terminal, nothing when redirected.
void print_progress(const std::string& what, std::size_t done, std::size_t total) {
  static const bool tty = isatty(STDERR_FILENO) != 0;
  if (!tty)
    return;
  std::cerr << "\r[" << done << "/" << total << "] " << what << "\033[K" << std::flush;
  if (done == total)
    std::cerr << "\n";
}

int cmd_import(const std::vector<std::string>& args) {
  std::string model, emit = "top", out_dir;
  frontend::StageParams params;
  po::options_description o("tpullm import MODEL_DIR --emit top -o DIR");
  o.add_options()("help,h", "show this help")("model", po::value(&model)->required(),
                                              "checkpoint directory (config.json + safetensors)")(
      "emit", po::value(&emit)->default_value("top"), "IR level to write: top")(
      "output,o", po::value(&out_dir)->required(), "directory to write <module>.tir files into");
  if (!parse_model_command(args, o, params))
    return kOk;
  if (emit != "top")
    throw Error(ErrorKind::unsupported, "--emit",
                "only 'top' can be emitted so far (got '" + emit + "')");
  const auto desc = frontend::load_model(model);
  auto modules = frontend::build_top_modules(desc, params);
  fs::create_directories(out_dir);
  std::size_t i = 0;
  for (const auto& m : modules) {
    ir::verify_or_throw(m);
    const fs::path file = fs::path(out_dir) / (m.name() + ".tir");
    std::ofstream f(file);
    f << ir::text::print_module(m);
    if (!f)
      throw Error(ErrorKind::io, file.string(), "cannot write");
    print_progress(file.string(), ++i, modules.size());
  }
  std::cout << "wrote " << modules.size() << " Top modules to " << out_dir << "\n";
  return kOk;
}

int cmd_verify(const std::vector<std::string>& args) {
  std::string model, level = "top", goldens;
  float rel_tol = 1e-4f;
  frontend::StageParams params;
  po::options_description o("tpullm verify MODEL_DIR --level top [--goldens FILE]");
  o.add_options()("help,h", "show this help")("model", po::value(&model)->required(),
                                              "checkpoint directory")(
      "level", po::value(&level)->default_value("top"),
      "what to check: top (interpreted Top modules)")(
      "goldens", po::value(&goldens),
      "goldens.safetensors (default: MODEL_DIR/goldens.safetensors)")(
      "rel-tol", po::value(&rel_tol)->default_value(1e-4f, "1e-4"),
      "bound: |ours - golden| <= rel-tol * max|golden| per logits tensor");
  if (!parse_model_command(args, o, params))
    return kOk;
  if (level != "top")
    throw Error(ErrorKind::unsupported, "--level",
                "only 'top' is implemented so far (got '" + level +
                    "'); 'bundle' comes with the back end");
  const auto t0 = std::chrono::steady_clock::now();
  const auto desc = frontend::load_model(model);
  const auto g = frontend::load_goldens(goldens.empty() ? fs::path(model) : fs::path(goldens));
  check(g.vocab == desc.dims.vocab, ErrorKind::invalid_input, goldens.empty() ? model : goldens,
        "goldens have vocabulary ", g.vocab, " but the model has ", desc.dims.vocab);
  runtime::InterpreterExecutor exec(frontend::build_top_modules(desc, params));
  runtime::Session session(
      exec,
      {desc.dims.layers, desc.dims.hidden, desc.dims.kv_heads, desc.dims.head_dim, desc.dims.vocab},
      params);
  std::cerr << "verifying " << model << " at level top (seq_length " << params.seq_length
            << ", max_input_length " << params.max_input_length << ")\n";
  auto reports = verify::check_goldens(session, g, rel_tol);
  bool ok = true;
  std::cout << "scenario  max|err|      err/max|golden|  argmax agree  result\n";
  for (const auto& r : reports) {
    std::cout << std::left << std::setw(10) << r.name << std::setw(14) << std::scientific
              << std::setprecision(3) << r.max_abs_err << std::setw(17) << r.max_rel_err
              << std::setw(14) << (std::to_string(r.argmax_agree) + "/" + std::to_string(r.rows))
              << (r.ok ? "ok" : "FAILED") << "\n";
    ok = ok && r.ok;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << std::defaultfloat << (ok ? "all scenarios within " : "bound exceeded: ") << rel_tol
            << " * max|golden| (" << std::setprecision(3) << secs << " s)\n";
  return ok ? kOk : kCheckFailed;
}

int dispatch(const std::string& cmd, const std::vector<std::string>& args) {
  if (cmd == "import")
    return cmd_import(args);
  if (cmd == "verify")
    return cmd_verify(args);
  std::cerr << "tpullm: unknown command '" << cmd << "'\n" << kUsage;
  return kBadInput;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return kBadInput;
  }
  std::string cmd = args.front();
  args.erase(args.begin());
  try {
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      if (args.empty()) {
        std::cout << kUsage;
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
