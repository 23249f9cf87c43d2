#pragma once
/// W8A8 linear layers (`--mode int8`): int8 weights per output channel (symmetric, packed as
/// WeightFormat::int8 with group_size == K, kernels/packed_weights.hpp) times activations quantized
/// to int8, accumulated exactly in int32, scales applied in the epilogue.
///
/// Activation quantization (ActQuant), for each row m of x [M, K]:
///   - dynamic_row: amax_m = max_k |x[m][k]|; s_m = amax_m / 127; q[m][k] = clamp(nearbyint(
///     x[m][k] * (127.0f / amax_m)), -127, 127); a row with amax_m == 0 is all zero (s_m = 0).
///   - static_tensor: one `scale` s and `zero` z for the whole tensor (from calibration):
///     q[m][k] = clamp(nearbyint(x[m][k] * (1.0f / s)) + z, -128, 127) (z = 0 when symmetric).
/// nearbyint rounds half to even (the default floating-point environment), as VCVTPS2DQ does.
/// The result, with wq[k][n] the int8 weight and ws[n] its scale:
///   dynamic_row  : y[m][n] = float(sum_k q[m][k] * wq[k][n]) * (s_m * ws[n]) + bias[n]
///   static_tensor: y[m][n] = float(sum_k (q[m][k] - z) * wq[k][n]) * (s * ws[n]) + bias[n]
/// The integer sums are exact; fast paths may differ from this reference only in the f32 rounding
/// of the epilogue (relative 1e-6 of |y|'s scale).
///
/// This file holds the portable reference implementation; the ISA paths (AVX-512 VNNI, AVX2,
/// AMX-INT8) dispatch from these same entry points.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/matmul.hpp"
#include "tpullm/kernels/mlp.hpp"
#include "tpullm/kernels/packed_weights.hpp"

