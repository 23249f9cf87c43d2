#pragma once
/// The portable path's vectors: xsimd::batch<float> of the compiler's baseline architecture
/// (SSE2 on x86-64 without -m flags, NEON on AArch64), or a one-lane stand-in with the same
/// operations where xsimd has no architecture, so the portable kernels are written once and are
/// vectorized on every CPU xsimd knows. Only the portable path uses these: the AVX2 / AVX-512
/// paths keep their intrinsics behind the run-time dispatch.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include <xsimd/xsimd.hpp>

namespace tpullm::kernels::detail {

#if XSIMD_WITH_SSE2 || XSIMD_WITH_NEON || XSIMD_WITH_NEON64
/// True when the portable path is vectorized (xsimd has an architecture for this target).
inline constexpr bool kPortableSimd = true;
/// f32 vector of the portable path.
using PVec = xsimd::batch<float>;
/// int32 vector of the same width.
using PIVec = xsimd::batch<std::int32_t>;

inline PVec pv_load(const float* p) {
  return PVec::load_unaligned(p);
}
inline void pv_store(float* p, PVec v) {
  v.store_unaligned(p);
}
inline PVec pv_fma(PVec a, PVec b, PVec c) {
  return xsimd::fma(a, b, c);
}
inline PVec pv_max(PVec a, PVec b) {
  return xsimd::max(a, b);
}
inline PVec pv_min(PVec a, PVec b) {
  return xsimd::min(a, b);
}
inline float pv_sum(PVec v) {
  return xsimd::hadd(v);
}
/// 2^n for integral-valued n in [-127, 127] (n = -127 gives +0).
inline PVec pv_pow2i(PVec n) {
  const PIVec e = (xsimd::to_int(n) + PIVec(127)) << 23;
  return xsimd::bitwise_cast<PVec>(e);
}
#else
inline constexpr bool kPortableSimd = false;
/// One-lane stand-in for xsimd::batch<float> on architectures xsimd does not know.
struct PVec {
  static constexpr std::size_t size = 1;
  float v = 0.f;
  PVec() = default;
  PVec(float x) : v(x) {} // NOLINT: broadcast, as xsimd::batch
  friend PVec operator+(PVec a, PVec b) { return a.v + b.v; }
  friend PVec operator-(PVec a, PVec b) { return a.v - b.v; }
  friend PVec operator*(PVec a, PVec b) { return a.v * b.v; }
  friend PVec operator/(PVec a, PVec b) { return a.v / b.v; }
  PVec& operator+=(PVec b) {
    v += b.v;
    return *this;
  }
  PVec& operator*=(PVec b) {
    v *= b.v;
    return *this;
  }
};
inline PVec pv_load(const float* p) {
  return *p;
}
inline void pv_store(float* p, PVec v) {
  *p = v.v;
}
inline PVec pv_fma(PVec a, PVec b, PVec c) {
  return a.v * b.v + c.v;
}
inline PVec pv_max(PVec a, PVec b) {
  return a.v > b.v ? a : b;
}
inline PVec pv_min(PVec a, PVec b) {
  return a.v < b.v ? a : b;
}
inline float pv_sum(PVec v) {
  return v.v;
}
inline PVec pv_pow2i(PVec n) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(static_cast<int>(n.v) + 127) << 23);
}
#endif

/// Lanes of PVec.
inline constexpr std::int64_t kPW = static_cast<std::int64_t>(PVec::size);

/// exp2(x) on the portable vector, the polynomial of vec_math.hpp's exp2_approx (rel. err < 2e-7
/// on [-126, 126]); x is clamped to [-127, 126] and results below 2^-126 flush to 0, so -inf
/// gives 0.
inline PVec pv_exp2(PVec x) {
  x = pv_min(pv_max(x, PVec(-127.f)), PVec(126.f));
  // nearest integer without a rounding instruction: (x + 1.5*2^23) - 1.5*2^23
  const PVec n = (x + PVec(12582912.0f)) - PVec(12582912.0f);
  const PVec f = x - n;
  PVec p = PVec(1.525273380405984e-05f);
  p = pv_fma(p, f, PVec(1.5403530393381606e-4f));
  p = pv_fma(p, f, PVec(1.3333558146428443e-3f));
  p = pv_fma(p, f, PVec(9.6181291076284772e-3f));
  p = pv_fma(p, f, PVec(5.5504108664821580e-2f));
  p = pv_fma(p, f, PVec(2.4022650695910071e-1f));
  p = pv_fma(p, f, PVec(6.9314718055994531e-1f));
  p = pv_fma(p, f, PVec(1.0f));
  return p * pv_pow2i(n);
}

} // namespace tpullm::kernels::detail
