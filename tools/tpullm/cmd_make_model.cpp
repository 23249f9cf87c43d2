// tpullm make-model --preset NAME --dtype f32|bf16 --seed S [--layers N] [--vocab V] -o DIR:
// a HuggingFace checkpoint with random weights at a real model's shapes. DIR is built in a
// staging directory beside it and swapped in only once written and loadable
// (support/output_file.hpp); --force replaces an earlier make-model output, never another
// directory.
#include <filesystem>
#include <iostream>

#include "command.hpp"
#include "tpullm/frontend/make_model.hpp"
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
  std::uint64_t seed = 0;
  std::int64_t layers = 0, vocab = 0;
  po::options_description o(
      "tpullm make-model --preset NAME --dtype f32|bf16 --seed S [--layers N] [--vocab V] -o DIR");
  o.add_options()("help,h", "show this help")("preset", po::value(&preset_name)->required(),
                                              "architecture: qwen2.5-0.5b, llama3.2-1b or tiny")(
      "dtype", po::value(&dtype)->default_value("bf16"), "weight storage: f32, bf16 or f16")(
      "seed", po::value(&seed)->default_value(0), "random seed (same seed, same bytes)")(
      "layers", po::value(&layers), "override the number of decoder layers")(
      "vocab", po::value(&vocab), "override the vocabulary size")(
      "output,o", po::value(&out_dir)->required(), "checkpoint directory to create")(
      "force", "replace DIR when it is an earlier make-model output (never another directory)");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(o).style(kOptionStyle).run(), vm);
  if (vm.count("help")) {
    std::cout << o;
    return kOk;
  }
  po::notify(vm);

  frontend::ModelPreset preset = frontend::find_preset(preset_name);
  if (vm.count("layers")) {
    check(layers > 0, ErrorKind::invalid_input, "--layers", "must be > 0, got ", layers);
    preset.layers = layers;
  }
  if (vm.count("vocab")) {
    check(vocab > 0, ErrorKind::invalid_input, "--vocab", "must be > 0, got ", vocab);
    preset.vocab = vocab;
  }
  frontend::RandomWeights weights;
  weights.seed = seed;
  weights.dtype = parse_weight_dtype(dtype);
  preset.validate();

  const fs::path target = fs::absolute(out_dir).lexically_normal();
  check(target.has_filename(), ErrorKind::invalid_input, out_dir, "is not a directory name");
  // A non-empty directory is replaced only with --force, and then only when it holds the marker
  // of an earlier make-model output (OutputDirectory refuses anything else, and symbolic links).
  if (fs::is_directory(fs::symlink_status(target)) && !empty_dir(target) && !vm.count("force"))
    throw_error(ErrorKind::invalid_input, target.string(),
                "exists and is not empty (use --force to replace an earlier make-model output)");
  OutputDirectory dir(target, kMakeModelMarker); // refuses a bad target before the work
  const auto report = frontend::write_random_model(
      preset, weights, dir.staging_path(), [&](std::size_t d, std::size_t n) {
        print_progress("writing " + (target / "model.safetensors").string(), d, n);
      });
  frontend::load_model(dir.staging_path()); // the frontend's own validation of what was written
  dir.commit();
  std::cout << "wrote " << preset.name << " (layers " << preset.layers << ", vocab " << preset.vocab
            << ", " << dtype << ", seed " << seed << "): " << report.parameters << " parameters, "
            << report.file_bytes << " bytes in " << target.string() << "\n";
  return kOk;
}

} // namespace tpullm::cli
