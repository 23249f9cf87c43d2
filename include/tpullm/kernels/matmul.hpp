#pragma once
/// Linear layer y[M, N] = x[M, K] · W[K, N] (+ bias[N]) over packed weights
/// (kernels/packed_weights.hpp): f32 activations in and out, f32 accumulation, weights f32, bf16,
/// f16, int8 (per-channel or group-wise, symmetric or with zero points), int4 group-wise
/// symmetric / asymmetric, and int4 / int8 "scale and min" (w = u * scale - min).
///
/// Two algorithms, each with a portable, an AVX2+FMA and an AVX-512 path (chosen per call from
/// `active_isa()`):
///  - M <= 4 ("GEMV", memory-bound): every panel is streamed once from front to back and
///    dequantized in registers. Quantized formats accumulate sum_k x[k] * q[k][n] per group in f32
///    and apply the group's scale / zero once per group: y += s * (acc - z * sum_k x[k])
///    (scale-and-min formats: y += s * acc - min * sum_k x[k]).
///  - 4 < M <= 16 (a verify call's rows; kGemvBlockMaxRows): the same GEMVs over blocks of
///    panels held in L2, 4 rows at a time, unless a tile path (AMX, VDPBF16PS) takes them.
///  - M > 16 ("GEMM", compute-bound): cache-blocked (kc = 256 rows of K, mc <= 336 rows of x);
///    the x block is packed into MR-row strips ([kc][MR], MR = 14 on AVX-512, 6 on AVX2), the
///    [kc, 32] block of one weight panel is used in place (f32) or dequantized once into an f32
///    tile in L1 (all other formats), and a register-blocked micro-kernel (14 x 32 on AVX-512:
///    28 zmm accumulators; 6 x 16 on AVX2) multiplies them.
/// By default no activation quantization happens anywhere: results match an f32
/// dequantize-then-multiply up to f32 rounding (see docs/kernels.md for the bounds the tests
/// enforce). XPrecision::int8 lets the VNNI kernels round x to int8 per weight group (lossy);
/// on AVX-512 VNNI they then take integer weights at every M (up to kVnniInt8MaxRows, in blocks
/// of 64 rows), not only M <= 4; on the AVX2 path the same rounding feeds integer-dot kernels
/// (AVX-VNNI or VPMADDUBSW, detail/matmul_gemv_int8_avx2.hpp) with the same results.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/packed_weights.hpp"
#include "tpullm/kernels/detail/matmul_common.hpp"
#include "tpullm/kernels/detail/matmul_drivers.hpp"
#include "tpullm/kernels/detail/matmul_x_digits.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Shape of a linear: x: [M, K], W: [K, N], y: [M, N].
struct LinearShape {
  std::int64_t M = 0; ///< rows of x and y (tokens)
  std::int64_t K = 0; ///< input features
  std::int64_t N = 0; ///< output features
};

