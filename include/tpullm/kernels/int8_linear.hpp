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
/// This file holds the portable reference implementation (detail::linear_w8a8_ref, kept for the
/// tests) and the entry points, which run the ISA paths chosen per call (detail::w8a8_path:
/// AVX-512 VNNI, AVX-VNNI, AVX2, AMX-INT8, portable; kernels/detail/int8_*.hpp). Every path
/// quantizes x to the reference's codes exactly and sums the products exactly in int32, then
/// applies the epilogue in the reference's operation order, so its results equal the
/// reference's bit for bit (the tests still allow the contract's 1e-6 relative).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/detail/int8_linear_drivers.hpp"
#include "tpullm/kernels/matmul.hpp"
#include "tpullm/kernels/mlp.hpp"
#include "tpullm/kernels/packed_weights.hpp"
#include "tpullm/support/error.hpp"

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

/// Argument checks of the W8A8 entry points (throw Error(internal) with context).
inline void check_w8a8(const char* what, const PackedWeights& w, const ActQuant& aq) {
  check_weights(what, w);
  if (w.format != WeightFormat::int8 || w.group_size != w.K || !w.k_perm.empty())
    throw_error(ErrorKind::internal, "",
                std::string(what) +
                    ": W8A8 needs int8 weights with one scale per output channel "
                    "(group_size == K) in natural row order, got " +
                    std::string(format_name(w.format)) +
                    " group_size=" + std::to_string(w.group_size));
  if (aq.kind == ActQuant::Kind::static_tensor &&
      (!(aq.scale > 0.0f) || !std::isfinite(aq.scale) || aq.zero < -128 || aq.zero > 127))
    throw_error(ErrorKind::internal, "",
                std::string(what) +
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

namespace detail {

/// ActQuant as the kernels' plain parameters.
inline QuantParams quant_params(const ActQuant& aq) {
  QuantParams p;
  p.dynamic = aq.kind == ActQuant::Kind::dynamic_row;
  p.scale = aq.scale;
  p.zero = aq.zero;
  return p;
}

/// Rows [m0, m0 + M) of prepared x times w into y [M, N] (checked arguments).
inline void linear_w8a8_rows(const QuantRows& q, std::int64_t m0, std::int64_t M,
                             const PackedWeights& w, const float* bias, float* y,
                             const CoreSplit& split) {
  W8A8Args a;
  a.q = &q;
  a.qm0 = m0;
  a.M = M;
  a.w = &w;
  a.bias = bias;
  a.y = y;
  a.ldy = w.N;
  run_w8a8(a, split);
}

/// swiglu_mlp_w8a8's buffers, one set per thread (grown on demand: no allocation per token).
struct W8A8MlpScratch {
  QuantRows xq, hq;        ///< x (gate / up input) and h (down input) quantized
  std::vector<float> g, u; ///< gate and up results of one row pass, [rows][intermediate]
};
inline W8A8MlpScratch& w8a8_mlp_scratch() {
  thread_local W8A8MlpScratch s;
  return s;
}

/// Per-call quantized x of the span overload, one per thread (no allocation in steady state).
inline QuantRows& tls_quant_rows() {
  thread_local QuantRows q;
  return q;
}

} // namespace detail

/// Activations x: [M, K] row-major f32 quantized once as `aq` says, for several W8A8 linears
/// that read the same x (q / k / v, or gate / up): holds the int8 codes [M][K rounded up to 4]
/// and the row scales (a copy; x may change or go away afterwards).
class W8A8Input {
public:
  /// x: [M, K] row-major. Throws Error(internal) on a bad size or a bad static scale.
  W8A8Input(std::span<const float> x, std::int64_t M, std::int64_t K, const ActQuant& aq)
      : aq_(aq) {
    if (M <= 0 || K <= 0 || static_cast<std::int64_t>(x.size()) < M * K)
      throw_error(ErrorKind::internal, "",
                  "W8A8Input: x has " + std::to_string(x.size()) + " elements, needs [M=" +
                      std::to_string(M) + ", K=" + std::to_string(K) + "] (both > 0)");
    if (aq.kind == ActQuant::Kind::static_tensor &&
        (!(aq.scale > 0.0f) || !std::isfinite(aq.scale) || aq.zero < -128 || aq.zero > 127))
      throw_error(ErrorKind::internal, "",
                  "W8A8Input: static activation scale must be finite and > 0 and "
                  "zero in [-128, 127], got scale=" +
                      std::to_string(aq.scale) + " zero=" + std::to_string(aq.zero));
    detail::quantize_rows(x.data(), K, M, K, (K + 3) / 4 * 4, detail::quant_params(aq),
                          active_isa(), q_);
  }
  /// Rows of x.
  std::int64_t M() const { return q_.M; }
  /// Columns of x (input features).
  std::int64_t K() const { return q_.K; }
  /// How x was quantized.
  const ActQuant& act_quant() const { return aq_; }
  /// The quantized rows (codes q + 128, [M][Kp]; row scales [M]).
  const detail::QuantRows& rows() const { return q_; }

private:
  ActQuant aq_;
  detail::QuantRows q_;
};

/// y = W8A8(x) · W + bias. x: [M, K] row-major f32; w: WeightFormat::int8, group_size == K, no
/// act-order; bias: [N] or empty; y: [M, N] row-major f32 (fully overwritten). `aq`: how x is
/// quantized. `split` divides N by panels (SplitDim::cols) or M (SplitDim::rows, M > 4 only)
/// across workers, as kernels::linear does. Throws Error(internal) on a shape mismatch,
/// SplitDim::heads or weights that are not W8A8's. K > 65536 runs the reference (int32 sums).
inline void linear_w8a8(std::span<const float> x, const PackedWeights& w,
                        std::span<const float> bias, std::span<float> y, LinearShape s,
                        const ActQuant& aq, CoreSplit split = {}) {
  detail::check_w8a8("linear_w8a8", w, aq);
  detail::check_linear(x, w, bias, y, s);
  if (split.dim == SplitDim::heads)
    throw_error(ErrorKind::internal, "", "linear_w8a8: CoreSplit over heads is not meaningful");
  if (s.K > detail::kW8A8MaxK) {
    detail::linear_w8a8_ref(x.data(), w, bias.empty() ? nullptr : bias.data(), y.data(), s, aq);
    return;
  }
  detail::QuantRows& q = detail::tls_quant_rows();
  detail::quantize_rows(x.data(), s.K, s.M, s.K, w.stored_rows(), detail::quant_params(aq),
                        active_isa(), q);
  detail::linear_w8a8_rows(q, 0, s.M, w, bias.empty() ? nullptr : bias.data(), y.data(), split);
}

/// y = W8A8(x) · W + bias with x quantized once (W8A8Input, [M, K] = [s.M, s.K], its ActQuant):
/// the same contract and results as the span overload.
inline void linear_w8a8(const W8A8Input& x, const PackedWeights& w, std::span<const float> bias,
                        std::span<float> y, LinearShape s, CoreSplit split = {}) {
  detail::check_w8a8("linear_w8a8", w, x.act_quant());
  if (s.M != x.M() || s.K != x.K())
    throw_error(ErrorKind::internal, "",
                "linear_w8a8: shape [M=" + std::to_string(s.M) + ", K=" + std::to_string(s.K) +
                    "] does not match the prepared x [" + std::to_string(x.M()) + ", " +
                    std::to_string(x.K()) + "]");
  if (s.K != w.K || s.N != w.N || static_cast<std::int64_t>(y.size()) < s.M * s.N ||
      (!bias.empty() && static_cast<std::int64_t>(bias.size()) != s.N))
    throw_error(ErrorKind::internal, "",
                "linear_w8a8: weights [K=" + std::to_string(w.K) + ", N=" + std::to_string(w.N) +
                    "], y or bias do not match [M=" + std::to_string(s.M) +
                    ", K=" + std::to_string(s.K) + ", N=" + std::to_string(s.N) + "]");
  if (split.dim == SplitDim::heads)
    throw_error(ErrorKind::internal, "", "linear_w8a8: CoreSplit over heads is not meaningful");
  if (s.K > detail::kW8A8MaxK)
    throw_error(ErrorKind::internal, "",
                "linear_w8a8: a prepared x supports K <= 65536, got K=" + std::to_string(s.K));
  detail::linear_w8a8_rows(x.rows(), 0, s.M, w, bias.empty() ? nullptr : bias.data(), y.data(),
                           split);
}

/// Rows of x per pass of swiglu_mlp_w8a8 within `budget_bytes`: the gate and up buffers of a
/// pass, [rows, intermediate] f32 each, fit the budget (whole rows, so the down projection's
/// dynamic per-row scale sees the full row of h, as the reference's). Throws
/// Error(internal) when not even one row fits.
inline std::int64_t w8a8_mlp_row_tile(MlpShape s, std::size_t budget_bytes) {
  const std::int64_t per_row = 2 * static_cast<std::int64_t>(sizeof(float)) * s.intermediate;
  const std::int64_t rows = static_cast<std::int64_t>(budget_bytes) / per_row;
  if (rows < 1)
    throw_error(ErrorKind::internal, "",
                "swiglu_mlp_w8a8: local-memory budget of " + std::to_string(budget_bytes) +
                    " bytes is below one row of the " + "gate and up buffers (" +
                    std::to_string(per_row) + " bytes)");
  return std::min(rows, s.M);
}

/// out = down( silu(x · gate) * (x · up) ) with every product W8A8: x is quantized once by
/// `aq_in` (for gate and up), the SwiGLU activation h by `aq_down` (for down). Shapes as
/// swiglu_mlp; all three weights int8 per-channel. Rows are processed in passes whose [rows,
/// intermediate] gate and up buffers fit `local_memory_bytes` (w8a8_mlp_row_tile). Throws
/// Error(internal) on bad shapes / weights / budget.
inline void swiglu_mlp_w8a8(std::span<const float> x, const PackedWeights& gate,
                            const PackedWeights& up, const PackedWeights& down,
                            std::span<float> out, MlpShape s, const ActQuant& aq_in,
                            const ActQuant& aq_down, std::size_t local_memory_bytes,
                            CoreSplit split = {}) {
  const std::int64_t H = s.hidden, I = s.intermediate;
  if (s.M <= 0 || H <= 0 || I <= 0)
    throw_error(ErrorKind::internal, "", "swiglu_mlp_w8a8: shape must be positive");
  detail::check_w8a8("swiglu_mlp_w8a8 gate", gate, aq_in);
  detail::check_w8a8("swiglu_mlp_w8a8 up", up, aq_in);
  detail::check_w8a8("swiglu_mlp_w8a8 down", down, aq_down);
  if (gate.K != H || gate.N != I || up.K != H || up.N != I || down.K != I || down.N != H)
    throw_error(ErrorKind::internal, "",
                "swiglu_mlp_w8a8: weights do not match [hidden=" + std::to_string(H) +
                    ", intermediate=" + std::to_string(I) + "]");
  if (static_cast<std::int64_t>(x.size()) < s.M * H ||
      static_cast<std::int64_t>(out.size()) < s.M * H)
    throw_error(ErrorKind::internal, "",
                "swiglu_mlp_w8a8: x or out span is smaller than [M, hidden]");
  if (split.dim == SplitDim::heads)
    throw_error(ErrorKind::internal, "", "swiglu_mlp_w8a8: CoreSplit over heads is not meaningful");
  if (std::max(H, I) > detail::kW8A8MaxK) { // int32 sums: the reference's composition
    std::vector<float> g(static_cast<std::size_t>(s.M * I)), u(g.size());
    linear_w8a8(x, gate, {}, g, {s.M, H, I}, aq_in, split);
    linear_w8a8(x, up, {}, u, {s.M, H, I}, aq_in, split);
    for (std::int64_t m = 0; m < s.M; ++m)
      detail::silu_mul(g.data() + m * I, u.data() + m * I, I);
    linear_w8a8(g, down, {}, out, {s.M, I, H}, aq_down, split);
    return;
  }
  const std::int64_t rt = w8a8_mlp_row_tile(s, local_memory_bytes);
  const Isa isa = active_isa();
  detail::W8A8MlpScratch& sc = detail::w8a8_mlp_scratch();
  detail::QuantRows &xq = sc.xq, &hq = sc.hq;
  detail::quantize_rows(x.data(), H, s.M, H, gate.stored_rows(), detail::quant_params(aq_in), isa,
                        xq);
  sc.g.resize(static_cast<std::size_t>(rt * I));
  sc.u.resize(sc.g.size());
  float *g = sc.g.data(), *u = sc.u.data();
  for (std::int64_t m0 = 0; m0 < s.M; m0 += rt) {
    const std::int64_t mr = std::min(rt, s.M - m0);
    if (mr <= detail::kGemvMaxRows) { // decode: gate and up in one fork / join
      detail::W8A8Args ab[2];
      for (int i = 0; i < 2; ++i) {
        ab[i].q = &xq;
        ab[i].qm0 = m0;
        ab[i].M = mr;
        ab[i].w = i == 0 ? &gate : &up;
        ab[i].y = i == 0 ? g : u;
        ab[i].ldy = I;
      }
      detail::run_w8a8_gemvs(ab, split);
    } else {
      detail::linear_w8a8_rows(xq, m0, mr, gate, nullptr, g, split);
      detail::linear_w8a8_rows(xq, m0, mr, up, nullptr, u, split);
    }
    for (std::int64_t m = 0; m < mr; ++m)
      detail::silu_mul(g + m * I, u + m * I, I);
    detail::quantize_rows(g, I, mr, I, down.stored_rows(), detail::quant_params(aq_down), isa, hq);
    detail::linear_w8a8_rows(hq, 0, mr, down, nullptr, out.data() + m0 * H, split);
  }
}

} // namespace tpullm::kernels
