// Out-of-line definitions of tpullm/support/rope_tables.hpp (compiled once into tpullm_core).
#include "tpullm/support/rope_tables.hpp"

#include <algorithm>

#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

std::vector<float> rope_inv_freq(std::int64_t head_dim, double theta, const RopeScaling& scaling) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw_error(ErrorKind::invalid_input, "",
                "rope: head_dim " + std::to_string(head_dim) + " must be positive and even");
  if (!(theta > 0.0))
    throw_error(ErrorKind::invalid_input, "",
                "rope: rope_theta " + std::to_string(theta) + " must be > 0");
  const std::int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float p = static_cast<float>(std::pow(theta, static_cast<double>(e)));
    inv[static_cast<std::size_t>(i)] = 1.0f / p;
  }
  switch (scaling.kind) {
  case RopeScaling::Kind::none:
    break;
  case RopeScaling::Kind::linear:
    if (!(scaling.factor > 0.0))
      throw_error(ErrorKind::invalid_input, "", "rope: linear scaling factor must be > 0");
    for (float& f : inv)
      f = static_cast<float>(f / scaling.factor);
    break;
  case RopeScaling::Kind::llama3: {
    const double factor = scaling.factor, lo = scaling.low_freq_factor,
                 hi = scaling.high_freq_factor;
    const double old_len = static_cast<double>(scaling.original_max_position_embeddings);
    if (!(factor > 0.0) || !(lo > 0.0) || !(hi > lo) || !(old_len > 0.0))
      throw_error(ErrorKind::invalid_input, "",
                  "rope: llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor, "
                  "original_max_position_embeddings > 0");
    const double low_wavelen = old_len / lo, high_wavelen = old_len / hi;
    const double two_pi = 6.283185307179586;
    for (float& f : inv) {
      const double fr = f;
      const double wavelen = two_pi / fr;
      double out = fr;
      if (wavelen > low_wavelen) {
        out = fr / factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - lo) / (hi - lo);
        out = (1.0 - smooth) * fr / factor + smooth * fr;
      }
      f = static_cast<float>(out);
    }
    break;
  }
  case RopeScaling::Kind::yarn: {
    const double factor = scaling.factor, base = theta;
    const double orig = static_cast<double>(scaling.original_max_position_embeddings);
    if (!(factor > 0.0) || !(orig > 0.0) || !(scaling.beta_fast > 0.0) ||
        !(scaling.beta_slow > 0.0))
      throw_error(ErrorKind::invalid_input, "",
                  "rope: yarn scaling needs factor > 0, beta_fast > 0, beta_slow > 0, "
                  "original_max_position_embeddings > 0");
    const double two_pi = 6.283185307179586, dim = static_cast<double>(head_dim);
    const auto correction_dim = [&](double rotations) {
      return dim * std::log(orig / (rotations * two_pi)) / (2.0 * std::log(base));
    };
    double low = correction_dim(scaling.beta_fast), high = correction_dim(scaling.beta_slow);
    if (scaling.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1.0);
    if (low == high)
      high += 0.001; // transformers' guard against a zero-width ramp
    const float f_factor = static_cast<float>(factor), f_low = static_cast<float>(low),
                f_width = static_cast<float>(high - low);
    for (std::int64_t i = 0; i < half; ++i) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      const float p = static_cast<float>(std::pow(theta, static_cast<double>(e)));
      const float extrapolation = 1.0f / p;
      const float interpolation = 1.0f / (f_factor * p);
      const float ramp =
          std::clamp((static_cast<float>(i) - f_low) / f_width, 0.0f, 1.0f); // 1: interpolate
      const float keep = 1.0f - ramp;
      const float a = interpolation * (1.0f - keep);
      const float b = extrapolation * keep;
      inv[static_cast<std::size_t>(i)] = a + b;
    }
    break;
  }
  }
  if (!scaling.freq_factors.empty()) {
    if (scaling.freq_factors.size() != inv.size())
      throw_error(ErrorKind::invalid_input, "",
                  "rope: " + std::to_string(scaling.freq_factors.size()) +
                      " frequency factors for head_dim " + std::to_string(head_dim) +
                      " (expected " + std::to_string(inv.size()) + ")");
    for (std::size_t i = 0; i < inv.size(); ++i) {
      const float f = scaling.freq_factors[i];
      if (!(f > 0.0f) || !std::isfinite(f))
        throw_error(ErrorKind::invalid_input, "",
                    "rope: frequency factor " + std::to_string(i) + " = " + std::to_string(f) +
                        " must be finite and > 0");
      inv[i] = inv[i] / f;
    }
  }
  return inv;
}

RopeTables build_rope_tables(std::int64_t seq_length, std::int64_t head_dim, double theta,
                             const RopeScaling& scaling) {
  if (seq_length <= 0)
    throw_error(ErrorKind::invalid_input, "",
                "rope: seq_length " + std::to_string(seq_length) + " must be > 0");
  const std::vector<float> inv = rope_inv_freq(head_dim, theta, scaling);
  if (!(scaling.attention_factor > 0.0) || !std::isfinite(scaling.attention_factor))
    throw_error(ErrorKind::invalid_input, "",
                "rope: attention factor " + std::to_string(scaling.attention_factor) +
                    " must be finite and > 0");
  const auto attention = static_cast<float>(scaling.attention_factor);
  RopeTables t;
  t.seq_length = seq_length;
  t.half_dim = head_dim / 2;
  t.cos.resize(static_cast<std::size_t>(seq_length * t.half_dim));
  t.sin.resize(t.cos.size());
  for (std::int64_t p = 0; p < seq_length; ++p)
    for (std::int64_t i = 0; i < t.half_dim; ++i) {
      const float angle = static_cast<float>(p) * inv[static_cast<std::size_t>(i)];
      const auto k = static_cast<std::size_t>(p * t.half_dim + i);
      t.cos[k] = static_cast<float>(std::cos(static_cast<double>(angle)));
      t.sin[k] = static_cast<float>(std::sin(static_cast<double>(angle)));
      if (attention != 1.0f) {
        t.cos[k] *= attention;
        t.sin[k] *= attention;
      }
    }
  return t;
}

} // namespace tpullm::kernels