namespace detail {

/// Test hook: when true, int8 / int4 GEMVs on AVX-512 use the f32-FMA dequantization path even if
/// the CPU has AVX512_VNNI (so tests cover that path on VNNI machines).
inline bool& vnni_disabled() {
  static bool disabled = false;
  return disabled;
}

/// True when quantized GEMVs take the VNNI digit path (AVX-512 with AVX512_VNNI, not disabled).
inline bool use_vnni_gemv() {
  return TPULLM_X86 && vector_isa(active_isa()) == Isa::avx512 && cpu_features().avx512_vnni &&
         !vnni_disabled();
}

/// True when quantized linears of precision `p` take the AVX2 integer-dot kernels
/// (matmul_gemv_int8_avx2.hpp): the AVX2 path is active and x may be rounded to int8.
inline bool use_avx2_int8_gemv(XPrecision p) {
  return TPULLM_X86 && active_isa() == Isa::avx2 && p == XPrecision::int8;
}

/// True when quantized GEMVs (M <= 4) of precision `p` read x's digits (XDigits): the AVX-512
/// VNNI path (any precision) or the AVX2 integer-dot path (XPrecision::int8).
inline bool use_digit_gemv(XPrecision p) {
  return use_vnni_gemv() || use_avx2_int8_gemv(p);
}

/// Whether a linear of M > 4 rows over weights of format `f` runs on x's int8 digits (the
/// AVX-512 VNNI or AVX2 integer-dot kernels, or from kAmxX8MinRows rows on an AMX CPU the tile
/// unit's x8 kernel, detail/matmul_amx_x8.hpp): x may be rounded to int8 (XPrecision::int8, up to
/// kVnniInt8MaxRows rows), one of them runs and the AMX-INT8 body does not take the product. Up to
/// kDecodeArithmeticRows rows (a verify segment) they run even where the tile unit would: their
/// rows sum as a GEMV's single row does, so a verify row's logits are the decode step's.
inline bool vnni_int8_rows(WeightFormat f, std::int64_t M, XPrecision p) {
  bool emulated = false;
  return is_quantized(f) && M > kGemvMaxRows && M <= kVnniInt8MaxRows && p == XPrecision::int8 &&
         use_digit_gemv(p) && (M <= kDecodeArithmeticRows || !amx_linear_applies(f, M, emulated));
}

/// Whether a linear of M > 4 rows over weights of format `f` runs on the VNNI kernels with x
/// decomposed into digits: vnni_int8_rows, or exact x (three digits) up to kGemvBlockMaxRows
/// rows where the tile unit does not take the product (a verify call's rows: one weight read).
inline bool digit_rows(WeightFormat f, std::int64_t M, XPrecision p) {
  bool emulated = false;
  return vnni_int8_rows(f, M, p) ||
         (is_quantized(f) && M > kGemvMaxRows && M <= kGemvBlockMaxRows && use_digit_gemv(p) &&
          !amx_linear_applies(f, M, emulated));
}

/// Digits of x for the VNNI / AVX2 integer-dot GEMV of one view (null when another path runs):
/// `pre` if it was prepared for the same rows, grouping and precision (a.xprec), else built
/// into `scratch`.
inline const XDigits* gemv_digits(const LinearArgs& a, const XDigits* pre, XDigits& scratch) {
  if (!is_quantized(a.v.w->format) || !use_digit_gemv(a.xprec) ||
      (a.M > kGemvMaxRows && !digit_rows(a.v.w->format, a.M, a.xprec)))
    return nullptr;
  const std::int64_t seg = segment_rows(a.v), Kv = a.v.k1 - a.v.k0;
  const int nd = x_digit_count(a.xprec);
  if (pre && pre->M == a.M && pre->Kv == Kv && pre->seg == seg && pre->nd == nd)
    return pre;
#if TPULLM_X86
  build_x_digits(a.x, a.ldx, a.M, Kv, seg, scratch, -1, nd);
  return &scratch;
#else
  (void)scratch;
  return nullptr;
#endif
}

/// Per-call scratch of the GEMV preparation, one per thread (no allocation in steady state).
inline XDigits& tls_digits() {
  thread_local XDigits xd;
  return xd;
}

/// Runs a linear over a weight view. For quantized GEMVs it uses the digit-decomposed x (VNNI
/// path: `pre` when given and matching, else built here) or the per-group x sums (f32-FMA paths).
inline void linear_view(LinearArgs a, const CoreSplit& split, const XDigits* pre = nullptr) {
  const PackedWeights& w = *a.v.w;
  if (a.accumulate && a.bias)
    throw_error(ErrorKind::internal, "", "linear: accumulate together with bias is not supported");
  std::vector<float> xsum;
  if (is_quantized(w.format) &&
      (a.M <= kGemvBlockMaxRows || vnni_int8_rows(w.format, a.M, a.xprec)))
    a.xd = gemv_digits(a, pre, tls_digits());               // null where no digit path applies
  if (is_quantized(w.format) && a.M <= kGemvBlockMaxRows) { // x sums for the f32-FMA GEMVs
    const std::int64_t seg = segment_rows(a.v), Kv = a.v.k1 - a.v.k0;
    if (!a.xd) {
      const std::int64_t G = (Kv + seg - 1) / seg;
      xsum.assign(static_cast<std::size_t>(a.M * G), 0.0f);
      for (std::int64_t m = 0; m < a.M; ++m)
        for (std::int64_t g = 0; g < G; ++g) {
          float s = 0;
          const float* xr = a.x + m * a.ldx;
          for (std::int64_t k = g * seg; k < std::min(Kv, (g + 1) * seg); ++k)
            s += xr[k];
          xsum[static_cast<std::size_t>(m * G + g)] = s;
        }
      a.xsum = xsum.data();
      a.xsum_ld = G;
    }
  }
  switch (w.format) {
  case WeightFormat::f32:
    run_linear<WeightFormat::f32>(a, split);
    return;
  case WeightFormat::bf16:
    run_linear<WeightFormat::bf16>(a, split);
    return;
  case WeightFormat::f16:
    run_linear<WeightFormat::f16>(a, split);
    return;
  case WeightFormat::int8:
    run_linear<WeightFormat::int8>(a, split);
    return;
  case WeightFormat::int4_sym:
    run_linear<WeightFormat::int4_sym>(a, split);
    return;
  case WeightFormat::int4_asym:
    run_linear<WeightFormat::int4_asym>(a, split);
    return;
  case WeightFormat::int8_asym:
    run_linear<WeightFormat::int8_asym>(a, split);
    return;
  case WeightFormat::int4_min:
    run_linear<WeightFormat::int4_min>(a, split);
    return;
  case WeightFormat::int8_min:
    run_linear<WeightFormat::int8_min>(a, split);
    return;
  case WeightFormat::int6_sym:
    run_linear<WeightFormat::int6_sym>(a, split);
    return;
  case WeightFormat::int6_min:
    run_linear<WeightFormat::int6_min>(a, split);
    return;
  }
}

/// x: [M, K] -> the x the kernels read: columns in packed row order (act-order k_perm) and
/// zero-padded to stored_rows(). Returns x itself when neither applies, else fills `buf`.
inline const float* prepare_x(const float* x, std::int64_t M, const PackedWeights& w,
                              std::vector<float>& buf) {
  const std::int64_t K = w.K, Kp = w.stored_rows();
  if (w.k_perm.empty() && Kp == K)
    return x;
  buf.assign(static_cast<std::size_t>(M * Kp), 0.0f);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t j = 0; j < K; ++j)
      buf[static_cast<std::size_t>(m * Kp + j)] =
          x[m * K + (w.k_perm.empty() ? j : w.k_perm[static_cast<std::size_t>(j)])];
  return buf.data();
}

