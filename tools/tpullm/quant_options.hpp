#pragma once
// The weight-quantization options of `compile` and `verify` (--group-size, --symmetric,
// --keep-float, the int8 options), the translation of --keep-float's checkpoint tensor names
// into the Top weight names the lowering sees, and the typed quantization plan built from them
// once before lowering (plan_quantization).
#include <string>

#include "command.hpp"
#include "tpullm/conversion/lower_to_tpu.hpp"
#include "tpullm/frontend/model_desc.hpp"

namespace tpullm::cli {

/// --group-size, --symmetric and --keep-float (the regex lands in `keep_float`, a checkpoint
/// tensor-name regex until resolve_keep_float translates it).
po::options_description quantization_options(conversion::LowerOptions& l, std::string& keep_float);

/// The lowering's keep-float regex (Top weight names, e.g. ^(?:layers\.0\.q|layers\.0\.k)$) for
/// the linear weights of `d` whose checkpoint tensor name (e.g. model.layers.0.self_attn.q_proj
/// .weight) matches the bounded regex `hf` (UserRegex) entirely; "" when `hf` is empty. Throws
/// Error(invalid_input) naming --keep-float for a bad regex, one over a limit (length, nesting,
/// backtracking) or one that matches no linear weight.
std::string resolve_keep_float(const frontend::ModelDesc& d, const std::string& hf);

/// The identity a calibration table records for model `d`.
conversion::CalibModel calib_model(const frontend::ModelDesc& d);

/// Builds the quantization plan of `lo` for model `d` once, before lowering, into lo.plan:
/// resolves `keep_float` (--keep-float's checkpoint-name regex) into lo.keep_float, loads the
/// --calib table (once) and refuses one measured on another model (Error naming the file), then
/// conversion::make_quant_plan, its errors naming the flags. The options are checked first
/// (check_runnable).
void plan_quantization(const frontend::ModelDesc& d, conversion::LowerOptions& lo,
                       const std::string& keep_float);

} // namespace tpullm::cli
