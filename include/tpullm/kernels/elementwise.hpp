#pragma once
/// Elementwise kernels over f32 row-major [M, N] activations: row softmax, silu, silu(a)*b,
/// add and mul (the second operand either the same [M, N] shape or an [N] vector broadcast over
/// rows). Outputs may alias inputs (in place). exp uses a vectorizable polynomial (rel err
/// < 3e-7), so results differ from std::exp by a few ulps.

#include <cstdint>
#include <span>
#include <string>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/kernels/detail/portable_simd.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Row-major [rows, cols] shape of an elementwise operand.
struct RowsShape {
  std::int64_t rows = 0; ///< M
  std::int64_t cols = 0; ///< N
  std::int64_t size() const { return rows * cols; }
};

/// Binary elementwise operation.
enum class BinaryOp { add, mul };

namespace detail {

inline void ew_check(const RowsShape& s, std::size_t n, const char* what, const char* arg) {
  if (s.rows < 0 || s.cols < 0)
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": bad shape [" + std::to_string(s.rows) + ", " +
                    std::to_string(s.cols) + "]");
  if (n < static_cast<std::size_t>(s.size()))
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": " + arg + " has " + std::to_string(n) +
                    " elements, shape [" + std::to_string(s.rows) + ", " + std::to_string(s.cols) +
                    "] needs " + std::to_string(s.size()));
}

// ---- generic bodies (compiled per ISA through the wrappers below) -----------------------------

TPULLM_ALWAYS_INLINE void softmax_rows_generic(const float* x, float* y, std::int64_t N,
                                               std::int64_t b, std::int64_t e) {
  for (std::int64_t m = b; m < e; ++m) {
    const float* xr = x + m * N;
    float* yr = y + m * N;
    float mx[16];
    for (float& v : mx)
      v = -__builtin_inff();
    std::int64_t i = 0;
    for (; i + 16 <= N; i += 16)
      for (int j = 0; j < 16; ++j)
        mx[j] = xr[i + j] > mx[j] ? xr[i + j] : mx[j];
    for (; i < N; ++i)
      mx[0] = xr[i] > mx[0] ? xr[i] : mx[0];
    float rmax = mx[0];
    for (float v : mx)
      rmax = v > rmax ? v : rmax;
    if (rmax == -__builtin_inff())
      rmax = 0.f; // all -inf: exp gives 0 everywhere, the 0/0 below yields NaN like the reference
    float acc[16] = {};
    i = 0;
    for (; i + 16 <= N; i += 16)
      for (int j = 0; j < 16; ++j) {
        const float v = exp_approx(xr[i + j] - rmax);
        yr[i + j] = v;
        acc[j] += v;
      }
    for (; i < N; ++i) {
      const float v = exp_approx(xr[i] - rmax);
      yr[i] = v;
      acc[0] += v;
    }
    float sum = 0.f;
    for (float v : acc)
      sum += v;
    const float inv = 1.0f / sum;
    for (std::int64_t j = 0; j < N; ++j)
      yr[j] *= inv;
  }
}

TPULLM_ALWAYS_INLINE void silu_generic(const float* x, const float* g, float* y, std::int64_t b,
                                       std::int64_t e) {
  for (std::int64_t i = b; i < e; ++i) {
    const float v = x[i];
    const float s = v / (1.0f + exp_approx(-v));
    y[i] = g ? s * g[i] : s;
  }
}

TPULLM_ALWAYS_INLINE void binary_generic(const float* a, const float* bv, float* y, std::int64_t N,
                                         bool broadcast, bool mul, std::int64_t rb,
                                         std::int64_t re) {
  for (std::int64_t m = rb; m < re; ++m) {
    const float* ar = a + m * N;
    const float* br = broadcast ? bv : bv + m * N;
    float* yr = y + m * N;
    if (mul)
      for (std::int64_t j = 0; j < N; ++j)
        yr[j] = ar[j] * br[j];
    else
      for (std::int64_t j = 0; j < N; ++j)
        yr[j] = ar[j] + br[j];
  }
}

// ---- portable path on xsimd vectors (detail/portable_simd.hpp) --------------------------------