inline void check_weights(const char* what, const PackedWeights& w) {
  const std::int64_t rb = row_bytes(w.format);
  if (w.K <= 0 || w.N <= 0 ||
      static_cast<std::int64_t>(w.data.size()) != w.panels() * w.stored_rows() * rb)
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": packed weights are empty or inconsistent");
  if (!super_rows_fit(w.format, w.K, w.group_size, w.super_rows) ||
      (is_quantized(w.format) &&
       (w.group_size <= 0 || w.K % w.group_size != 0 ||
        static_cast<std::int64_t>(w.scales.size()) != w.panels() * w.scale_rows() * kPanelCols)))
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": bad group_size / scales for " +
                    std::string(format_name(w.format)));
  const std::size_t params = static_cast<std::size_t>(w.panels() * w.groups() * kPanelCols);
  const std::size_t supers = static_cast<std::size_t>(w.panels() * w.scale_rows() * kPanelCols);
  const std::size_t codes = w.two_level() ? params : 0;
  if (is_quantized(w.format) &&
      (w.scale_codes.size() != codes || w.min_codes.size() != (has_mins(w.format) ? codes : 0)))
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": " + std::string(format_name(w.format)) + " weights need " +
                    std::to_string(codes) + " scale codes (and as many min codes with mins)");
  if ((has_zeros(w.format) && w.zeros.size() != params) ||
      (has_mins(w.format) && w.mins.size() != supers))
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": " + std::string(format_name(w.format)) + " weights need " +
                    std::to_string(has_mins(w.format) ? supers : params) +
                    (has_mins(w.format) ? " mins" : " zero points"));
}

} // namespace detail

/// Activations x: [M, K] row-major f32 prepared once for several linears that read the same x
/// (q / k / v, or gate / up): the int8 digit decomposition the VNNI GEMV (M <= 4) needs is built
/// on first use for each weight grouping and reused by later calls. Holds a view of x (x must
/// outlive it and not change). Not for concurrent use from several threads.
class LinearInput {
public:
  /// x: [M, K] row-major; `precision`: how the linears over integer weights may treat x.
  LinearInput(std::span<const float> x, std::int64_t M, std::int64_t K,
              XPrecision precision = XPrecision::exact)
      : x_(x), M_(M), K_(K), precision_(precision) {
    if (M <= 0 || K <= 0 || static_cast<std::int64_t>(x.size()) < M * K)
      throw_error(ErrorKind::internal, "",
                  "LinearInput: x has " + std::to_string(x.size()) + " elements, needs [M=" +
                      std::to_string(M) + ", K=" + std::to_string(K) + "] (both > 0)");
  }
  std::span<const float> x() const { return x_; } ///< [M, K]
  std::int64_t M() const { return M_; }
  std::int64_t K() const { return K_; }
  XPrecision precision() const { return precision_; }

