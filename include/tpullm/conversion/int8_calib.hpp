#pragma once
/// What `--mode int8` derives from a calibration table (conversion/calib_table.hpp): the static
/// per-tensor activation scale and zero point of an input, and SmoothQuant's per-channel factors.
///
/// Static parameters of an entry (threshold T, range [min, max]), after smoothing shrank the
/// input's range by `shrink` (1 without smoothing):
///   symmetric : scale = T * shrink / 127, zero = 0
///   asymmetric: lo = max(min(min * shrink, 0), -T * shrink), hi = min(max(max * shrink, 0),
///               T * shrink), scale = (hi - lo) / 255, zero = clamp(round(-128 - lo / scale),
///               -128, 127)   (lo maps to -128, hi to 127)
/// SmoothQuant (alpha a in (0, 1)), per input channel j of the linears reading one input:
///   s_j = max|X_j|^a / max|W_j|^(1 - a), where max|X_j| is the table's channel absmax and
///   max|W_j| the largest |weight| of row j over every output of those linears; s_j = 1 where
///   either is 0. X_j / s_j is folded into the preceding RMSNorm's gamma, W_j * s_j into the
///   weight rows before quantization. After smoothing the input's range is estimated without
///   re-running the model: shrink = max_j(max|X_j| / s_j) / absmax (every channel's own
///   maximum divided by its factor; the per-tensor maximum of the smoothed input cannot exceed
///   it, and equals it when the channel maxima are reached on one row). A smoothed input's static
///   range starts from absmax, not from the method's threshold: a clipping threshold measured
///   before smoothing clips other elements after it (docs/quantization.md).

#include <cstdint>
#include <span>
#include <vector>

#include "tpullm/conversion/calib_table.hpp"

namespace tpullm::conversion {

/// A static per-tensor activation quantization: x ~= scale * (q - zero).
struct StaticActParams {
  float scale = 1;       ///< > 0
  std::int32_t zero = 0; ///< in [-128, 127]; 0 when symmetric
};

/// The static parameters of `e` (formulas in the file comment). Throws Error(invalid_input)
/// naming the entry when the range is empty (absmax 0) or `shrink` is not finite and > 0.
StaticActParams static_act_params(const CalibEntry& e, bool asymmetric, float shrink = 1.0f);

/// SmoothQuant factors s [K] from channel absmax x [K] and weight-row absmax w [K] (file comment).
/// Throws Error(invalid_input) unless alpha is in (0, 1) and the sizes agree.
std::vector<float> smooth_factors(std::span<const float> x_absmax, std::span<const float> w_absmax,
                                  double alpha);

/// The range shrink of a smoothed input: max_j(x_absmax[j] / s[j]) / absmax (1 when absmax is 0).
float smoothed_shrink(std::span<const float> x_absmax, std::span<const float> s, float absmax);

} // namespace tpullm::conversion
