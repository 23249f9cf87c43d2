// Shared option parsing and progress output of the `tpullm` subcommands.
#include "command.hpp"

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <unistd.h>

namespace tpullm::cli {

po::options_description stage_options(frontend::StageParams& p) {
  po::options_description o("stage shapes");
  o.add_options()("seq-length", po::value(&p.seq_length)->default_value(p.seq_length),
                  "KV-cache capacity and RoPE table length (positions)")(
      "max-input-length", po::value(&p.max_input_length)->default_value(p.max_input_length),
      "tokens per prefill / prefill_kv call; longer prompts are segmented")(
      "decode-chunk", po::value(&p.decode_chunk)->default_value(128),
      "smallest decode variant: decode modules for seq_length, seq_length/2, ... down to this "
      "(0: only seq_length)")(
      "decode-chunks", po::value<std::string>()->notifier([&p](const std::string& v) {
        p.decode_chunks = parse_id_list<std::int64_t>(v, "--decode-chunks");
      }),
      "explicit decode variants below seq_length, e.g. 512,256,128 (replaces --decode-chunk)")(
      "decode-batches", po::value<std::string>()->notifier([&p](const std::string& v) {
        p.decode_batches = parse_id_list<std::int64_t>(v, "--decode-batches");
      }),
      "batched decode sizes, e.g. 1,2,4,8: decode modules of hidden_states [B, 1, H] for each "
      "B > 1 (one step of B conversations reads each weight once; used by `tpullm serve`); "
      "default 1 (no batched decode)")(
      "prefill-lengths",
      po::value<std::string>()->default_value("auto")->notifier([&p](const std::string& v) {
        p.prefill_auto = v == "auto";
        p.prefill_chunks.clear();
        if (v != "auto" && v != "none")
          p.prefill_chunks = parse_id_list<std::int64_t>(v, "--prefill-lengths");
      }),
      "shorter prefill / prefill_kv variants below max-input-length, e.g. 16,64 (a prompt "
      "segment runs through the smallest that holds it); auto: those of 16,64,128,256 below "
      "max-input-length; none: max-input-length only")(
      "verify-lengths", po::value<std::string>()->notifier([&p](const std::string& v) {
        p.verify_lengths = parse_id_list<std::int64_t>(v, "--verify-lengths");
      }),
      "speculative decoding's verify segments, e.g. 4,8 (the last token and up to 3 or 7 "
      "drafts; each in [2, 16]): more prefill / prefill_kv variants of those lengths, beside "
      "--prefill-lengths")("no-history", "do not build prefill_kv (block_kv_i) modules");
  return o;
}

po::options_description input_options(bool& no_mmap) {
  po::options_description o("input");
  o.add_options()("no-mmap", po::bool_switch(&no_mmap),
                  "read the safetensors files into memory instead of mapping them (costs their "
                  "size in RAM; the run no longer depends on the files staying unchanged)");
  return o;
}

po::options_description bundle_read_options(bool& no_mmap) {
  po::options_description o("bundle input");
  o.add_options()("no-mmap", po::bool_switch(&no_mmap),
                  "read the bundle into memory instead of mapping it (costs its size in RAM; "
                  "the run no longer depends on the file staying unchanged)");
  return o;
}

po::options_description bundle_open_options(BundleOpenOptions& b) {
  po::options_description o = bundle_read_options(b.no_mmap);
  o.add_options()("verify-weights", po::bool_switch(&b.verify),
                  "check every chunk of the weight blob against its CRC-32C before running, "
                  "even when this unchanged file passed before (by default the check runs once "
                  "per file and is remembered in ~/.cache/tpullm/verified-bundles)")(
      "no-verify-weights", po::bool_switch(&b.skip_verify),
      "do not check the weight blob's CRC-32Cs (a flipped weight bit then goes undetected)");
  return o;
}

void check_bundle_open_options(const BundleOpenOptions& o) {
  check(!(o.verify && o.skip_verify), ErrorKind::invalid_input, "--verify-weights",
        "contradicts --no-verify-weights; give one of them");
}

std::shared_ptr<const bundle::Bundle> open_bundle(const std::string& file,
                                                  const BundleOpenOptions& o, std::int64_t threads,
                                                  std::string* report) {
  check_bundle_open_options(o);
  auto b = bundle::Bundle::open(file, o.no_mmap ? FileAccess::read : FileAccess::map);
  const auto how = o.skip_verify ? bundle::WeightVerify::never
                   : o.verify    ? bundle::WeightVerify::always
                                 : bundle::WeightVerify::remembered;
  const auto r = bundle::check_weights(*b, how, threads);
  if (report != nullptr) {
    std::ostringstream line;
    if (r.verified)
      line << "weights: " << r.check.chunks << " CRC-32C chunks verified in " << std::fixed
           << std::setprecision(2) << r.check.seconds << " s";
    else if (r.remembered)
      line << "weights: verified on an earlier run of this unchanged file";
    else
      line << "weights: not verified (--no-verify-weights)";
    *report = line.str();
  }
  return b;
}

void refuse_output_over_model(const std::string& output, const std::string& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path out = fs::weakly_canonical(fs::absolute(output), ec);
  fs::path in = fs::weakly_canonical(fs::absolute(model), ec);
  if (ec)
    return; // the model directory will be reported missing by the loader
  for (fs::path* p : {&out, &in})
    if (p->filename().empty()) // "dir/" iterates with a trailing empty element
      *p = p->parent_path();
  check(out != in, ErrorKind::invalid_input, "--output", "'", output,
        "' is the model directory; writing there would replace the model");
  // out is an ancestor of the model directory when the model path starts with it.
  auto o = out.begin(), i = in.begin();
  for (; o != out.end() && i != in.end() && *o == *i; ++o, ++i) {
  }
  check(o != out.end(), ErrorKind::invalid_input, "--output", "'", output,
        "' contains the model directory '", model, "'; replacing it would delete the model");
}

void refuse_output_over_model_file(const std::string& output, const std::string& model,
                                   const std::string& output_option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(output, ec) || !fs::is_directory(model, ec))
    return;
  for (const auto& e : fs::directory_iterator(model, ec)) {
    const std::string ext = e.path().extension().string();
    if ((ext == ".json" || ext == ".safetensors" || ext == ".gguf") &&
        fs::equivalent(e.path(), output, ec))
      throw Error(ErrorKind::invalid_input, output_option,
                  "'" + output + "' is " + e.path().string() +
                      ", a file of the model being compiled; writing there would destroy it");
  }
}