inline void softmax_rows_portable(const float* x, float* y, std::int64_t N, std::int64_t b,
                                  std::int64_t e) {
  const std::int64_t nv = N / kPW * kPW;
  const PVec log2e(1.4426950408889634f);
  for (std::int64_t m = b; m < e; ++m) {
    const float* xr = x + m * N;
    float* yr = y + m * N;
    PVec mxv(-__builtin_inff());
    for (std::int64_t i = 0; i < nv; i += kPW)
      mxv = pv_max(mxv, pv_load(xr + i));
    float lanes[kPW];
    pv_store(lanes, mxv);
    float rmax = -__builtin_inff();
    for (float v : lanes)
      rmax = v > rmax ? v : rmax;
    for (std::int64_t i = nv; i < N; ++i)
      rmax = xr[i] > rmax ? xr[i] : rmax;
    if (rmax == -__builtin_inff())
      rmax = 0.f; // all -inf: exp gives 0 everywhere, the 0/0 below yields NaN like the reference
    const PVec mb(rmax * 1.4426950408889634f);
    PVec acc(0.f);
    for (std::int64_t i = 0; i < nv; i += kPW) {
      const PVec v = pv_exp2(pv_fma(pv_load(xr + i), log2e, PVec(0.f) - mb));
      pv_store(yr + i, v);
      acc = acc + v;
    }
    float sum = pv_sum(acc);
    for (std::int64_t i = nv; i < N; ++i) {
      yr[i] = exp_approx(xr[i] - rmax);
      sum += yr[i];
    }
    const PVec inv(1.0f / sum);
    for (std::int64_t i = 0; i < nv; i += kPW)
      pv_store(yr + i, pv_load(yr + i) * inv);
    for (std::int64_t i = nv; i < N; ++i)
      yr[i] *= 1.0f / sum;
  }
}

inline void silu_portable(const float* x, const float* g, float* y, std::int64_t b,
                          std::int64_t e) {
  const PVec nlog2e(-1.4426950408889634f), one(1.f);
  std::int64_t i = b;
  for (; i + kPW <= e; i += kPW) {
    const PVec v = pv_load(x + i);
    // exp2 of min(-x*log2e, 126) keeps 1 + e finite; silu -> 0 for very negative x either way
    PVec s = v / (one + pv_exp2(pv_min(v * nlog2e, PVec(126.f))));
    if (g)
      s = s * pv_load(g + i);
    pv_store(y + i, s);
  }
  for (; i < e; ++i) {
    const float v = x[i];
    const float s = v / (1.0f + exp_approx(-v));
    y[i] = g ? s * g[i] : s;
  }
}

// name##_generic cloned for AVX-512 and AVX2, and name##_isa dispatching on the ISA to them or
// to the hand-written name##_portable.
#define TPULLM_EW_CLONES_X86(name, params, args)                                                   \
  TPULLM_TARGET_AVX512 inline void name##_avx512 params {                                          \
    name##_generic args;                                                                           \
  }                                                                                                \
  TPULLM_TARGET_AVX2 inline void name##_avx2 params {                                              \
    name##_generic args;                                                                           \
  }                                                                                                \
  inline void name##_isa(Isa isa, auto&&... a) {                                                   \
    switch (isa) {                                                                                 \
    case Isa::amx:                                                                                 \
    case Isa::avx512:                                                                              \
      name##_avx512(a...);                                                                         \
      return;                                                                                      \
    case Isa::avx2:                                                                                \
      name##_avx2(a...);                                                                           \
      return;                                                                                      \
    case Isa::portable:                                                                            \
      name##_portable(a...);                                                                       \
      return;                                                                                      \
    }                                                                                              \
  }

// The same, with name##_portable the generic body too.
#define TPULLM_EW_CLONES(name, params, args)                                                       \
  inline void name##_portable params {                                                             \
    name##_generic args;                                                                           \
  }                                                                                                \
  TPULLM_EW_CLONES_X86(name, params, args)

