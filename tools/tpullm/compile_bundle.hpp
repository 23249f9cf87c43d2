#pragma once
// Checkpoint -> bundle file, shared by `tpullm compile` and `tpullm verify --level bundle`.
#include <filesystem>
#include <functional>
#include <string>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/runtime/session.hpp"

namespace tpullm::cli {

/// What a compile produced.
struct CompileReport {
  double compile_seconds = 0;         ///< front end + compiler
  double write_seconds = 0;           ///< writing the bundle
  std::size_t functions = 0;          ///< stage functions
  std::int64_t max_arena = 0;         ///< largest activation arena of a function
  std::int64_t arena_lower_bound = 0; ///< its max-live lower bound
  std::int64_t max_local = 0;         ///< largest per-core local memory of a layer group
  std::int64_t kv_bytes = 0;          ///< KV cache
  std::int64_t draft_bytes = 0;       ///< the embedded draft model (0: none)
  bundle::WriteStats written;         ///< file figures
};

/// A draft model compiled into the bundle for self-speculation (`compile --draft-mode`): the same
/// checkpoint in a cheaper weight mode, optionally only its first layers (layer skip), stored
/// whole inside the bundle (bundle::Bundle::draft()) and run by `--draft self`.
struct DraftSpec {
  std::string mode;        ///< its weight mode (empty: no draft): bf16, f16, w8a16 or w4a16
  std::int64_t layers = 0; ///< its first this many layers (0: all of them)
  /// Its embedding and lm_head dtype (bf16, f16, w8 or w4; empty: the mode's default, bf16 for
  /// w8a16 / w4a16): in a small model with a large vocabulary the lm_head is most of a step.
  std::string lm_head;
  /// How its integer linears take their input: dynamic (rounded to int8 per weight group, the
  /// VNNI kernels' one-digit path: a draft's arithmetic decides the speed, never the answer; also
  /// when empty) or none (exact f32 activations).
  std::string act_quant;
  /// Throws Error(invalid_input) naming --draft-mode / --draft-layers / --draft-lm-head-dtype /
  /// --draft-act-quant for a mode or dtype outside the lists, a layer count outside [0, the
  /// model's], and for any of them without --draft-mode.
  void validate(const frontend::ModelDesc& desc) const;
  /// Whether any of its weights are integer codes (mode w8a16 / w4a16, or lm_head w8 / w4), which
  /// --group-size and --symmetric then shape.
  bool integer() const {
    return mode == "w8a16" || mode == "w4a16" || lm_head == "w8" || lm_head == "w4";
  }
};

/// Refuses (Error(invalid_input) naming the option, one line) what `compile --tensor-parallel
/// N` cannot combine with, before any work: N outside [2, 64], --keep-float, static int8
/// (--calib, --act-quant static, --smooth-alpha: calibrated per weight under the ordinary Top
/// names) and --draft-mode (the self-speculation draft's functions are whole blocks).
void check_tensor_parallel_options(std::int64_t ranks, const conversion::LowerOptions& lower,
                                   const std::string& keep_float, const DraftSpec& draft);

/// Compiles the loaded checkpoint `desc` (params validated and its memory checked by the caller)
/// with `params` and `options` into bundle `out`, written to a temporary file in out's directory
/// and renamed over `out` only when complete (a failure leaves no partial file and an existing
/// `out` untouched; `out` may not be a file of the model directory). Progress on stderr when
/// `progress`. `before_commit`, when given, runs once the bundle is completely written and
/// before it replaces `out` (a command prints its report there, so that a failing standard
/// output leaves the old `out` in place). Refuses up front (Error(invalid_input)) option
/// combinations whose bundle the runtime could not run (check_runnable). `output_option` is
/// the option that named `out` (compile's `-o`, verify's `--bundle`), named in refusals of it.
/// `tensor_parallel` N > 1 compiles the model split over N ranks
/// (frontend::build_tensor_parallel_modules, ModelInfo::tensor_parallel = N); such a bundle
/// runs only under mpirun, so the run check of an ordinary bundle is skipped.
CompileReport compile_bundle(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                             compiler::CompileOptions options, const std::filesystem::path& out,
                             bool progress,
                             const std::function<void(const CompileReport&)>& before_commit = {},
                             const std::string& output_option = "-o", const DraftSpec& draft = {},
                             std::int64_t tensor_parallel = 1);

/// Loads the model `tpullm compile` compiles from `model`: a checkpoint folder (config.json +
/// safetensors), a GGUF file, or a folder holding one .gguf file (frontend::load_model).
frontend::ModelDesc load_checkpoint(const std::string& model, FileAccess access);

/// The act-quant default of compile and of a source run / chat / serve / bench compile, spelt
/// out (one spelling per setting, as the bundle cache key holds it): when none was given,
/// dynamic for a GGUF file (its reference engine, llama.cpp, rounds the activations to 8 bits
/// too: docs/kernels.md has the bounds) and for mode int8, none otherwise.
void default_act_quant(const frontend::ModelDesc& desc, conversion::LowerOptions& lower);

/// What `tpullm compile` does once its options are parsed, shared by every command that compiles
/// a checkpoint into a bundle file: validates `params` against `desc`, checks the options
/// (check_runnable), builds the quantization plan (plan_quantization: --keep-float's regex
/// resolved to the Top names, the --calib table loaded and checked), refuses what would not fit
/// in memory (frontend::check_memory; `access`: how the checkpoint is held), then
/// compile_bundle. With `tensor_parallel` N > 1 it first refuses the options
/// (check_tensor_parallel_options) and a model N ranks cannot split
/// (frontend::tensor_parallel_refusal, Error(unsupported) naming the model).
CompileReport
compile_checkpoint(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                   compiler::CompileOptions options, const std::string& keep_float,
                   FileAccess access, const std::filesystem::path& out, bool progress,
                   const std::function<void(const CompileReport&)>& before_commit = {},
                   const DraftSpec& draft = {}, std::int64_t tensor_parallel = 1);

/// Runs one prefill, one prefill_kv (when `with_history`) and one decode step on `s`, then
/// resets it; an Error on the way (a plan the executor cannot run) becomes
/// Error(invalid_input, `what`, the reason). What compile and verify --level tpu check first.
void check_session_runs(runtime::Session& s, bool with_history, const std::string& what);

/// Refuses (Error(invalid_input) naming the option) what would compile into a bundle the
/// runtime cannot run or that misbehaves: a negative --tile-rows or --threads, bos / eos ids
/// outside the vocabulary, a weight dtype the target does not list, a group size the kernels do
/// not run; the quantization options by the plan's rules (conversion::plan_quant_options, named
/// as flags) and, for int8, against the model (Error(unsupported): static scales on a
/// mixture-of-experts layer, an already-quantized linear weight). `integer_draft`: a draft model
/// with integer weights is compiled beside (--draft-mode w8a16 / w4a16, or its lm_head w8 / w4),
/// so --symmetric applies to it even where the model's own weights are float.
void check_runnable(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                    const compiler::CompileOptions& options, bool integer_draft = false);

/// A one-paragraph human summary of `r` (compile time, size, memory plan).
std::string describe(const CompileReport& r);

} // namespace tpullm::cli