void refuse_output_over_input(const std::string& output, const std::string& input,
                              const char* option, const std::string& output_option) {
  std::error_code ec;
  if (!input.empty() && std::filesystem::equivalent(output, input, ec))
    throw Error(ErrorKind::invalid_input, output_option,
                "'" + output + "' is the " + option + " file '" + input +
                    "' this command reads; writing there would destroy it");
}

bool parse_command_line(const std::vector<std::string>& args, const po::options_description& o,
                        const char* positional, po::variables_map& vm) {
  po::positional_options_description pos;
  pos.add(positional, 1);
  po::store(po::command_line_parser(args).options(o).positional(pos).style(kOptionStyle).run(), vm);
  if (vm.count("help")) {
    std::cout << o;
    return false;
  }
  po::notify(vm);
  return true;
}

bool parse_model_command(const std::vector<std::string>& args, po::options_description& o,
                         frontend::StageParams& params, po::variables_map* parsed) {
  o.add(stage_options(params));
  po::variables_map vm;
  if (!parse_command_line(args, o, "model", vm))
    return false;
  params.with_history = !vm.count("no-history");
  // The decode variants by the options' names, before the library's checks name its fields.
  if (!vm.count("decode-chunks") && params.seq_length > 0 &&
      (params.decode_chunk < 0 || params.decode_chunk > params.seq_length)) {
    check(!vm["decode-chunk"].defaulted(), ErrorKind::invalid_input, "--seq-length",
          params.seq_length, " is below the default --decode-chunk ", params.decode_chunk,
          " (the smallest decode variant); give --decode-chunk N with N in [0, ", params.seq_length,
          "] (0: only the seq_length variant) or --decode-chunks");
    throw_error(ErrorKind::invalid_input, "--decode-chunk",
                "must be in [0, --seq-length = ", params.seq_length, "], got ",
                params.decode_chunk);
  }
  if (parsed)
    *parsed = std::move(vm);
  return true;
}

void print_progress(const std::string& what, std::size_t done, std::size_t total) {
  static const bool tty = isatty(STDERR_FILENO) != 0;
  if (!tty)
    return;
  std::cerr << "\r[" << done << "/" << total << "] " << what << "\033[K" << std::flush;
  if (done == total)
    std::cerr << "\n";
}

std::int64_t proc_status_bytes(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0)
      return std::stoll(line.substr(key.size() + 1)) * 1024;
  return 0;
}

} // namespace tpullm::cli
