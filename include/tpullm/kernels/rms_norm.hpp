#pragma once
/// RMSNorm over the rows of an [M, H] activation, optionally fused with the residual add that
/// precedes it in a decoder layer (h = x + r is written out, then normalized).
///
///   y[m, :] = x[m, :] / sqrt(mean(x[m, :]^2) + eps) * gamma          (rms_norm)
///   h[m, :] = x[m, :] + r[m, :];  y[m, :] = rms_norm(h[m, :])         (add_rms_norm)
///
/// Accumulation is in f32 (per-lane partial sums, so error grows like sqrt(H) ulps); gamma may be
/// f32, bf16 or f16. In place is allowed: y may alias x (and h may alias x or r).

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/kernels/detail/portable_simd.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Shape of an RMSNorm: `rows` x `hidden`, row-major, contiguous rows.
struct RmsNormShape {
  std::int64_t rows = 0;   ///< M: tokens (or tokens * heads for a per-head q/k norm)
  std::int64_t hidden = 0; ///< H: normalized length
};

namespace detail {

inline void rms_check(const RmsNormShape& s, std::size_t x, std::size_t g, std::size_t y,
                      const char* what) {
  if (s.rows < 0 || s.hidden <= 0)
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": bad shape [" + std::to_string(s.rows) + ", " +
                    std::to_string(s.hidden) + "]");
  const auto n = static_cast<std::size_t>(s.rows * s.hidden);
  if (x < n || y < n || g < static_cast<std::size_t>(s.hidden))
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": spans too small for [" + std::to_string(s.rows) + ", " +
                    std::to_string(s.hidden) + "]: x " + std::to_string(x) + ", y " +
                    std::to_string(y) + ", gamma " + std::to_string(g));
}

/// Rows [b, e): optional residual add (r != nullptr writes h), then normalize into y.
TPULLM_ALWAYS_INLINE void rms_rows_generic(const float* x, const float* r, float* h, const float* g,
                                           float* y, std::int64_t H, float eps, std::int64_t b,
                                           std::int64_t e) {
  for (std::int64_t m = b; m < e; ++m) {
    const float* xr = x + m * H;
    float* yr = y + m * H;
    const float* src = xr;
    if (r) {
      const float* rr = r + m * H;
      float* hr = h + m * H;
      for (std::int64_t i = 0; i < H; ++i)
        hr[i] = xr[i] + rr[i];
      src = hr;
    }
    // 16 partial sums keep the reduction vectorizable without -ffast-math
    float acc[16] = {};
    std::int64_t i = 0;
    for (; i + 16 <= H; i += 16)
      for (int j = 0; j < 16; ++j)
        acc[j] += src[i + j] * src[i + j];
    for (; i < H; ++i)
      acc[i & 15] += src[i] * src[i];
    float ss = 0.f;
    for (float a : acc)
      ss += a;
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(H) + eps);
    for (std::int64_t j = 0; j < H; ++j)
      yr[j] = src[j] * inv * g[j];
  }
}

TPULLM_TARGET_AVX512 inline void rms_rows_avx512(const float* x, const float* r, float* h,
                                                 const float* g, float* y, std::int64_t H,
                                                 float eps, std::int64_t b, std::int64_t e) {
  rms_rows_generic(x, r, h, g, y, H, eps, b, e);
}
TPULLM_TARGET_AVX2 inline void rms_rows_avx2(const float* x, const float* r, float* h,
                                             const float* g, float* y, std::int64_t H, float eps,
                                             std::int64_t b, std::int64_t e) {
  rms_rows_generic(x, r, h, g, y, H, eps, b, e);
}
/// rms_rows_generic on the portable path's xsimd vectors.
inline void rms_rows_portable(const float* x, const float* r, float* h, const float* g, float* y,
                              std::int64_t H, float eps, std::int64_t b, std::int64_t e) {
  const std::int64_t hv = H / kPW * kPW;
  for (std::int64_t m = b; m < e; ++m) {
    const float* xr = x + m * H;
    float* yr = y + m * H;
    const float* src = xr;
    if (r) {
      const float* rr = r + m * H;
      float* hr = h + m * H;
      for (std::int64_t i = 0; i < hv; i += kPW)
        pv_store(hr + i, pv_load(xr + i) + pv_load(rr + i));
      for (std::int64_t i = hv; i < H; ++i)
        hr[i] = xr[i] + rr[i];
      src = hr;
    }
    PVec a0(0.f), a1(0.f);
    std::int64_t i = 0;
    for (; i + 2 * kPW <= hv; i += 2 * kPW) {
      const PVec v0 = pv_load(src + i), v1 = pv_load(src + i + kPW);
      a0 = pv_fma(v0, v0, a0);
      a1 = pv_fma(v1, v1, a1);
    }
    for (; i < hv; i += kPW) {
      const PVec v0 = pv_load(src + i);
      a0 = pv_fma(v0, v0, a0);
    }
    float ss = pv_sum(a0 + a1);
    for (; i < H; ++i)
      ss += src[i] * src[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(H) + eps);
    const PVec iv(inv);
    for (std::int64_t j = 0; j < hv; j += kPW)
      pv_store(yr + j, pv_load(src + j) * iv * pv_load(g + j));
    for (std::int64_t j = hv; j < H; ++j)
      yr[j] = src[j] * inv * g[j];
  }
}

