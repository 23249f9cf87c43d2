#pragma once
/// `tpullm calibrate`: runs the float model on sample prompts and records, at the input of every
/// linear `--mode int8` quantizes (q/k/v/o, the MLP's input for gate / up, its SwiGLU
/// activation for down), the statistics of a calibration table (conversion/calib_table.hpp).
///
/// The model runs through the reference Top interpreter (InterpreterExecutor + Session, exactly
/// what `verify --level top` checks against the goldens): the f64 semantics of the Top ops, so
/// the table does not depend on any compiled kernel or on the mode being calibrated. An
/// observation hook (TopInterpreter::set_observer) sees each top.MatMul / top.MLP of a block
/// function with its operand values; the MLP's down input is recomputed from them
/// (silu(x * gate) * (x * up)).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tpullm/conversion/calib_table.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/stage_params.hpp"

namespace tpullm::runtime {

/// How calibrate runs.
struct CalibrateOptions {
  std::string method = "max"; ///< max, percentile or kl (conversion/calib_stats.hpp)
  int threads = 1;            ///< samples run at once (each its own session; weights shared)
  /// Called after each sample (done, total); may be empty.
  std::function<void(std::size_t, std::size_t)> progress;
};

/// The calibration table of `desc` over `samples` (token-id prompts, each 1..params.seq_length
/// ids below the vocabulary). Identical for any `threads`. Throws Error(invalid_input) for an
/// unknown method, no samples, a bad id or length, a mixture-of-experts or pre-quantized model
/// (int8 does not compile those).
conversion::CalibTable calibrate(const frontend::ModelDesc& desc,
                                 const frontend::StageParams& params,
                                 const std::vector<std::vector<std::int32_t>>& samples,
                                 const CalibrateOptions& options);

/// The built-in samples: `count` prompts of `length` ids, drawn from std::mt19937 seeded with
/// 20240613 + prompt index, each id = draw % vocab (the same on every platform).
std::vector<std::vector<std::int32_t>> builtin_calib_samples(std::int64_t vocab,
                                                             std::int64_t length, int count = 4);

} // namespace tpullm::runtime
