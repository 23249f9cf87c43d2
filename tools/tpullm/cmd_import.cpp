// tpullm import MODEL_DIR --emit top -o DIR: write every stage module as .tir.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "command.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/ir/ir.hpp"

namespace tpullm::cli {

namespace fs = std::filesystem;

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

} // namespace tpullm::cli
