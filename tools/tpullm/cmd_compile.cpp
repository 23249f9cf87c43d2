// tpullm compile MODEL_DIR -o FILE.bundle: checkpoint -> one deployable bundle.
#include <iostream>

#include "command.hpp"
#include "compile_bundle.hpp"
#include "quant_options.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/support/output_file.hpp"

namespace tpullm::cli {

/// The compiler options every command that compiles shares (mode, target, fusions, tiles).
po::options_description compile_options(compiler::CompileOptions& c, std::string& target_file) {
  po::options_description o("compilation");
  o.add_options()("mode", po::value(&c.lower.mode)->default_value("f32"),
                  "weights of the linear and MLP layers: f32, bf16, f16, w8a16 / w4a16 "
                  "(int8 / int4 codes rounded to nearest at compile time, f32 activations; "
                  "GPTQ / AWQ checkpoints keep their integer weights in every mode), or int8 "
                  "(W8A8: int8 weights per output channel and int8 activations, see --act-quant)")(
      "embedding-dtype", po::value(&c.lower.embedding),
      "dtype of the embedding table: f32, bf16, f16, w8 or w4 (default: the mode's; bf16 for "
      "w8a16 / w4a16; a tied embedding with the lm_head's dtype is stored once)")(
      "lm-head-dtype", po::value(&c.lower.lm_head),
      "dtype of the lm_head weight: f32, bf16, f16, w8 or w4 (default: the mode's; "
      "bf16 for w8a16 / w4a16)")(
      "kv-dtype", po::value(&c.lower.kv_dtype),
      "element type of the KV cache: f32, f16, bf16 or int8 (a byte per value and a scale per "
      "position and head; lossy, docs/guarantees.md) (default: f32 for --mode f32, f16 for "
      "every other mode)")(
      "target", po::value(&target_file),
      "target JSON file: cores, local_memory, alignment (default: this machine)")(
      "fusions", po::value(&c.fusions)->default_value(c.fusions),
      "fusion passes after lowering, e.g. fuse-add-rmsnorm,fuse-qkv,fuse-lm-head-argmax "
      "(empty: none)")("tile-rows", po::value(&c.tile_rows)->default_value(0),
                       "force layer-group tiles of this many rows (0: the cost model decides)")(
      "no-layer-groups", po::bool_switch()->notifier([&c](bool v) { c.layer_groups = !v; }),
      "no layer groups (core splits only)")("threads", po::value(&c.threads)->default_value(0),
                                            "modules compiled at once (0: the target's cores)");
  return o;
}

int cmd_compile(const std::vector<std::string>& args) {
  std::string model, out, target_file;
  bool no_mmap = false;
  frontend::StageParams params;
  compiler::CompileOptions copts;
  po::options_description o("tpullm compile MODEL_DIR -o FILE.bundle [options]");
  o.add_options()("help,h", "show this help")("model", po::value(&model)->required(),
                                              "checkpoint directory (config.json + safetensors)")(
      "output,o", po::value(&out)->required(),
      "bundle file to write (written to a temporary file, renamed when complete)");
  std::string keep_float;
  DraftSpec draft;
  o.add_options()("draft-mode", po::value(&draft.mode),
                  "also compile a draft model for self-speculation (`run --draft self`): this "
                  "checkpoint in bf16, f16, w8a16 or w4a16, stored "
                  "inside the bundle")(
      "draft-layers", po::value(&draft.layers)->default_value(0),
      "the draft keeps only the first N layers (layer skip; 0: all)")(
      "draft-lm-head-dtype", po::value(&draft.lm_head),
      "the draft's embedding and lm_head: bf16, f16, w8 or w4 (default: bf16 for w8a16 / "
      "w4a16)")("draft-act-quant", po::value(&draft.act_quant),
                "the draft's integer linears: dynamic (the default: input rounded to int8 per "
                "weight group; the draft decides the speed, never the answer) or none (exact)");
  std::int64_t tensor_parallel = 1;
  o.add_options()("tensor-parallel", po::value(&tensor_parallel),
                  "split attention heads and MLP columns over N MPI ranks; run with mpirun -np N "
                  "tpullm run|chat|serve|bench FILE --parallel tensor (N in [2, 64]: it must "
                  "divide the heads and the intermediate size, and the key/value heads or be a "
                  "multiple of them; a float checkpoint, or a GGUF file whose blocks the split "
                  "does not cut; no --keep-float, static int8 or --draft-mode)");
  o.add(compile_options(copts, target_file));
  o.add(quantization_options(copts.lower, keep_float));
  o.add(input_options(no_mmap));
  po::variables_map vm;
  if (!parse_model_command(args, o, params, &vm))
    return kOk;
  const bool split = vm.count("tensor-parallel") > 0;
  if (split) // the options alone, before the model is read
    check_tensor_parallel_options(tensor_parallel, copts.lower, keep_float, draft);
  check(out != "-", ErrorKind::invalid_input, "--output",
        "a bundle cannot be written to standard output (it is mapped when it runs); give a file "
        "name");
  detail::check_output_name(out);
  check(copts.tile_rows >= 0, ErrorKind::invalid_input, "--tile-rows", "must be >= 0, got ",
        copts.tile_rows);
  check(copts.threads >= 0 && copts.threads <= 4096, ErrorKind::invalid_input, "--threads",
        "must be in [0, 4096] (0: the target's cores), got ", copts.threads);
  if (!target_file.empty())
    copts.target = target::load_target(target_file);
  const FileAccess access = no_mmap ? FileAccess::read : FileAccess::map;
  const auto desc = load_checkpoint(model, access);
  default_act_quant(desc, copts.lower);
  // The report goes out (and is checked) before the bundle replaces -o: a failing standard
  // output leaves the previous bundle in place.
  compile_checkpoint(
      desc, params, copts, keep_float, access, out, true,
      [&](const CompileReport& r) {
        std::cout << describe(r) << "wrote " << out << "\n";
        flush_stdout();
      },
      draft, split ? tensor_parallel : 1);
  return kOk;
}

} // namespace tpullm::cli