namespace tpullm::kernels {

/// How a W8A8 linear quantizes its input activations (see the file comment for the formulas).
struct ActQuant {
  /// dynamic_row: a scale per row of x computed on the fly; static_tensor: `scale` / `zero`.
  enum class Kind : std::uint8_t { dynamic_row, static_tensor };
  Kind kind = Kind::dynamic_row;
  float scale = 0.0f;    ///< static_tensor: x ~= scale * (q - zero); must be > 0
  std::int32_t zero = 0; ///< static_tensor: zero point in [-128, 127] (0: symmetric)
};

namespace detail {

/// Reads int8 weight q[k][n] of a WeightFormat::int8 matrix (panel / quad layout).
inline std::int8_t int8_weight_at(const PackedWeights& w, std::int64_t k, std::int64_t n) {
  const std::int64_t p = n / kPanelCols, c = n % kPanelCols;
  const std::int64_t off = p * w.panel_bytes() + (k / 4) * 128 + c * 4 + (k % 4);
  return static_cast<std::int8_t>(w.data[static_cast<std::size_t>(off)]);
}

/// Quantizes row `x` [K] as `aq` says into q [K]; returns the row's scale (s_m or s).
inline float quantize_row_ref(const float* x, std::int64_t K, const ActQuant& aq, std::int8_t* q) {
  if (aq.kind == ActQuant::Kind::dynamic_row) {
    float amax = 0.0f;
    for (std::int64_t k = 0; k < K; ++k)
      amax = std::max(amax, std::fabs(x[k]));
    if (!(amax > 0.0f)) {
      std::fill(q, q + K, std::int8_t{0});
      return 0.0f;
    }
    const float inv = 127.0f / amax;
    for (std::int64_t k = 0; k < K; ++k)
      q[k] = static_cast<std::int8_t>(std::clamp(std::nearbyint(x[k] * inv), -127.0f, 127.0f));
    return amax / 127.0f;
  }
  const float inv = 1.0f / aq.scale;
  for (std::int64_t k = 0; k < K; ++k)
    q[k] = static_cast<std::int8_t>(
        std::clamp(std::nearbyint(x[k] * inv) + static_cast<float>(aq.zero), -128.0f, 127.0f));
  return aq.scale;
}

/// Argument checks of the W8A8 entry points (throws std::invalid_argument with context).
inline void check_w8a8(const char* what, const PackedWeights& w, const ActQuant& aq) {
  check_weights(what, w);
  if (w.format != WeightFormat::int8 || w.group_size != w.K || !w.k_perm.empty())
    throw std::invalid_argument(std::string(what) +
                                ": W8A8 needs int8 weights with one scale per output channel "
                                "(group_size == K) in natural row order, got " +
                                std::string(format_name(w.format)) +
                                " group_size=" + std::to_string(w.group_size));
  if (aq.kind == ActQuant::Kind::static_tensor &&
      (!(aq.scale > 0.0f) || !std::isfinite(aq.scale) || aq.zero < -128 || aq.zero > 127))
    throw std::invalid_argument(std::string(what) +
                                ": static activation scale must be finite "
                                "and > 0 and zero in [-128, 127], got scale=" +
                                std::to_string(aq.scale) + " zero=" + std::to_string(aq.zero));
}

/// Reference W8A8 linear (the formulas of the file comment), single-threaded.
inline void linear_w8a8_ref(const float* x, const PackedWeights& w, const float* bias, float* y,
                            LinearShape s, const ActQuant& aq) {
  std::vector<std::int8_t> q(static_cast<std::size_t>(s.K));
  const std::int32_t z = aq.kind == ActQuant::Kind::static_tensor ? aq.zero : 0;
  for (std::int64_t m = 0; m < s.M; ++m) {
    const float sx = quantize_row_ref(x + m * s.K, s.K, aq, q.data());
    for (std::int64_t n = 0; n < s.N; ++n) {
      std::int32_t acc = 0;
      for (std::int64_t k = 0; k < s.K; ++k)
        acc += (static_cast<std::int32_t>(q[static_cast<std::size_t>(k)]) - z) *
               static_cast<std::int32_t>(int8_weight_at(w, k, n));
      const float ws =
          w.scales[static_cast<std::size_t>((n / kPanelCols) * kPanelCols + n % kPanelCols)];
      y[m * s.N + n] = static_cast<float>(acc) * (sx * ws) + (bias ? bias[n] : 0.0f);
    }
  }
}

} // namespace detail

/// y = W8A8(x) · W + bias. x: [M, K] row-major f32; w: WeightFormat::int8, group_size == K, no
/// act-order; bias: [N] or empty; y: [M, N] row-major f32 (fully overwritten). `aq`: how x is
/// quantized. `split` divides N by panels (or M for M > 4) across workers. Throws
/// std::invalid_argument on a shape mismatch or weights that are not W8A8's.
inline void linear_w8a8(std::span<const float> x, const PackedWeights& w,
                        std::span<const float> bias, std::span<float> y, LinearShape s,
                        const ActQuant& aq, CoreSplit split = {}) {
  detail::check_w8a8("linear_w8a8", w, aq);
  detail::check_linear(x, w, bias, y, s);
  (void)split;
  detail::linear_w8a8_ref(x.data(), w, bias.empty() ? nullptr : bias.data(), y.data(), s, aq);
}

/// out = down( silu(x · gate) * (x · up) ) with every product W8A8: x is quantized by `aq_in` (for
/// gate and up), the SwiGLU activation h by `aq_down` (for down). Shapes as swiglu_mlp; all three
/// weights int8 per-channel. `local_memory_bytes` bounds the [rows, intermediate] buffers as in
/// swiglu_mlp (the reference ignores it). Throws std::invalid_argument on bad shapes / weights.
inline void swiglu_mlp_w8a8(std::span<const float> x, const PackedWeights& gate,
                            const PackedWeights& up, const PackedWeights& down,
                            std::span<float> out, MlpShape s, const ActQuant& aq_in,
                            const ActQuant& aq_down, std::size_t local_memory_bytes,
                            CoreSplit split = {}) {
  (void)local_memory_bytes;
  const std::int64_t H = s.hidden, I = s.intermediate;
  std::vector<float> g(static_cast<std::size_t>(s.M * I)), u(g.size());
  linear_w8a8(x, gate, {}, g, {s.M, H, I}, aq_in, split);
  linear_w8a8(x, up, {}, u, {s.M, H, I}, aq_in, split);
  for (std::int64_t m = 0; m < s.M; ++m)
    detail::silu_mul(g.data() + m * I, u.data() + m * I, I);
  linear_w8a8(g, down, {}, out, {s.M, I, H}, aq_down, split);
}

} // namespace tpullm::kernels
