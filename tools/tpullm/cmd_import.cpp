// tpullm import MODEL_DIR --emit top -o DIR: write every stage module as .tir.
// DIR is built in a staging directory beside it and swapped in only when every module has been
// written (support/output_file.hpp): a failure leaves an earlier DIR as it was, a success leaves
// no stale modules of an earlier run, and nothing is written through links planted in DIR.
#include <iostream>

#include "command.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/ir/ir.hpp"
#include "tpullm/support/output_file.hpp"

namespace tpullm::cli {

/// The marker file of a directory written by `tpullm import`.
constexpr const char* kImportMarker = ".tpullm-import";

int cmd_import(const std::vector<std::string>& args) {
  std::string model, emit = "top", out_dir;
  bool no_mmap = false;
  frontend::StageParams params;
  po::options_description o("tpullm import MODEL_DIR --emit top -o DIR");
  o.add_options()("help,h", "show this help")("model", po::value(&model)->required(),
                                              "checkpoint directory (config.json + safetensors)")(
      "emit", po::value(&emit)->default_value("top"), "IR level to write: top")(
      "output,o", po::value(&out_dir)->required(),
      "directory to write <module>.tir files into; an existing one is replaced as a whole, "
      "but only if it is empty or an earlier import output");
  o.add(input_options(no_mmap));
  if (!parse_model_command(args, o, params))
    return kOk;
  if (emit != "top")
    throw Error(ErrorKind::unsupported, "--emit",
                "only 'top' can be emitted so far (got '" + emit + "')");
  refuse_output_over_model(out_dir, model);
  frontend::LoadOptions load;
  load.access = no_mmap ? FileAccess::read : FileAccess::map;
  const auto desc = frontend::load_model(model, load);
  params.validate(desc.dims.max_position);
  frontend::check_memory(
      frontend::estimate_memory(desc, params, frontend::Workload::build, load.access), params,
      desc);
  OutputDirectory dir(out_dir, kImportMarker); // refuses a bad target before the work
  auto modules = frontend::build_top_modules(desc, params);
  std::size_t i = 0;
  for (const auto& m : modules) {
    ir::verify_or_throw(m);
    OutputFile f = dir.file(m.name() + ".tir");
    f.write(ir::text::print_module(m));
    f.commit();
    print_progress((dir.target() / (m.name() + ".tir")).string(), ++i, modules.size());
  }
  // The report is written (and checked) before the directory is swapped in: a failing standard
  // output leaves the previous output in place.
  std::cout << "wrote " << modules.size() << " Top modules to " << out_dir << "\n";
  flush_stdout();
  dir.commit();
  return kOk;
}

} // namespace tpullm::cli