  /// Digits for weights `w` (natural row order) or null when no prepared form applies.
  const detail::XDigits* digits_for(const PackedWeights& w) const {
    if (!is_quantized(w.format) || !w.k_perm.empty() || w.K != K_ ||
        !detail::use_digit_gemv(precision_) ||
        (M_ > detail::kGemvMaxRows && !detail::digit_rows(w.format, M_, precision_)))
      return nullptr;
    const std::int64_t seg = w.group_rows(), Kv = w.stored_rows();
    for (const auto& d : cache_)
      if (d->seg == seg && d->Kv == Kv)
        return d.get();
#if TPULLM_X86
    auto d = std::make_unique<detail::XDigits>();
    detail::build_x_digits(x_.data(), K_, M_, Kv, seg, *d, K_, detail::x_digit_count(precision_));
    cache_.push_back(std::move(d));
    return cache_.back().get();
#else
    return nullptr;
#endif
  }

private:
  std::span<const float> x_;
  std::int64_t M_ = 0, K_ = 0;
  XPrecision precision_ = XPrecision::exact;
  mutable std::vector<std::unique_ptr<detail::XDigits>> cache_;
};

namespace detail {
/// Argument checks of `linear` (throw Error(internal) with context).
inline void check_linear(std::span<const float> x, const PackedWeights& w,
                         std::span<const float> bias, std::span<float> y, LinearShape s) {
  check_weights("linear", w);
  if (s.M <= 0 || s.K != w.K || s.N != w.N)
    throw_error(ErrorKind::internal, "",
                "linear: shape [M=" + std::to_string(s.M) + ", K=" + std::to_string(s.K) + ", N=" +
                    std::to_string(s.N) + "] does not match weights [K=" + std::to_string(w.K) +
                    ", N=" + std::to_string(w.N) + "] (M must be > 0)");
  if (static_cast<std::int64_t>(x.size()) < s.M * s.K ||
      static_cast<std::int64_t>(y.size()) < s.M * s.N)
    throw_error(ErrorKind::internal, "", "linear: x or y span is smaller than [M, K] / [M, N]");
  if (!bias.empty() && static_cast<std::int64_t>(bias.size()) != s.N)
    throw_error(ErrorKind::internal, "",
                "linear: bias has " + std::to_string(bias.size()) +
                    " elements, N=" + std::to_string(s.N));
}

/// A checked linear; `pre`: x's prepared digits or null.
inline void linear_checked(std::span<const float> x, const PackedWeights& w,
                           std::span<const float> bias, std::span<float> y, LinearShape s,
                           CoreSplit split, const XDigits* pre, XPrecision precision) {
  std::vector<float> xp;
  const float* xptr = prepare_x(x.data(), s.M, w, xp);
  LinearArgs a;
  a.x = xptr;
  a.ldx = w.stored_rows();
  a.v = {&w, 0, w.stored_rows(), 0, w.panels()};
  a.bias = bias.empty() ? nullptr : bias.data();
  a.y = y.data();
  a.ldy = s.N;
  a.M = s.M;
  a.xprec = precision;
  linear_view(a, split, pre);
}
} // namespace detail

/// y = x · W + bias. x: [M, K] row-major f32; w: packed W [K, N]; bias: [N] or empty;
/// y: [M, N] row-major f32 (fully overwritten). `split` divides N (SplitDim::cols, by 32-column
/// panels) or M (SplitDim::rows, GEMM only; M <= 4 runs on one thread) across OpenMP threads.
/// A GEMV (M <= 4) uses fewer threads than `split.parts` when its weights are too small for a
/// thread fork to pay (detail::kGemvBytesPerThread each). `precision`: how integer weights may
/// treat x (XPrecision; exact by default). Throws Error(internal) on shape mismatch or
/// SplitDim::heads.
inline void linear(std::span<const float> x, const PackedWeights& w, std::span<const float> bias,
                   std::span<float> y, LinearShape s, CoreSplit split = {},
                   XPrecision precision = XPrecision::exact) {
  detail::check_linear(x, w, bias, y, s);
  detail::linear_checked(x, w, bias, y, s, split, nullptr, precision);
}

/// y = x · W + bias with x prepared once (LinearInput, [M, K] = [s.M, s.K]): the same contract
/// as the span overload (x's precision applies); quantized GEMVs (M <= 4) reuse x's digit
/// decomposition across calls.
inline void linear(const LinearInput& x, const PackedWeights& w, std::span<const float> bias,
                   std::span<float> y, LinearShape s, CoreSplit split = {}) {
  if (s.M != x.M() || s.K != x.K())
    throw_error(ErrorKind::internal, "",
                "linear: shape [M=" + std::to_string(s.M) + ", K=" + std::to_string(s.K) +
                    "] does not match the prepared x [" + std::to_string(x.M()) + ", " +
                    std::to_string(x.K()) + "]");
  detail::check_linear(x.x(), w, bias, y, s);
  detail::linear_checked(x.x(), w, bias, y, s, split, x.digits_for(w), x.precision());
}

} // namespace tpullm::kernels