#if TPULLM_X86
TPULLM_AVX512_BEGIN
/// AVX-512 row softmax (GCC does not vectorize the generic exp without -ffast-math).
TPULLM_TARGET_AVX512 inline void softmax_rows_avx512_v(const float* x, float* y, std::int64_t N,
                                                       std::int64_t b, std::int64_t e) {
  const __m512 log2e = _mm512_set1_ps(1.4426950408889634f);
  for (std::int64_t m = b; m < e; ++m) {
    const float* xr = x + m * N;
    float* yr = y + m * N;
    __m512 mx = _mm512_set1_ps(-__builtin_inff());
    std::int64_t i = 0;
    for (; i + 16 <= N; i += 16)
      mx = _mm512_max_ps(mx, _mm512_loadu_ps(xr + i));
    if (i < N)
      mx = _mm512_mask_max_ps(
          mx, static_cast<__mmask16>((1u << (N - i)) - 1u), mx,
          _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (N - i)) - 1u), xr + i));
    float rmax = _mm512_reduce_max_ps(mx);
    if (rmax == -__builtin_inff())
      rmax = 0.f;
    const __m512 mb = _mm512_set1_ps(rmax * 1.4426950408889634f);
    __m512 acc = _mm512_setzero_ps();
    for (i = 0; i < N; i += 16) {
      const __mmask16 k = N - i >= 16 ? static_cast<__mmask16>(0xFFFF)
                                      : static_cast<__mmask16>((1u << (N - i)) - 1u);
      const __m512 v = exp2_avx512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, xr + i), log2e, mb));
      _mm512_mask_storeu_ps(yr + i, k, v);
      acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, v));
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(acc));
    for (i = 0; i < N; i += 16) {
      const __mmask16 k = N - i >= 16 ? static_cast<__mmask16>(0xFFFF)
                                      : static_cast<__mmask16>((1u << (N - i)) - 1u);
      _mm512_mask_storeu_ps(yr + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, yr + i), inv));
    }
  }
}

/// AVX-512 silu / silu * gate.
TPULLM_TARGET_AVX512 inline void silu_avx512_v(const float* x, const float* g, float* y,
                                               std::int64_t b, std::int64_t e) {
  const __m512 nlog2e = _mm512_set1_ps(-1.4426950408889634f), one = _mm512_set1_ps(1.f);
  for (std::int64_t i = b; i < e; i += 16) {
    const __mmask16 k =
        e - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (e - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    // exp2 of min(-x*log2e, 126) keeps 1 + e finite; silu -> 0 for very negative x either way
    const __m512 t = _mm512_min_ps(_mm512_mul_ps(v, nlog2e), _mm512_set1_ps(126.f));
    __m512 s = _mm512_div_ps(v, _mm512_add_ps(one, exp2_avx512(t)));
    if (g)
      s = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, g + i));
    _mm512_mask_storeu_ps(y + i, k, s);
  }
}
TPULLM_AVX512_END
#endif

TPULLM_EW_CLONES_X86(softmax_rows,
                     (const float* x, float* y, std::int64_t N, std::int64_t b, std::int64_t e),
                     (x, y, N, b, e))
TPULLM_EW_CLONES_X86(silu,
                     (const float* x, const float* g, float* y, std::int64_t b, std::int64_t e),
                     (x, g, y, b, e))
TPULLM_EW_CLONES(binary,
                 (const float* a, const float* bv, float* y, std::int64_t N, bool broadcast,
                  bool mul, std::int64_t rb, std::int64_t re),
                 (a, bv, y, N, broadcast, mul, rb, re))
#undef TPULLM_EW_CLONES
#undef TPULLM_EW_CLONES_X86

} // namespace detail

/// Row softmax: y[m, :] = exp(x[m, :] - max) / sum. x, y: [M, N] row-major (y may alias x).
inline void softmax_rows(std::span<const float> x, std::span<float> y, const RowsShape& shape,
                         const CoreSplit& split = {}) {
  detail::ew_check(shape, x.size(), "softmax_rows", "x");
  detail::ew_check(shape, y.size(), "softmax_rows", "y");
  const Isa isa = active_isa();
  parallel_for(split, shape.rows, 1, [&](std::int64_t b, std::int64_t e) {
#if TPULLM_X86
    if (vector_isa(isa) == Isa::avx512) {
      detail::softmax_rows_avx512_v(x.data(), y.data(), shape.cols, b, e);
      return;
    }
#endif
    detail::softmax_rows_isa(isa, x.data(), y.data(), shape.cols, b, e);
  });
}

