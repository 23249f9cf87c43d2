#pragma once
/// `lower-to-tpu`: the paper's Top -> Tpu lowering (section 3.2). Each function is translated
/// into a new function (result types may change, so this is not an in-place rewrite); the
/// old one is dropped and unread Top weights leave the module. Decisions made here:
///  - weights of linear layers and of the MLP are packed for the kernels in the mode's dtype
///    (f32 / bf16 / f16, f32 accumulation); GPTQ / AWQ weights go through direct (int4
///    repacked, act-order included); the embedding table and the lm_head weight may use their
///    own dtype (`embedding`, `lm-head` options; empty = the mode's);
///  - modes w8a16 / w4a16 quantize the float q/k/v/o/gate/up/down (and MoE expert) weights by
///    round-to-nearest (conversion/rtn_quantize.hpp) per `group-size` rows, asymmetric unless
///    `symmetric`; their float dtype (embedding, lm_head by default, `keep-float` weights,
///    norms) is bf16, and an lm_head of `w8` / `w4` is quantized the same way;
///  - mode int8 (W8A8) quantizes the same weights to int8, symmetric, one scale per output
///    channel, and marks their tpu.MatMul / tpu.MLP with how activations are quantized
///    (`act_quant`; static: `act_scale` / `act_zero` from the calibration table `calib`, and
///    `down_act_scale` / `down_act_zero` for the MLP's down projection); `smooth-alpha` applies
///    SmoothQuant to the inputs that follow an RMSNorm (conversion/int8_calib.hpp);
///  - RoPE gathers its cos/sin rows inside tpu.Rope; the embedding gather becomes
///    tpu.Embedding (producing f32, so a following Cast to f32 disappears) on the table packed
///    as the lm_head packs it ([H, V] panels), so a tied checkpoint stores it once;
///  - in a block function (attributes {stage, layer}), the new keys and values it returns are
///    stored into the layer's KV cache (tpu.KVStore) and the Concat of history and new rows
///    becomes tpu.KVAppend, an address (tpu.FAttention reads the cache in place).
/// Lowering refuses with a located error what the Tpu op set cannot express (e.g. a Top Add
/// with general broadcasting, a Rope whose cos/sin are not gathered from tables by position).
/// After it, no `top.` op remains (checked).
/// Every quantization decision comes from one typed QuantPlan (conversion/quant_plan.hpp),
/// built before lowering (make_quant_plan: the options' text is parsed and checked there, the
/// calibration table loaded by the plan's builder); the pass parses no option text.

#include <memory>
#include <string>

#include "tpullm/conversion/quant_plan.hpp"
#include "tpullm/conversion/weight_convert.hpp"
#include "tpullm/ir/module.hpp"
#include "tpullm/pass/pass.hpp"

