// tpullm verify MODEL_DIR --level top: the golden scenarios through interpreted Top modules.
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "command.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/interpreter_executor.hpp"
#include "tpullm/verify/golden_check.hpp"

namespace tpullm::cli {

namespace fs = std::filesystem;

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

} // namespace tpullm::cli
