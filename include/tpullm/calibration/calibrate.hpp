#pragma once
/// `tpullm calibrate`: runs the float model on sample prompts and records, at the input of every
/// linear `--mode int8` quantizes (q/k/v/o, the MLP's input for gate / up, its SwiGLU
/// activation for down), the statistics of a calibration table (conversion/calib_table.hpp).
///
/// The model runs through the reference Top interpreter (InterpretedStages + Session, exactly
/// what `verify --level top` checks against the goldens): the f64 semantics of the Top ops, so
/// the table does not depend on any compiled kernel or on the mode being calibrated. An
/// observation hook (TopInterpreter::set_observer) sees each top.MatMul / top.MLP of a block
/// function with its operand values; the MLP's down input is recomputed from them
/// (silu(x * gate) * (x * up)).
///
/// Memory: the widened weights live in one WeightStore with a byte budget (least recently used
/// first out, widened again when next needed), the embedding table is gathered by rows without
/// widening it whole, and the lm_head is not run (no logits are needed), so the f64 working set
/// is about one layer per thread instead of 8 bytes for every parameter of the model.
///
/// Compile-time work (its table feeds only `compile --mode int8`), but it runs the runtime's
/// Session over the reference interpreter, so it sits above runtime/ in a folder of its own
/// (docs/architecture.md "Layers"); the table's format and statistics stay in conversion/.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tpullm/conversion/calib_table.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/stage_params.hpp"

namespace tpullm::calibration {

using conversion::CalibTable;

/// The default weight budget of calibrate: 1 GiB of widened (f64) weights.
inline constexpr std::size_t kDefaultCalibBudget = std::size_t{1024} << 20;

/// What the weight store of one calibrate() run did (calibration/calibrate.hpp, WeightStore).
struct CalibrateStats {
  std::size_t budget_bytes = 0;     ///< the budget the store ran under
  std::size_t min_budget_bytes = 0; ///< the least budget this run accepts (see CalibrateOptions)
  std::size_t peak_bytes = 0;       ///< the most the store held at once (<= budget_bytes)
  std::size_t materializations = 0; ///< weights widened, each widening again after an eviction
};

/// How calibrate runs.
struct CalibrateOptions {
  std::string method = "max"; ///< max, percentile or kl (conversion/calib_stats.hpp)
  int threads = 1;            ///< samples run at once (each its own session; weights shared)
  /// Bytes of widened weights (8 per element) held at once. The store drops the least recently
  /// used weights to stay within it and widens them again when needed. It must hold what the
  /// running threads use at once: threads x the weights of the widest stage function run (one
  /// layer; an embedding table only gathered widens just its rows, the lm_head does not run);
  /// a smaller explicit budget is refused. 0: kDefaultCalibBudget, raised to that minimum.
  std::size_t memory_budget = 0;
  /// When set, receives what the weight store did.
  CalibrateStats* stats = nullptr;
  /// Called after each sample (done, total); may be empty.
  std::function<void(std::size_t, std::size_t)> progress;
};

/// The calibration table of `desc` over `samples` (token-id prompts, each 1..params.seq_length
/// ids below the vocabulary). Identical for any `threads` and any `memory_budget`. Throws
/// Error(invalid_input) for an unknown method, no samples, a bad id or length, a budget below
/// the minimum, a mixture-of-experts or pre-quantized model (int8 does not compile those).
CalibTable calibrate(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                     const std::vector<std::vector<std::int32_t>>& samples,
                     const CalibrateOptions& options);

/// The built-in samples: `count` prompts of `length` ids, drawn from std::mt19937 seeded with
/// 20240613 + prompt index, each id = draw % vocab (the same on every platform).
std::vector<std::vector<std::int32_t>> builtin_calib_samples(std::int64_t vocab,
                                                             std::int64_t length, int count = 4);

} // namespace tpullm::calibration