namespace tpullm::conversion {

/// Options of `lower-to-tpu`, as spelt in a pipeline (`lower-to-tpu{mode=int8,...}`) and on the
/// command line; make_quant_plan turns them into the typed plan the pass follows.
struct LowerOptions {
  std::string mode = "f32";     ///< linear / MLP weights: f32, bf16, f16, w8a16 or w4a16
  std::string embedding;        ///< dtype of the embedding table (empty: the mode's float dtype)
  std::string lm_head;          ///< lm_head weight: f32, bf16, f16, w8 or w4 (empty: mode's float)
  std::int64_t group_size = 64; ///< w8a16 / w4a16 (and w8 / w4 lm_head): rows per group, 0 = K
  bool symmetric = false;       ///< w8a16 / w4a16: no zero points
  std::string keep_float; ///< w8a16 / w4a16: bounded PCRE2 regex (UserRegex) of Top weight names
                          ///< kept in bf16
  /// KV cache element type: f32, f16, bf16 or int8 (empty: f32 for mode f32, f16 for every other
  /// mode)
  std::string kv_dtype;
  // --- int8 (W8A8) ---
  /// Activation quantization. Mode int8: dynamic (a scale per row; the default) or static (per
  /// tensor). Other modes: none (the default: f32 activations) or dynamic (x rounded to int8
  /// per weight group wherever the weights are integer). Empty: the mode's default.
  std::string act_quant;
  bool act_asymmetric = false; ///< int8 static: a zero point from the table's min / max
  std::string calib;           ///< int8: calibration table (conversion/calib_table.hpp)
  double smooth_alpha = 0;     ///< int8: SmoothQuant migration strength in (0, 1); 0: off
  /// Not an option (no text): the plan built from these fields ahead of the pipeline (the
  /// compile tool's, holding the table it loaded once); null: the pass's binding builds it
  /// with make_quant_plan. Who sets it keeps it in step with the fields.
  std::shared_ptr<const QuantPlan> plan;
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("mode", s.mode,
      "weight dtype of linear and MLP layers: f32, bf16, f16, w8a16 / w4a16 (round-to-nearest "
      "int8 / int4 weights, f32 activations; their float dtype is bf16) or int8 (W8A8)");
    f("embedding", s.embedding, "dtype of the embedding table (default: the mode's float dtype)");
    f("lm-head", s.lm_head,
      "dtype of the lm_head weight: f32, bf16, f16, w8 or w4 (default: the mode's float dtype)");
    f("group-size", s.group_size,
      "quantizing modes: rows of K per scale group (0: one group per output channel)");
    f("symmetric", s.symmetric, "quantizing modes: symmetric (no zero points)");
    f("keep-float", s.keep_float,
      "quantizing modes: regex of weight names (e.g. layers\\.0\\..*) kept in the float dtype");
    f("kv-dtype", s.kv_dtype,
      "KV cache element type: f32, f16, bf16 or int8 (a scale per position and head; default: "
      "f32 for mode f32, f16 otherwise)");
    f("act-quant", s.act_quant,
      "activation quantization. int8: dynamic (a scale per row at run time; default) or static "
      "(one calibrated scale per tensor, needs calib). Other modes: none (default) or dynamic "
      "(x rounded to int8 per weight group where the weights are integer; lossy)");
    f("act-asymmetric", s.act_asymmetric, "int8 static: a zero point from the calibrated range");
    f("calib", s.calib, "int8: calibration table file (tpullm calibrate)");
    f("smooth-alpha", s.smooth_alpha,
      "int8: SmoothQuant strength in (0, 1) (needs calib; 0: no smoothing)");
  }
};

/// The KV cache element type `options` choose: kv_dtype when given (f32, f16, bf16 or int8 = i8
/// with the kv_rows layout; anything
/// else throws Error(invalid_input) naming the option as `spelling` writes it), else f32 for
/// mode f32 and f16 for every other mode.
ir::DType kv_cache_dtype(const LowerOptions& options, const QuantOptionSpelling& spelling = {});

/// The --kv-dtype spelling of a KV cache element type: "int8" for i8, the dtype's name otherwise.
inline std::string_view kv_dtype_spelling(ir::DType t) {
  return t == ir::DType::i8 ? "int8" : ir::name(t);
}

/// The one place the options' rules live: the plan of `options` without its calibration table
/// and keep-float set (no file read, no regex compiled: a tool checks the plan against the model
/// before loading the table). Throws Error(invalid_input) naming the option as `spelling`
/// writes it for an unknown mode or dtype, a negative group-size, keep-float outside the
/// quantizing modes, int8 options outside mode int8 or inconsistent with each other.
QuantPlan plan_quant_options(const LowerOptions& options, const QuantOptionSpelling& spelling = {});

/// The one place the text options become a plan: plan_quant_options, then the keep-float names
/// or bounded regex, and `calib` as the calibration table; when options.calib
/// names a file and `calib` is null, loads it (once: every module of a compilation then shares
/// the plan). The table's model identity is the caller's to check (it knows the model).
QuantPlan make_quant_plan(const LowerOptions& options,
                          std::shared_ptr<const CalibTable> calib = nullptr,
                          const QuantOptionSpelling& spelling = {});

/// Lowers every function of `m` to Tpu ops as `plan` says, converting weights through
/// `converter` (shared by all modules of one compilation, so a weight is converted once); with
/// nullptr a private converter is used. Throws DiagnosticError at the op that cannot be lowered.
void lower_to_tpu(ir::Module& m, const QuantPlan& plan, WeightConverter* converter);

/// The pass-table binding: the plan of `options` (options.plan, else make_quant_plan(options)),
/// built once, and a pass that lowers with it and the context's converter.
pass::PassFn bind_lower_to_tpu(const LowerOptions& options);

/// Throws DiagnosticError at the first op of `m` that is not of `dialect` or builtin.
void require_dialect(const ir::Module& m, ir::Dialect dialect, const char* after_what);

} // namespace tpullm::conversion
