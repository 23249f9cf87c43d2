// Static activation parameters and SmoothQuant factors of --mode int8 (conversion/int8_calib.hpp).
#include "tpullm/conversion/int8_calib.hpp"

#include <algorithm>
#include <cmath>

#include "tpullm/support/error.hpp"

namespace tpullm::conversion {

StaticActParams static_act_params(const CalibEntry& e, bool asymmetric, float shrink) {
  const std::string where = "calibration input '" + e.name + "'";
  check(std::isfinite(shrink) && shrink > 0, ErrorKind::invalid_input, where,
        "smoothing shrink must be finite and > 0, got ", shrink);
  check(e.absmax > 0 && e.threshold > 0, ErrorKind::invalid_input, where,
        "is all zero on the calibration samples (absmax ", e.absmax,
        "): no static scale can be derived");
  const float t = e.threshold * shrink;
  StaticActParams p;
  if (!asymmetric) {
    p.scale = t / 127.0f;
    return p;
  }
  const float lo = std::max(std::min(e.min * shrink, 0.0f), -t);
  const float hi = std::min(std::max(e.max * shrink, 0.0f), t);
  p.scale = (hi - lo) / 255.0f;
  check(p.scale > 0 && std::isfinite(p.scale), ErrorKind::invalid_input, where, "range [", lo, ", ",
        hi, "] gives no usable scale");
  p.zero = static_cast<std::int32_t>(
      std::clamp(std::nearbyint(-128.0f - lo / p.scale), -128.0f, 127.0f));
  return p;
}

std::vector<float> smooth_factors(std::span<const float> x_absmax, std::span<const float> w_absmax,
                                  double alpha) {
  check(alpha > 0 && alpha < 1, ErrorKind::invalid_input, "--smooth-alpha",
        "must be in (0, 1), got ", alpha);
  check(x_absmax.size() == w_absmax.size(), ErrorKind::invalid_input, "smooth_factors",
        "the calibration table has ", x_absmax.size(), " channels, the weights ", w_absmax.size());
  std::vector<float> s(x_absmax.size(), 1.0f);
  for (std::size_t j = 0; j < s.size(); ++j) {
    const double x = x_absmax[j], w = w_absmax[j];
    if (x > 0 && w > 0) {
      const double f = std::pow(x, alpha) / std::pow(w, 1.0 - alpha);
      if (std::isfinite(f) && f > 0)
        s[j] = static_cast<float>(f);
    }
  }
  return s;
}

float smoothed_shrink(std::span<const float> x_absmax, std::span<const float> s, float absmax) {
  if (!(absmax > 0))
    return 1.0f;
  float m = 0;
  for (std::size_t j = 0; j < x_absmax.size() && j < s.size(); ++j)
    m = std::max(m, x_absmax[j] / s[j]);
  return m > 0 ? m / absmax : 1.0f;
}

} // namespace tpullm::conversion
