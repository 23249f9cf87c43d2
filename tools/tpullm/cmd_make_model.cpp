// tpullm make-model --preset NAME --dtype f32|bf16 --seed S [--layers N] [--vocab V]
//                   [--quantize gptq|awq [--bits 4|8] [--group-size G] [--act-order]]
//                   [--qat-grid int4|int8 [--group-size G]] -o DIR:
// a HuggingFace checkpoint with random weights at a real model's shapes (with --quantize, the
// decoder linears in that method's packed layout; with --qat-grid, float weights on an integer
// grid, as a quantization-aware-trained checkpoint's). DIR is built in a
// staging directory beside it and swapped in only once written and loadable
// (support/output_file.hpp); --force replaces an earlier make-model output, never another
// directory.
#include <filesystem>

#include <sys/statvfs.h>
#include <iostream>

#include "command.hpp"
#include "tpullm/devtools/make_model.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/support/output_file.hpp"

namespace tpullm::cli {

namespace fs = std::filesystem;

namespace {

frontend::DType parse_weight_dtype(const std::string& s) {
  if (s == "f32")
    return frontend::DType::f32;
  if (s == "bf16")
    return frontend::DType::bf16;
  if (s == "f16")
    return frontend::DType::f16;
  throw Error(ErrorKind::invalid_input, "--dtype", "'" + s + "' is not f32, bf16 or f16");
}

/// True when `p` is a directory (not a link to one) with nothing in it.
bool empty_dir(const fs::path& p) {
  return fs::is_directory(fs::symlink_status(p)) && fs::is_empty(p);
}

} // namespace

/// The marker file of a directory written by `tpullm make-model`.
constexpr const char* kMakeModelMarker = ".tpullm-make-model";

int cmd_make_model(const std::vector<std::string>& args) {
  std::string preset_name, dtype = "bf16", out_dir;
  std::string seed_text = "0";
  std::int64_t layers = 0, vocab = 0;
  frontend::RandomQuant quant;
  std::string grid_name;
  po::options_description o(
      "tpullm make-model --preset NAME --dtype f32|bf16 --seed S [--layers N] [--vocab V] -o DIR");
  o.add_options()("help,h", "show this help")("preset", po::value(&preset_name)->required(),
                                              "architecture: qwen2.5-0.5b, llama3.2-1b or tiny")(
      "dtype", po::value(&dtype)->default_value("bf16"),
      "weight storage: f32, bf16 or f16")("seed", po::value(&seed_text)->default_value("0"),
                                          "random seed in [0, 2^64) (same seed, same bytes)")(
      "layers", po::value(&layers), "override the number of decoder layers (at most 1024)")(
      "vocab", po::value(&vocab), "override the vocabulary size (at most 2^22)")(
      "output,o", po::value(&out_dir)->required(), "checkpoint directory to create")(
      "quantize", po::value(&quant.method),
      "write the decoder linears as a gptq or awq checkpoint (random integers, real layout)")(
      "bits", po::value(&quant.bits)->default_value(4), "--quantize: 4 or 8 (awq: 4)")(
      "group-size", po::value(&quant.group_size)->default_value(128),
      "--quantize / --qat-grid: rows of K per scale group, or -1 for one group (--quantize)")(
      "act-order", "--quantize gptq: desc_act with a permuting g_idx")(
      "qat-grid", po::value(&grid_name),
      "int4 or int8: round the float linears, embedding and lm_head to the symmetric grid of "
      "--group-size (32, 64 or 128) input values per scale, as a quantization-aware-trained "
      "checkpoint is (compile --symmetric --group-size G then finds the same codes)")(
      "force", "replace DIR when it is an earlier make-model output holding only make-model's own "
               "files (never another directory, nor one a user has put files in)");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(o).style(kOptionStyle).run(), vm);
  if (vm.count("help")) {
    std::cout << o;
    return kOk;
  }
  po::notify(vm);

