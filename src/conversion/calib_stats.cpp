// Calibration statistics and thresholds (conversion/calib_stats.hpp).
#include "tpullm/conversion/calib_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tpullm/support/error.hpp"

namespace tpullm::conversion {

void InputStats::add(std::span<const float> x, std::int64_t K, bool keep_values) {
  check(K > 0 && x.size() % static_cast<std::size_t>(K) == 0, ErrorKind::invalid_input,
        "calibration", x.size(), " values are not rows of ", K);
  if (channel_absmax_.empty())
    channel_absmax_.assign(static_cast<std::size_t>(K), 0.0f);
  check(channel_absmax_.size() == static_cast<std::size_t>(K), ErrorKind::invalid_input,
        "calibration", "rows of ", K, " after rows of ", channel_absmax_.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    check(std::isfinite(v), ErrorKind::invalid_input, "calibration",
          "the float model produced a non-finite activation (", v, ")");
    if (!any_) {
      min_ = max_ = v;
      any_ = true;
    }
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
    float& c = channel_absmax_[i % static_cast<std::size_t>(K)];
    c = std::max(c, std::fabs(v));
  }
  if (keep_values)
    for (float v : x)
      abs_values_.push_back(std::fabs(v));
  rows_ += static_cast<std::int64_t>(x.size()) / K;
}

void InputStats::merge(const InputStats& o) {
  if (!o.any_)
    return;
  if (!any_) {
    *this = o;
    return;
  }
  check(o.channel_absmax_.size() == channel_absmax_.size(), ErrorKind::internal, "calibration",
        "merging inputs of different widths");
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
  for (std::size_t j = 0; j < channel_absmax_.size(); ++j)
    channel_absmax_[j] = std::max(channel_absmax_[j], o.channel_absmax_[j]);
  abs_values_.insert(abs_values_.end(), o.abs_values_.begin(), o.abs_values_.end());
  rows_ += o.rows_;
}

CalibEntry InputStats::entry(const std::string& name, const std::string& method) const {
  CalibEntry e;
  e.name = name;
  e.min = min_;
  e.max = max_;
  e.absmax = std::max(std::fabs(min_), std::fabs(max_));
  e.channel_absmax = channel_absmax_;
  if (method == "percentile")
    e.threshold = percentile_threshold(abs_values_);
  else if (method == "kl")
    e.threshold = kl_threshold(abs_values_, e.absmax);
  else
    e.threshold = e.absmax;
  // A threshold of 0 leaves no range: keep the whole one (the table requires 0 < t <= absmax).
  if (!(e.threshold > 0) || e.threshold > e.absmax)
    e.threshold = e.absmax;
  return e;
}

float percentile_threshold(std::vector<float> values, double q) {
  if (values.empty())
    return 0.0f;
  const auto n = static_cast<double>(values.size());
  auto rank = static_cast<std::size_t>(std::ceil(q * n));
  rank = std::clamp<std::size_t>(rank, 1, values.size());
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                   values.end());
  return values[rank - 1];
}

namespace {

/// MXNet's _smooth_distribution: zero bins get eps, taken evenly from the non-zero ones; false
/// when every bin is zero.
bool smooth(std::vector<double>& p, double eps = 1e-4) {
  std::size_t zeros = 0;
  for (double v : p)
    zeros += v == 0 ? 1 : 0;
  if (zeros == p.size())
    return false;
  const double take = eps * static_cast<double>(zeros) / static_cast<double>(p.size() - zeros);
  for (double& v : p)
    v = v == 0 ? eps : v - take;
  return true;
}

void normalize(std::vector<double>& p) {
  double s = 0;
  for (double v : p)
    s += v;
  if (s > 0)
    for (double& v : p)
      v /= s;
}

} // namespace

float kl_threshold(std::span<const float> abs_values, float absmax) {
  constexpr int kBins = 2048, kLevels = 128;
  if (!(absmax > 0) || abs_values.empty())
    return absmax;
  const double width = static_cast<double>(absmax) / kBins;
  std::vector<double> hist(kBins, 0.0);
  for (float v : abs_values)
    hist[static_cast<std::size_t>(std::min<double>(v / width, kBins - 1))] += 1;
  double best = std::numeric_limits<double>::infinity();
  int best_i = kBins;
  double outliers = 0;
  for (int i = kBins; i >= kLevels; --i) { // outliers: the sum of bins i..
    if (i < kBins)
      outliers += hist[static_cast<std::size_t>(i)];
    std::vector<double> p(hist.begin(), hist.begin() + i);
    p[static_cast<std::size_t>(i - 1)] += outliers;
    std::vector<double> qd(static_cast<std::size_t>(i), 0.0);
    for (int j = 0; j < kLevels; ++j) {
      const int a = j * i / kLevels, b = (j + 1) * i / kLevels;
      double total = 0;
      int nonzero = 0;
      for (int k = a; k < b; ++k) {
        total += hist[static_cast<std::size_t>(k)];
        nonzero += hist[static_cast<std::size_t>(k)] != 0 ? 1 : 0;
      }
      for (int k = a; k < b; ++k)
        if (hist[static_cast<std::size_t>(k)] != 0)
          qd[static_cast<std::size_t>(k)] = total / nonzero;
    }
    normalize(p);
    normalize(qd);
    if (!smooth(p) || !smooth(qd))
      continue;
    double kl = 0;
    for (std::size_t k = 0; k < p.size(); ++k)
      if (p[k] > 0 && qd[k] > 0)
        kl += p[k] * std::log(p[k] / qd[k]);
    if (kl <= best) { // ties: the smaller threshold (i descends)
      best = kl;
      best_i = i;
    }
  }
  return static_cast<float>(std::min<double>((best_i + 0.5) * width, absmax));
}

} // namespace tpullm::conversion
