#pragma once
/// Digit decomposition of x (three int8 digits per element) for the AVX-512 VNNI GEMV.

#include "tpullm/kernels/detail/matmul_common.hpp"

namespace tpullm::kernels::detail {

/// x of a GEMV split into three int8 digits per element for the VNNI path:
/// x ~= s1 * (h + l / 256 + t / 65536), s1 = max|x| / 127 over each weight group; the residual is
/// <= 1.5 * s1 / 65536 (about 1.2e-7 of the group's largest |x|, i.e. f32 rounding level).
struct XDigits {
  std::vector<std::int8_t> d;  ///< [M][3][Kv] digits h, l, t (Kv = view rows)
  std::vector<float> s1;       ///< [M][Gv] scale of digit h per group
  std::vector<std::int32_t> S; ///< [M][Gv][3] sum of each digit over the group
  std::int64_t Kv = 0, Gv = 0;
};

/// Builds XDigits for rows [0, M) of x over view rows [k0, k1) grouped by `seg` rows.
__attribute__((always_inline)) inline void make_x_digits_body(const float* x, std::int64_t ldx,
                                                              std::int64_t M, std::int64_t Kv,
                                                              std::int64_t seg, XDigits& xd) {
  xd.Kv = Kv;
  xd.Gv = (Kv + seg - 1) / seg;
  xd.d.assign(static_cast<std::size_t>(M * 3 * Kv), 0);
  xd.s1.assign(static_cast<std::size_t>(M * xd.Gv), 0.0f);
  xd.S.assign(static_cast<std::size_t>(M * xd.Gv * 3), 0);
  constexpr float kRound = 12582912.0f; // 1.5 * 2^23: (v + kRound) - kRound rounds to nearest
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t g = 0; g < xd.Gv; ++g) {
      const std::int64_t ks = g * seg, ke = std::min(Kv, ks + seg);
      const float* xr = x + m * ldx;
      float mx = 0;
      for (std::int64_t k = ks; k < ke; ++k)
        mx = mx > std::abs(xr[k]) ? mx : std::abs(xr[k]);
      if (!(mx > 0) || !std::isfinite(mx))
        continue; // all-zero group (NaN/inf x is not supported by this path)
      const float s1 = mx / 127.0f, inv1 = 127.0f / mx;
      const float s2 = s1 * (1.0f / 256.0f), inv2 = inv1 * 256.0f;
      const float inv3 = inv2 * 256.0f;
      xd.s1[static_cast<std::size_t>(m * xd.Gv + g)] = s1;
      std::int8_t* dh = xd.d.data() + (m * 3 + 0) * Kv;
      std::int8_t* dl = xd.d.data() + (m * 3 + 1) * Kv;
      std::int8_t* dt = xd.d.data() + (m * 3 + 2) * Kv;
      std::int32_t sh = 0, sl = 0, st = 0;
      for (std::int64_t k = ks; k < ke; ++k) {
        const float v = xr[k];
        const float h = std::clamp((v * inv1 + kRound) - kRound, -127.0f, 127.0f);
        const float r1 = std::fma(-h, s1, v);
        const float l = std::clamp((r1 * inv2 + kRound) - kRound, -127.0f, 127.0f);
        const float r2 = std::fma(-l, s2, r1);
        const float t = std::clamp((r2 * inv3 + kRound) - kRound, -127.0f, 127.0f);
        dh[k] = static_cast<std::int8_t>(h);
        dl[k] = static_cast<std::int8_t>(l);
        dt[k] = static_cast<std::int8_t>(t);
        sh += static_cast<std::int32_t>(h);
        sl += static_cast<std::int32_t>(l);
        st += static_cast<std::int32_t>(t);
      }
      std::int32_t* S = xd.S.data() + (m * xd.Gv + g) * 3;
      S[0] = sh;
      S[1] = sl;
      S[2] = st;
    }
}

TPULLM_TARGET_AVX512 inline void make_x_digits(const float* x, std::int64_t ldx, std::int64_t M,
                                               std::int64_t Kv, std::int64_t seg, XDigits& xd) {
  make_x_digits_body(x, ldx, M, Kv, seg, xd);
}

} // namespace tpullm::kernels::detail