  frontend::ModelPreset preset = frontend::find_preset(preset_name);
  if (vm.count("layers")) {
    check(layers > 0 && layers <= frontend::kMaxPresetLayers, ErrorKind::invalid_input, "--layers",
          "must be in [1, ", frontend::kMaxPresetLayers, "], got ", layers);
    preset.layers = layers;
  }
  if (vm.count("vocab")) {
    check(vocab > 0 && vocab <= frontend::kMaxPresetVocab, ErrorKind::invalid_input, "--vocab",
          "must be in [1, 2^22 = ", frontend::kMaxPresetVocab, "], got ", vocab);
    preset.vocab = vocab;
  }
  const auto seeds = parse_id_list<std::uint64_t>(seed_text, "--seed");
  check(seeds.size() == 1, ErrorKind::invalid_input, "--seed", "expects one integer in [0, 2^64)");
  frontend::RandomWeights weights;
  weights.seed = seeds[0];
  weights.dtype = parse_weight_dtype(dtype);
  quant.act_order = vm.count("act-order") > 0;
  check(!quant.method.empty() || (vm["bits"].defaulted() && !quant.act_order),
        ErrorKind::invalid_input, "--bits/--act-order", "need --quantize gptq|awq");
  const bool grid = vm.count("qat-grid") > 0;
  check(!quant.method.empty() || grid || vm["group-size"].defaulted(), ErrorKind::invalid_input,
        "--group-size", "needs --quantize gptq|awq or --qat-grid");
  quant.validate();
  weights.quant = quant;
  if (grid) {
    check(grid_name == "int4" || grid_name == "int8", ErrorKind::invalid_input, "--qat-grid", "'",
          grid_name, "' is not int4 or int8");
    weights.grid = {grid_name == "int4" ? 4 : 8, quant.group_size};
  }
  preset.validate();
  // The size is known before anything is written: capped, and checked against the free space of
  // the file system the output goes to (the staging directory is beside the target).
  const std::uint64_t bytes = frontend::estimate_model_bytes(preset, weights.dtype);
  const char* size_option = vm.count("layers")  ? "--layers"
                            : vm.count("vocab") ? "--vocab"
                                                : "--preset";
  auto gib = [](std::uint64_t b) {
    return std::to_string(b / (std::uint64_t{1} << 30)) + "." +
           std::to_string(b % (std::uint64_t{1} << 30) * 10 >> 30) + " GiB";
  };
  check(bytes <= frontend::kMaxRandomModelBytes, ErrorKind::invalid_input, size_option,
        "the checkpoint would be ", gib(bytes), ", more than make-model's cap of ",
        gib(frontend::kMaxRandomModelBytes));

  const fs::path target = fs::absolute(out_dir).lexically_normal();
  check(target.has_filename(), ErrorKind::invalid_input, out_dir, "is not a directory name");
  // A non-empty directory is replaced only with --force, and then only when it holds the marker
  // of an earlier make-model output (OutputDirectory refuses anything else, and symbolic links).
  if (fs::is_directory(fs::symlink_status(target)) && !empty_dir(target) && !vm.count("force"))
    throw_error(ErrorKind::invalid_input, target.string(),
                "exists and is not empty (use --force to replace an earlier make-model output)");
  // --force replaces an earlier output only while it holds nothing but what make-model writes:
  // a file a user has added since would be deleted with it.
  if (fs::is_directory(fs::symlink_status(target)) &&
      fs::is_regular_file(fs::symlink_status(target / kMakeModelMarker)))
    for (const auto& e : fs::directory_iterator(target)) {
      const std::string name = e.path().filename().string();
      check(name == "config.json" || name == "model.safetensors" || name == kMakeModelMarker,
            ErrorKind::invalid_input, target.string(), "holds '", name,
            "', which make-model did not write; refusing to replace it (move the file, or choose "
            "another directory)");
    }
  OutputDirectory dir(target, kMakeModelMarker); // refuses a bad target before the work
  struct statvfs fsinfo {};
  if (::statvfs(dir.staging_path().c_str(), &fsinfo) == 0) {
    const std::uint64_t avail = static_cast<std::uint64_t>(fsinfo.f_bavail) * fsinfo.f_frsize;
    check(bytes + (std::uint64_t{1} << 20) <= avail, ErrorKind::invalid_input, size_option,
          "the checkpoint needs about ", gib(bytes), " of disk, the file system of ",
          target.parent_path().string(), " has ", gib(avail), " free");
  }
  const auto report = frontend::write_random_model(
      preset, weights, dir.staging_path(), [&](std::size_t d, std::size_t n) {
        print_progress("writing " + (target / "model.safetensors").string(), d, n);
      });
  frontend::load_model(dir.staging_path()); // the frontend's own validation of what was written
  // The report is written (and checked) before the directory is swapped in: a failing standard
  // output leaves the previous output in place.
  std::cout << "wrote " << preset.name << " (layers " << preset.layers << ", vocab " << preset.vocab
            << ", " << dtype
            << (quant.method.empty()
                    ? std::string()
                    : ", " + quant.method + " " + std::to_string(quant.bits) + "-bit group " +
                          std::to_string(quant.group_size) + (quant.act_order ? " act-order" : ""))
            << (!grid ? std::string()
                      : ", on the " + grid_name + " grid of groups of " +
                            std::to_string(quant.group_size))
            << ", seed " << weights.seed << "): " << report.parameters << " parameters, "
            << report.file_bytes << " bytes in " << target.string() << "\n";
  flush_stdout();
  dir.commit();
  return kOk;
}

} // namespace tpullm::cli
