#pragma once
/// The quantization plan of one compilation: every quantization decision `lower-to-tpu` follows,
/// typed, validated and built once before lowering (make_quant_plan in
/// conversion/lower_to_tpu.hpp turns the pass's text options into it; the compile tool builds
/// it with the calibration table it loaded). The pass reads it and parses no option text.
///  - a format per class of weights: the linear / MLP / expert weights (the mode), the
///    embedding table and the lm_head weight: a float dtype, or RTN-quantized to 8 / 4 bits
///    (W8A8 for mode int8);
///  - the RTN grouping (group size, symmetric) and the linear weights kept in the float dtype
///    (keep-float: a set of Top names, or a bounded regex of them);
///  - int8 activation quantization: dynamic or static, asymmetric, SmoothQuant's alpha, and
///    the calibration table (shared, loaded by whoever built the plan).

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "tpullm/conversion/calib_table.hpp"
#include "tpullm/conversion/rtn_quantize.hpp"
#include "tpullm/ir/dtype.hpp"
#include "tpullm/support/regex.hpp"

namespace tpullm::conversion {

/// How one class of weights is stored: a float dtype, or quantized by RTN to `bits`.
struct WeightFormat {
  ir::DType dtype = ir::DType::f32; ///< the float dtype (of the quantizing modes: bf16)
  int bits = 0;                     ///< 0: float; 4 or 8: RTN-quantized
  bool w8a8 = false;                ///< int8: 8 bits, symmetric per channel, int8 activations
};

/// How the linears quantize the activations they read: mode int8 always (per row or per tensor);
/// the other modes only when asked (act-quant=dynamic), and only where the weights are integer.
struct ActQuantPlan {
  /// Outside mode int8: linears over integer weights (w8a16 / w4a16, a quantized checkpoint or
  /// GGUF file) round x to int8 per weight group at run time (kernels::XPrecision::int8).
  bool int8_weight_only = false;
  bool static_tensor = false; ///< int8: one calibrated scale per tensor (else a scale per row)
  bool asymmetric = false;    ///< static: a zero point from the table's min / max
  double smooth_alpha = 0;    ///< SmoothQuant migration strength in (0, 1); 0: off
};

/// How the options behind a plan read in its errors: as the lowering pass's options
/// (`lower-to-tpu option 'act-quant'`, `act-quant=static`) or as a tool's flags (`--act-quant`,
/// `--act-quant static`). One rule, one message, whoever gave the options.
struct QuantOptionSpelling {
  bool flags = false; ///< true: the tool's --flags; false: the pass's option keys

  /// Option `key` (e.g. "act-quant") as written: `act-quant`, or `--act-quant` (the tables'
  /// keys `embedding` and `lm-head` are the flags --embedding-dtype and --lm-head-dtype).
  std::string name(std::string_view key) const {
    if (!flags)
      return std::string(key);
    const bool table = key == "embedding" || key == "lm-head";
    return "--" + std::string(key) + (table ? "-dtype" : "");
  }
  /// The subject of an error about option `key`.
  std::string subject(std::string_view key) const {
    return flags ? name(key) : "lower-to-tpu option '" + name(key) + "'";
  }
  /// Option `key` set to `value`, as the user writes it.
  std::string setting(std::string_view key, std::string_view value) const {
    return name(key) + (flags ? " " : "=") + std::string(value);
  }
};

/// Every quantization decision of one compilation (see the file comment).
struct QuantPlan {
  WeightFormat linear;                              ///< q/k/v/o/gate/up/down and MoE expert weights
  WeightFormat embedding;                           ///< the embedding table
  WeightFormat lm_head;                             ///< the lm_head weight
  ir::DType kv_dtype = ir::DType::f32;              ///< the KV cache's element type
  RtnOptions rtn;                                   ///< group size and symmetry of every RTN format
  std::unordered_set<std::string> keep_float_names; ///< linear weights kept float, by Top name
  std::optional<UserRegex> keep_float;              ///< or by a bounded regex of Top names
  ActQuantPlan act;                                 ///< int8 activations
  std::shared_ptr<const CalibTable> calib;          ///< int8: the calibration table, when given
  QuantOptionSpelling spelling;                     ///< how its options read in errors

  /// Whether linear weight `top_name` stays in the linear format's float dtype (keep-float).
  bool keeps_float(const std::string& top_name) const {
    return keep_float_names.contains(top_name) || (keep_float && keep_float->full_match(top_name));
  }
  /// Why this plan cannot lower a mixture-of-experts layer ("" when it can): static activation
  /// scales are per tensor, and an expert sees only the tokens routed to it.
  std::string moe_refusal() const;
  /// Why this plan cannot take the already-quantized (GPTQ / AWQ) linear weight `name` ("" when
  /// it can: every mode but int8 passes integer weights through).
  std::string quantized_weight_refusal(const std::string& name) const;
};

} // namespace tpullm::conversion