/// In-place row softmax of x: [M, N] row-major.
inline void softmax_rows(std::span<float> x, const RowsShape& shape, const CoreSplit& split = {}) {
  softmax_rows(std::span<const float>(x), x, shape, split);
}

/// y = x * sigmoid(x). x, y: [n] (any shape flattened; y may alias x).
inline void silu(std::span<const float> x, std::span<float> y, const CoreSplit& split = {}) {
  if (y.size() < x.size())
    throw_error(ErrorKind::internal, "",
                "silu: y has " + std::to_string(y.size()) + " elements, x has " +
                    std::to_string(x.size()));
  const Isa isa = active_isa();
  parallel_for(split, static_cast<std::int64_t>(x.size()), 64, [&](std::int64_t b, std::int64_t e) {
#if TPULLM_X86
    if (vector_isa(isa) == Isa::avx512) {
      detail::silu_avx512_v(x.data(), nullptr, y.data(), b, e);
      return;
    }
#endif
    detail::silu_isa(isa, x.data(), static_cast<const float*>(nullptr), y.data(), b, e);
  });
}

/// SwiGLU gate: y = silu(gate) * up. gate, up, y: [n] flattened (y may alias gate or up).
inline void silu_mul(std::span<const float> gate, std::span<const float> up, std::span<float> y,
                     const CoreSplit& split = {}) {
  if (up.size() < gate.size() || y.size() < gate.size())
    throw_error(ErrorKind::internal, "",
                "silu_mul: gate " + std::to_string(gate.size()) + ", up " +
                    std::to_string(up.size()) + ", y " + std::to_string(y.size()) +
                    " elements differ");
  const Isa isa = active_isa();
  parallel_for(split, static_cast<std::int64_t>(gate.size()), 64,
               [&](std::int64_t b, std::int64_t e) {
#if TPULLM_X86
                 if (vector_isa(isa) == Isa::avx512) {
                   detail::silu_avx512_v(gate.data(), up.data(), y.data(), b, e);
                   return;
                 }
#endif
                 detail::silu_isa(isa, gate.data(), up.data(), y.data(), b, e);
               });
}

/// y = a (op) b. a, y: [M, N] row-major (y may alias a or b); b: [M, N], or [N] broadcast over
/// rows when b.size() == N != M*N.
inline void binary(BinaryOp op, std::span<const float> a, std::span<const float> b,
                   std::span<float> y, const RowsShape& shape, const CoreSplit& split = {}) {
  detail::ew_check(shape, a.size(), "binary", "a");
  detail::ew_check(shape, y.size(), "binary", "y");
  const bool full = b.size() >= static_cast<std::size_t>(shape.size());
  const bool bcast = !full && b.size() == static_cast<std::size_t>(shape.cols);
  if (!full && !bcast)
    throw_error(ErrorKind::internal, "",
                "binary: b has " + std::to_string(b.size()) + " elements; expected [M, N] = " +
                    std::to_string(shape.size()) + " or [N] = " + std::to_string(shape.cols));
  bool mul = false;
  switch (op) {
  case BinaryOp::add:
    mul = false;
    break;
  case BinaryOp::mul:
    mul = true;
    break;
  }
  const Isa isa = active_isa();
  parallel_for(split, shape.rows, 1, [&](std::int64_t rb, std::int64_t re) {
    detail::binary_isa(isa, a.data(), b.data(), y.data(), shape.cols, bcast, mul, rb, re);
  });
}

/// y = a + b (b: [M, N] or [N] broadcast over rows).
inline void add(std::span<const float> a, std::span<const float> b, std::span<float> y,
                const RowsShape& shape, const CoreSplit& split = {}) {
  binary(BinaryOp::add, a, b, y, shape, split);
}

/// y = a * b (b: [M, N] or [N] broadcast over rows).
inline void mul(std::span<const float> a, std::span<const float> b, std::span<float> y,
                const RowsShape& shape, const CoreSplit& split = {}) {
  binary(BinaryOp::mul, a, b, y, shape, split);
}

} // namespace tpullm::kernels
