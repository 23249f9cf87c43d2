// tpullm calibrate MODEL_DIR -o calib.json [--samples FILE] [--method max|percentile|kl]: the
// calibration table of --mode int8 --act-quant static (calibration/calibrate.hpp).
#include <charconv>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "command.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/calibration/calibrate.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/output_file.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::cli {

namespace fs = std::filesystem;

namespace {

/// `line` as space-separated token ids, or nullopt when some word is not a non-negative integer.
std::optional<std::vector<std::int32_t>> id_line(std::string_view line) {
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
      ++i;
    if (i == line.size())
      break;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r')
      ++j;
    std::int32_t v = 0;
    const auto r = std::from_chars(line.data() + i, line.data() + j, v);
    if (r.ec != std::errc() || r.ptr != line.data() + j || v < 0)
      return std::nullopt;
    ids.push_back(v);
    i = j;
  }
  return ids;
}

/// The prompts of --samples: every non-empty line; all of them token ids, or else text
/// tokenized by the model's tokenizer.json (refused without one). Cut to `max_len` tokens.
std::vector<std::vector<std::int32_t>> read_samples(const std::string& file, const fs::path& model,
                                                    std::int64_t max_len) {
  const std::string text = read_regular_file(file, std::size_t{64} << 20);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.find_first_not_of(" \t\r") != std::string::npos)
      lines.push_back(l);
  check(!lines.empty(), ErrorKind::invalid_input, file, "holds no prompt (one per line)");
  std::vector<std::vector<std::int32_t>> out;
  bool ids = true;
  for (const auto& l : lines) {
    auto v = id_line(l);
    if (!v) {
      ids = false;
      break;
    }
    out.push_back(std::move(*v));
  }
  if (!ids) {
    out.clear();
    std::error_code ec;
    check(fs::exists(model / "tokenizer.json", ec), ErrorKind::invalid_input, file,
          "holds text but ", model.string(),
          " has no tokenizer.json: give token ids (space-separated, one prompt per line)");
    const auto tok = text::Tokenizer::from_dir(model);
    for (const auto& l : lines)
      out.push_back(tok.encode(l));
  }
  for (auto& s : out)
    if (static_cast<std::int64_t>(s.size()) > max_len)
      s.resize(static_cast<std::size_t>(max_len));
  return out;
}

} // namespace

int cmd_calibrate(const std::vector<std::string>& args) {
  std::string model, out, samples_file;
  bool no_mmap = false;
  std::int64_t budget_mib = 0;
  calibration::CalibrateOptions copt;
  frontend::StageParams params;
  po::options_description o("tpullm calibrate MODEL_DIR -o calib.json [options]");
  o.add_options()("help,h", "show this help")("model", po::value(&model)->required(),
                                              "checkpoint directory (a float, dense model)")(
      "output,o", po::value(&out)->required(),
      "calibration table to write (JSON; written to a temporary file, renamed when complete)")(
      "samples", po::value(&samples_file),
      "prompts, one per line: token ids (space-separated) or text (needs the model's "
      "tokenizer.json); each cut to --seq-length tokens (default: 4 fixed pseudo-random "
      "prompts of 64 ids)")("method", po::value(&copt.method)->default_value("max"),
                            "threshold of each input: max (absmax), percentile (99.99th "
                            "percentile of |x|) or kl (TensorRT's entropy calibration)")(
      "threads", po::value(&copt.threads)->default_value(1),
      "samples run at once (the weights are shared; the table is the same for any value)")(
      "memory-budget", po::value(&budget_mib),
      "MiB of widened (f64, 8 bytes per element) weights held at once; the least recently used "
      "are dropped and widened again when needed. At least --threads x one layer's weights "
      "(smaller is refused, naming the minimum); the table is the same for any value "
      "(default: 1024, raised to that minimum)");
  o.add(input_options(no_mmap));
  po::variables_map vm;
  if (!parse_model_command(args, o, params, &vm))
    return kOk;
  check(out != "-", ErrorKind::invalid_input, "--output",
        "the table is written to a file (atomically); give a file name");
  check(copt.method == "max" || copt.method == "percentile" || copt.method == "kl",
        ErrorKind::invalid_input, "--method", "must be max, percentile or kl, got '", copt.method,
        "'");
  check(copt.threads >= 1 && copt.threads <= 256, ErrorKind::invalid_input, "--threads",
        "must be in [1, 256], got ", copt.threads);
  check(vm.count("memory-budget") == 0 ||
            (budget_mib >= 1 && budget_mib <= (std::int64_t{1} << 30)),
        ErrorKind::invalid_input, "--memory-budget",
        "must be a whole number of MiB in [1, 2^30], got ", budget_mib);
  copt.memory_budget = static_cast<std::size_t>(budget_mib) << 20;
  detail::check_output_name(out);
  refuse_output_over_model_file(out, model);
  refuse_output_over_input(out, samples_file, "--samples");
  const auto t0 = std::chrono::steady_clock::now();
  frontend::LoadOptions load;
  load.access = no_mmap ? FileAccess::read : FileAccess::map;
  const auto desc = frontend::load_model(model, load);
  params.validate(desc.dims.max_position);
  // The weights are widened into a store of the budget, a layer at a time, not all at once.
  const double store = static_cast<double>(
      copt.memory_budget > 0 ? copt.memory_budget : calibration::kDefaultCalibBudget);
  const double limit = frontend::memory_limit_bytes();
  check(copt.memory_budget == 0 || store <= limit, ErrorKind::invalid_input, "--memory-budget",
        budget_mib, " MiB is more than the ", frontend::detail::human_bytes(limit),
        " of memory available");
  frontend::check_memory(
      frontend::estimate_calibrate_memory(desc, params, load.access, copt.threads, store), params,
      desc, limit);
  const auto samples = samples_file.empty()
                           ? calibration::builtin_calib_samples(
                                 desc.dims.vocab, std::min<std::int64_t>(64, params.seq_length))
                           : read_samples(samples_file, desc.dir, params.seq_length);
  OutputFile f(out); // a bad target is refused before the work
  copt.progress = [](std::size_t done, std::size_t total) {
    print_progress("calibrated sample", done, total);
  };
  calibration::CalibrateStats stats;
  copt.stats = &stats;
  const conversion::CalibTable t = calibration::calibrate(desc, params, samples, copt);
  f.stream() << conversion::format_calib_table(t);
  f.commit();
  std::cerr << "calibrated " << t.inputs.size() << " inputs of " << model << " on " << t.samples
            << " samples (" << t.tokens << " tokens, method " << t.method << ") in " << std::fixed
            << std::setprecision(2) << seconds_since(t0) << " s; widened weights peaked at "
            << static_cast<double>(stats.peak_bytes) / (1024.0 * 1024.0) << " of "
            << static_cast<double>(stats.budget_bytes) / (1024.0 * 1024.0) << " MiB ("
            << stats.materializations << " widenings)\n";
  std::cout << "wrote " << out << "\n";
  flush_stdout();
  return kOk;
}

} // namespace tpullm::cli
