#pragma once
/// Statistics `tpullm calibrate` gathers at one quantized input, and the clipping thresholds of
/// its methods:
///   max        : threshold = absmax
///   percentile : the 99.99th percentile of |x| over every element seen (nearest rank: the
///                ceil(0.9999 n)-th smallest |x|)
///   kl         : TensorRT's entropy calibration: |x| in a 2048-bin histogram over [0, absmax];
///                for each candidate i in [128, 2048] the first i bins (the outliers added to
///                bin i - 1) are compared with their quantization to 128 levels (each level's
///                count spread evenly over its non-empty bins), both smoothed by 1e-4 as MXNet
///                does; threshold = (i + 0.5) * bin width of the i with the least KL divergence
///                (at most absmax).
/// Every statistic is independent of the order rows are added in (sums of counts, maxima, and a
/// sorted copy), so tables do not depend on how samples are spread over threads.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpullm/conversion/calib_table.hpp"

namespace tpullm::conversion {

/// Running statistics of one input x [rows, K].
class InputStats {
public:
  /// Adds rows of x (row-major, K per row); keeps every |x| when `keep_values` (percentile, kl).
  /// Throws Error(invalid_input) when x.size() is not a multiple of K or K differs from earlier
  /// rows', and on a non-finite element.
  void add(std::span<const float> x, std::int64_t K, bool keep_values);
  /// Adds everything `o` saw.
  void merge(const InputStats& o);
  /// Rows seen.
  std::int64_t rows() const { return rows_; }
  /// The table entry named `name` with the threshold of `method` (max, percentile, kl).
  CalibEntry entry(const std::string& name, const std::string& method) const;

private:
  float min_ = 0, max_ = 0;
  bool any_ = false;
  std::int64_t rows_ = 0;
  std::vector<float> channel_absmax_;
  std::vector<float> abs_values_;
};

/// The nearest-rank `q`-quantile (0 < q <= 1) of `values` (>= 0); 0 when empty.
float percentile_threshold(std::vector<float> values, double q = 0.9999);

/// The KL threshold (file comment) of |x| values with maximum `absmax`; absmax when it is 0.
float kl_threshold(std::span<const float> abs_values, float absmax);

} // namespace tpullm::conversion
