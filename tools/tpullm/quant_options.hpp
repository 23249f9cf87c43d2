#pragma once
// The weight-quantization options of `compile` and `verify` (--group-size, --symmetric,
// --keep-float) and the translation of --keep-float's checkpoint tensor names into the Top
// weight names the lowering sees.
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

} // namespace tpullm::cli
