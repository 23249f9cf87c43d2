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

/// How mode int8 quantizes the activations its linears read.
struct ActQuantPlan {
  bool static_tensor = false; ///< one calibrated scale per tensor (else a scale per row)
  bool asymmetric = false;    ///< static: a zero point from the table's min / max
  double smooth_alpha = 0;    ///< SmoothQuant migration strength in (0, 1); 0: off
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

  /// Whether linear weight `top_name` stays in the linear format's float dtype (keep-float).
  bool keeps_float(const std::string& top_name) const {
    return keep_float_names.contains(top_name) || (keep_float && keep_float->full_match(top_name));
  }
};

} // namespace tpullm::conversion