/// Gamma widened to f32 (no copy for f32).
template <class G>
const float* gamma_f32(std::span<const G> gamma, std::int64_t H, std::vector<float>& buf) {
  if constexpr (std::is_same_v<G, float>) {
    (void)buf;
    (void)H;
    return gamma.data();
  } else {
    buf.resize(static_cast<std::size_t>(H));
    for (std::int64_t i = 0; i < H; ++i)
      buf[static_cast<std::size_t>(i)] = to_f32(gamma[static_cast<std::size_t>(i)]);
    return buf.data();
  }
}

inline void rms_dispatch(const float* x, const float* r, float* h, const float* g, float* y,
                         const RmsNormShape& s, float eps, const CoreSplit& split) {
  const Isa isa = active_isa();
  parallel_for(split, s.rows, 1, [&](std::int64_t b, std::int64_t e) {
    switch (isa) {
    case Isa::amx:
    case Isa::avx512:
      rms_rows_avx512(x, r, h, g, y, s.hidden, eps, b, e);
      return;
    case Isa::avx2:
      rms_rows_avx2(x, r, h, g, y, s.hidden, eps, b, e);
      return;
    case Isa::portable:
      rms_rows_portable(x, r, h, g, y, s.hidden, eps, b, e);
      return;
    }
  });
}

} // namespace detail

/// y = x / sqrt(mean(x^2) + eps) * gamma per row. x, y: [M, H] row-major (y may alias x);
/// gamma: [H] of f32/bf16/f16. `split` divides rows across cores.
template <class G>
void rms_norm(std::span<const float> x, std::span<const G> gamma, std::span<float> y,
              const RmsNormShape& shape, float eps, const CoreSplit& split = {}) {
  static_assert(is_float_storage_v<G>, "gamma must be float, bf16_t or f16_t");
  detail::rms_check(shape, x.size(), gamma.size(), y.size(), "rms_norm");
  std::vector<float> gbuf;
  const float* g = detail::gamma_f32(gamma, shape.hidden, gbuf);
  detail::rms_dispatch(x.data(), nullptr, nullptr, g, y.data(), shape, eps, split);
}

/// Fused residual add + RMSNorm: h = x + r (written out, the next residual), y = rms_norm(h).
/// x, r, h, y: [M, H] row-major (h may alias x or r; y may alias x or r but not h);
/// gamma: [H] of f32/bf16/f16.
template <class G>
void add_rms_norm(std::span<const float> x, std::span<const float> r, std::span<float> h,
                  std::span<const G> gamma, std::span<float> y, const RmsNormShape& shape,
                  float eps, const CoreSplit& split = {}) {
  static_assert(is_float_storage_v<G>, "gamma must be float, bf16_t or f16_t");
  detail::rms_check(shape, x.size(), gamma.size(), y.size(), "add_rms_norm");
  const auto n = static_cast<std::size_t>(shape.rows * shape.hidden);
  if (r.size() < n || h.size() < n)
    throw_error(ErrorKind::internal, "",
                "add_rms_norm: residual r (" + std::to_string(r.size()) + ") or output h (" +
                    std::to_string(h.size()) + ") smaller than M*H = " + std::to_string(n));
  if (h.data() == y.data() && n > 0)
    throw_error(ErrorKind::internal, "", "add_rms_norm: h and y must not alias");
  std::vector<float> gbuf;
  const float* g = detail::gamma_f32(gamma, shape.hidden, gbuf);
  detail::rms_dispatch(x.data(), r.data(), h.data(), g, y.data(), shape, eps, split);
}

} // namespace tpullm::kernels
