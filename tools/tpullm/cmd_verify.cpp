// tpullm verify MODEL_DIR --level top|tpu: the golden scenarios through interpreted Top modules
// or through compiled Tpu programs on the executor.
#include <chrono>
#include <optional>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "command.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "compile_bundle.hpp"
#include "quant_options.hpp"
#include "tpullm/runtime/interpreted_stages.hpp"
#include "tpullm/support/output_file.hpp"
#include "tpullm/support/temp_file.hpp"
#include "tpullm/verify/golden_check.hpp"

namespace tpullm::cli {

namespace fs = std::filesystem;

namespace {

bool print_reports(const std::vector<verify::ScenarioReport>& reports) {
  bool ok = true;
  std::cout << "scenario  max|err|      err/max|golden|  argmax agree  result  mean KL\n";
  for (const auto& r : reports) {
    std::cout << std::left << std::setw(10) << r.name << std::setw(14) << std::scientific
              << std::setprecision(3) << r.max_abs_err << std::setw(17) << r.max_rel_err
              << std::setw(14) << (std::to_string(r.argmax_agree) + "/" + std::to_string(r.rows))
              << std::setw(8) << (r.ok ? "ok" : "FAILED") << r.mean_kl() << "\n";
    ok = ok && r.ok;
  }
  return ok;
}

/// The bounds_for_mode key of the lowering options: the mode, or for int8 its activation scheme
/// (int8, int8-static, int8-static-asym, int8-static-smooth).
std::string int8_bounds_key(const conversion::LowerOptions& l) {
  if (l.mode != "int8" || l.act_quant != "static")
    return l.mode;
  if (l.smooth_alpha > 0)
    return "int8-static-smooth";
  return l.act_asymmetric ? "int8-static-asym" : "int8-static";
}

} // namespace

int cmd_verify(const std::vector<std::string>& args) {
  std::string model, level = "top", goldens, target_file, bundle_path;
  std::optional<float> rel_tol_given, min_argmax_given;
  bool no_mmap = false;
  frontend::StageParams params;
  compiler::CompileOptions copts;
  po::options_description o("tpullm verify MODEL_DIR --level top|tpu|bundle [--goldens FILE]");
  o.add_options()("help,h", "show this help")("model", po::value(&model)->required(),
                                              "checkpoint directory")(
      "level", po::value(&level)->default_value("top"),
      "what to check: top (interpreted Top modules), tpu (compiled Tpu programs run by the "
      "executor in memory) or bundle (compiled into a bundle file, loaded and run by the "
      "runtime)")("bundle", po::value(&bundle_path),
                  "bundle level: keep the compiled bundle at this path (default: a temporary "
                  "file, removed)")("goldens", po::value(&goldens),
                                    "goldens.safetensors (default: MODEL_DIR/goldens.safetensors)")(
      "rel-tol", po::value<float>()->notifier([&](float v) { rel_tol_given = v; }),
      "bound: |ours - golden| <= rel-tol * max|golden| per logits tensor (default by mode: "
      "f32 1e-4, f16 1e-2, bf16 5e-2)")(
      "min-argmax", po::value<float>()->notifier([&](float v) { min_argmax_given = v; }),
      "fraction of rows per scenario whose argmax must agree with the golden one (default by "
      "mode: f32 0, f16 0.9, bf16 0.85)")(
      "mode", po::value(&copts.lower.mode)->default_value("f32"),
      "tpu level: weights of linear and MLP layers (f32, bf16, f16, w8a16, w4a16, int8)")(
      "lm-head-dtype", po::value(&copts.lower.lm_head),
      "tpu level: dtype of the lm_head weight (f32, bf16, f16, w8, w4; default: the mode's)")(
      "embedding-dtype", po::value(&copts.lower.embedding),
      "tpu level: dtype of the embedding table (f32, bf16, f16, w8, w4; default: the mode's)")(
      "kv-dtype", po::value(&copts.lower.kv_dtype),
      "tpu level: element type of the KV cache (f32, f16, bf16, int8; default: f32 for --mode "
      "f32, f16 otherwise)")("target", po::value(&target_file),
                             "tpu level: target JSON file (default: this machine)")(
      "fusions", po::value(&copts.fusions)->default_value(copts.fusions),
      "tpu level: fusion passes after lowering, a pipeline (e.g. fuse-add-rmsnorm,fuse-qkv,"
      "fuse-lm-head-argmax; empty: none)")(
      "tile-rows", po::value(&copts.tile_rows)->default_value(0),
      "tpu level: force layer-group tiles of this many rows (0: the cost model decides)")(
      "no-layer-groups", po::bool_switch()->notifier([&](bool v) { copts.layer_groups = !v; }),
      "tpu level: no layer groups (core splits only)");
  std::string keep_float;
  std::optional<double> max_kl_given;
  bool pooled = false;
  o.add_options()("max-kl", po::value<double>()->notifier([&](double v) { max_kl_given = v; }),
                  "bound: mean KL divergence (nats) of our distribution from the golden one, per "
                  "scenario (default by mode: w8a16 and w4a16 documented in docs/backend.md, "
                  "none for the float modes)")(
      "pooled", po::bool_switch(&pooled),
      "apply --min-argmax and --max-kl to the rows of all scenarios together (as llama.cpp's "
      "figures in models-gguf/README.md are given), not to each scenario; adds an 'all' row");
  o.add(quantization_options(copts.lower, keep_float));
  o.add(input_options(no_mmap));
  po::variables_map vm;
  if (!parse_model_command(args, o, params, &vm))
    return kOk;
  const verify::Bounds bounds =
      level == "top" ? verify::bounds_for_mode("f32")
                     : verify::bounds_for_options(int8_bounds_key(copts.lower), copts.lower.lm_head,
                                                  copts.lower.embedding, copts.lower.kv_dtype,
                                                  copts.lower.mode != "int8" &&
                                                      copts.lower.act_quant == "dynamic");
  const float rel_tol = rel_tol_given.value_or(bounds.rel_tol);
  const float min_argmax = min_argmax_given.value_or(bounds.min_argmax);
  const double max_kl = max_kl_given.value_or(bounds.max_mean_kl);
  check(max_kl >= 0 && std::isfinite(max_kl), ErrorKind::invalid_input, "--max-kl",
        "must be finite and >= 0 (0: no bound), got ", max_kl);
  frontend::check_rel_tol(rel_tol);
  check(min_argmax >= 0 && min_argmax <= 1, ErrorKind::invalid_input, "--min-argmax",
        "must be in [0, 1], got ", min_argmax);
  if (level == "bundle" && vm["max-input-length"].defaulted() && vm["decode-chunk"].defaulted() &&
      !vm.count("decode-chunks")) {
    // Small segments (scenario c's 300 tokens go through 1 prefill + 4 prefill_kv) and decode
    // variants that a, b and c switch between (a decodes at 37.., b at 72.., c at 300..).
    params.max_input_length = 64;
    params.decode_chunks = {256, 128, 64};
  }
  check(level == "top" || level == "tpu" || level == "bundle", ErrorKind::invalid_input, "--level",
        "must be 'top', 'tpu' or 'bundle' (got '", level, "')");
  if (level == "top")
    for (const char* only :
         {"mode", "target", "fusions", "tile-rows", "no-layer-groups", "bundle", "lm-head-dtype",
          "embedding-dtype", "kv-dtype", "group-size", "symmetric", "keep-float", "act-quant",
          "act-asymmetric", "calib", "smooth-alpha"})
      check(vm[only].empty() || vm[only].defaulted(), ErrorKind::invalid_input,
            std::string("--") + only,
            "is used only by the compiled levels (--level tpu or bundle), not by --level top");
  check(level == "bundle" || !vm.count("bundle"), ErrorKind::invalid_input, "--bundle",
        "is used only by --level bundle");
  check(copts.tile_rows >= 0, ErrorKind::invalid_input, "--tile-rows", "must be >= 0, got ",
        copts.tile_rows);
  if (!target_file.empty())
    copts.target = target::load_target(target_file); // a bad target file fails before the work
  // The default bundle file is created exclusively at an unpredictable path in TMPDIR (checked
  // now, before the work) and removed afterwards, also when a signal ends the run; no file this
  // run did not create is touched.
  std::optional<TemporaryFile> temp;
  if (level == "bundle" && bundle_path.empty())
    temp.emplace(temp_directory(), "tpullm-verify-", ".bundle");
  const auto t0 = std::chrono::steady_clock::now();
  frontend::LoadOptions load;
  load.access = no_mmap ? FileAccess::read : FileAccess::map;
  const auto desc = frontend::load_model(model, load);
  params.validate(desc.dims.max_position);
  if (level != "top") {
    copts.lower.keep_float = keep_float; // checked as given, then mapped to the Top names
    check_runnable(desc, params, copts); // what compile would refuse, verify refuses too
    plan_quantization(desc, copts.lower, keep_float);
  }
  frontend::check_memory(frontend::estimate_memory(desc, params,
                                                   level == "top" ? frontend::Workload::interpret
                                                                  : frontend::Workload::run,
                                                   load.access),
                         params, desc);
  const auto g =
      frontend::load_goldens(goldens.empty() ? fs::path(model) : fs::path(goldens), load.access);
  check(g.vocab == desc.dims.vocab, ErrorKind::invalid_input, goldens.empty() ? model : goldens,
        "goldens have vocabulary ", g.vocab, " but the model has ", desc.dims.vocab);
  const runtime::SessionDims dims{desc.dims.layers, desc.dims.hidden, desc.dims.kv_heads,
                                  desc.dims.head_dim, desc.dims.vocab};
  std::vector<verify::ScenarioReport> reports;
  const float scen_argmax = pooled ? 0.0f : min_argmax; // --pooled: judged on all rows below
  const double scen_kl = pooled ? 0.0 : max_kl;
  if (level == "top") {
    runtime::InterpretedStages exec(frontend::build_top_modules(desc, params));
    runtime::Session session(exec, dims, params);
    reports = verify::check_goldens(session, g, rel_tol, scen_argmax, scen_kl);
  } else if (level == "bundle") {
    // Through a real file: compiled, written, mapped, validated, run by the runtime's
    // BundleSession. The default file is created exclusively at an unpredictable path in TMPDIR and
    // removed afterwards (also when a signal ends the run); no file this run did not create is
    // touched.
    const fs::path file = temp ? temp->path() : fs::path(bundle_path);
    const auto r = compile_bundle(desc, params, copts, file, true, {}, "--bundle");
    std::cerr << describe(r);
    runtime::BundleSession engine(bundle::Bundle::open(file, load.access));
    const auto wc = engine.bundle().verify_weights(0); // what was written is what is read
    std::cerr << "weights: " << wc.chunks << " CRC-32C chunks verified\n";
    reports = verify::check_goldens(engine.session(), g, rel_tol, scen_argmax, scen_kl);
  } else {
    const auto cm = compiler::compile(frontend::build_top_modules(desc, params), copts);
    std::cerr << "compiled " << cm.programs.size() << " functions in " << std::fixed
              << std::setprecision(2) << cm.seconds << " s (mode " << copts.lower.mode
              << "): weights " << cm.weight_bytes << " B, arena " << cm.max_arena
              << " B (lower bound " << cm.arena_lower_bound << " B), KV cache " << cm.kv.bytes()
              << " B\n";
    // Refused as compile refuses them (the same loader rule, the same first run), so that the
    // tpu and bundle levels agree on every option set.
    const std::string refusal = "the compiled programs would not run";
    std::unique_ptr<runtime::Executor> exec;
    try {
      exec = runtime::make_executor(cm);
    } catch (const OutputError&) {
      throw;
    } catch (const Error& e) {
      throw Error(ErrorKind::invalid_input, refusal, e.message());
    }
    runtime::CompiledStages stages(*exec);
    runtime::Session session(stages, dims, params);
    check_session_runs(session, params.with_history, refusal);
    reports = verify::check_goldens(session, g, rel_tol, scen_argmax, scen_kl);
  }
  // After the work, so that a refusal is the only line on stderr.
  std::cerr << "verified " << model << " at level " << level << " (seq_length " << params.seq_length
            << ", max_input_length " << params.max_input_length << ")\n";
  if (pooled) // one more row: every scenario's rows together
    reports.push_back(verify::pooled_report(reports, min_argmax, max_kl));
  const bool ok = print_reports(reports);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << std::defaultfloat << (ok ? "all scenarios within " : "bound exceeded: ") << rel_tol
            << " * max|golden|";
  if (min_argmax > 0)
    std::cout << " with argmax agreement >= " << min_argmax;
  if (max_kl > 0)
    std::cout << " and mean KL <= " << max_kl;
  if (pooled && (min_argmax > 0 || max_kl > 0))
    std::cout << " over all rows";
  std::cout << " (" << std::setprecision(3) << secs << " s)\n";
  return ok ? kOk : kCheckFailed;
}

} // namespace tpullm::cli
