#pragma once
/// Digit decomposition of x (three int8 digits per element, or one) for the integer-dot GEMVs
/// (AVX-512 VNNI; AVX2 with one digit).

#include <cfloat>
#include <limits>

#include "tpullm/kernels/detail/matmul_common.hpp"

namespace tpullm::kernels::detail {

/// x of a GEMV split into int8 digits per element for the VNNI path. Three digits (exact):
/// x ~= s1 * (h + l / 256 + t / 65536), s1 = max|x| / 127 over each weight group; the residual is
/// <= 1.5 * s1 / 65536 (about 1.2e-7 of the group's largest |x|, i.e. f32 rounding level). One
/// digit (XPrecision::int8): x ~= s1 * h, h = round(x / s1), the residual <= s1 / 2 (only h is
/// stored, a third of the bytes; the sums of l and t are zero).
struct XDigits {
  std::vector<std::int8_t> d;  ///< [M][nd][Kv] digits h (, l, t) (Kv = view rows)
  std::vector<float> s1;       ///< [M][Gv] scale of digit h per group
  std::vector<std::int32_t> S; ///< [M][Gv][3] sum of each digit over the group
  std::int64_t Kv = 0, Gv = 0, M = 0, seg = 0;
  int nd = 3; ///< digits: 3 (exact) or 1 (x rounded to int8 per group)
};

/// x's group sum as its digits represent it: s1 * (S_h + S_l / 256 + S_t / 65536).
inline float vnni_digit_xsum(float s1, const std::int32_t* S) {
  return s1 * (static_cast<float>(S[0]) + static_cast<float>(S[1]) * (1.0f / 256.0f) +
               static_cast<float>(S[2]) * (1.0f / 65536.0f));
}

/// The digits XDigits holds for precision `p`.
inline int x_digit_count(XPrecision p) {
  return p == XPrecision::int8 ? 1 : 3;
}

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

/// Builds XDigits (`nd` digits: 3 or 1) for rows [0, M) of x (row stride ldx) over Kv columns
/// grouped by `seg`; columns in [Kx, Kv) are taken as zero (padding rows of the weights).
/// Storage is reused.
TPULLM_TARGET_AVX512 inline void make_x_digits(const float* x, std::int64_t ldx, std::int64_t M,
                                               std::int64_t Kv, std::int64_t seg, XDigits& xd,
                                               std::int64_t Kx = -1, int nd = 3) {
  if (Kx < 0)
    Kx = Kv;
  xd.nd = nd == 1 ? 1 : 3;
  const bool one = xd.nd == 1;
  xd.Kv = Kv;
  xd.M = M;
  xd.seg = seg;
  xd.Gv = (Kv + seg - 1) / seg;
  xd.d.resize(static_cast<std::size_t>(M * xd.nd * Kv));
  xd.s1.resize(static_cast<std::size_t>(M * xd.Gv));
  xd.S.resize(static_cast<std::size_t>(M * xd.Gv * 3));
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (std::int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * ldx;
    std::int8_t* dh = xd.d.data() + (m * xd.nd + 0) * Kv;
    std::int8_t* dl = one ? nullptr : xd.d.data() + (m * 3 + 1) * Kv; // (digits l and t: nd = 3)
    std::int8_t* dt = one ? nullptr : xd.d.data() + (m * 3 + 2) * Kv;
    for (std::int64_t g = 0; g < xd.Gv; ++g) {
      const std::int64_t ks = g * seg, ke = std::min(Kv, ks + seg), kx = std::min(Kx, ke);
      auto mask = [&](std::int64_t k, std::int64_t end) {
        const std::int64_t n = std::clamp<std::int64_t>(end - k, 0, 16);
        return static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1u);
      };
      __m512 mxv = _mm512_setzero_ps();
      __mmask16 bad = 0; // lanes that held a NaN or an infinity
      for (std::int64_t k = ks; k < kx; k += 16) {
        const __m512 a = _mm512_and_ps(_mm512_maskz_loadu_ps(mask(k, kx), xr + k), absmask);
        bad |= _mm512_cmp_ps_mask(a, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
        mxv = _mm512_max_ps(mxv, a);
      }
      const float mx = _mm512_reduce_max_ps(mxv);
      std::int32_t* S = xd.S.data() + (m * xd.Gv + g) * 3;
      if (bad != 0 || !(mx > 0)) { // a NaN / infinite x: a NaN scale, so the outputs are NaN;
        // an all-zero group: scale 0
        xd.s1[static_cast<std::size_t>(m * xd.Gv + g)] =
            bad != 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
        S[0] = S[1] = S[2] = 0;
        std::memset(dh + ks, 0, static_cast<std::size_t>(ke - ks));
        if (!one) {
          std::memset(dl + ks, 0, static_cast<std::size_t>(ke - ks));
          std::memset(dt + ks, 0, static_cast<std::size_t>(ke - ks));
        }
        continue;
      }
      const float s1 = mx / 127.0f, inv1 = 127.0f / mx;
      const float s2 = s1 * (1.0f / 256.0f), inv2 = inv1 * 256.0f, inv3 = inv2 * 256.0f;
      xd.s1[static_cast<std::size_t>(m * xd.Gv + g)] = s1;
      const __m512 vs1 = _mm512_set1_ps(s1), vs2 = _mm512_set1_ps(s2);
      const __m512 vi1 = _mm512_set1_ps(inv1), vi2 = _mm512_set1_ps(inv2),
                   vi3 = _mm512_set1_ps(inv3);
      __m512i sh = _mm512_setzero_si512(), sl = sh, st = sh;
      for (std::int64_t k = ks; k < ke; k += 16) {
        const __mmask16 mk = mask(k, ke);
        const __m512 v = _mm512_maskz_loadu_ps(mask(k, kx), xr + k);
        // round to nearest even (MXCSR default), clamp to [-127, 127]
        const __m512i h =
            _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(v, vi1))));
        if (one) {
          _mm_mask_storeu_epi8(dh + k, mk, _mm512_cvtepi32_epi8(h));
          sh = _mm512_add_epi32(sh, h);
          continue;
        }
        const __m512 r1 = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(h), vs1, v);
        const __m512i l =
            _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(r1, vi2))));
        const __m512 r2 = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(l), vs2, r1);
        const __m512i t =
            _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(r2, vi3))));
        _mm_mask_storeu_epi8(dh + k, mk, _mm512_cvtepi32_epi8(h));
        _mm_mask_storeu_epi8(dl + k, mk, _mm512_cvtepi32_epi8(l));
        _mm_mask_storeu_epi8(dt + k, mk, _mm512_cvtepi32_epi8(t));
        sh = _mm512_add_epi32(sh, h);
        sl = _mm512_add_epi32(sl, l);
        st = _mm512_add_epi32(st, t);
      }
      S[0] = _mm512_reduce_add_epi32(sh);
      S[1] = _mm512_reduce_add_epi32(sl);
      S[2] = _mm512_reduce_add_epi32(st);
    }
  }
}

/// make_x_digits for one digit (XPrecision::int8) at the AVX2 level, for the AVX2 int8 GEMV
/// (matmul_gemv_int8_avx2.hpp): the same digits, scales and sums bit for bit (the same f32
/// operations: s1 = max|x| / 127, h = rne(x * (127 / max|x|)) clamped to [-127, 127]).
TPULLM_TARGET_AVX2 inline void make_x_digit1_avx2(const float* x, std::int64_t ldx, std::int64_t M,
                                                  std::int64_t Kv, std::int64_t seg, XDigits& xd,
                                                  std::int64_t Kx = -1) {
  if (Kx < 0)
    Kx = Kv;
  xd.nd = 1;
  xd.Kv = Kv;
  xd.M = M;
  xd.seg = seg;
  xd.Gv = (Kv + seg - 1) / seg;
  xd.d.resize(static_cast<std::size_t>(M * Kv));
  xd.s1.resize(static_cast<std::size_t>(M * xd.Gv));
  xd.S.resize(static_cast<std::size_t>(M * xd.Gv * 3));
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  for (std::int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * ldx;
    std::int8_t* dh = xd.d.data() + m * Kv;
    for (std::int64_t g = 0; g < xd.Gv; ++g) {
      const std::int64_t ks = g * seg, ke = std::min(Kv, ks + seg), kx = std::min(Kx, ke);
      __m256 mxv = _mm256_setzero_ps();
      int bad = 0; // lanes that held a NaN or an infinity
      std::int64_t k = ks;
      for (; k + 8 <= kx; k += 8) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(xr + k), absmask);
        bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
        mxv = _mm256_max_ps(mxv, a);
      }
      alignas(32) float mv[8];
      _mm256_store_ps(mv, mxv);
      float mx = 0.0f;
      for (float v : mv)
        mx = std::max(mx, v);
      for (; k < kx; ++k) {
        bad |= !std::isfinite(xr[k]);
        mx = std::max(mx, std::abs(xr[k]));
      }
      std::int32_t* S = xd.S.data() + (m * xd.Gv + g) * 3;
      S[0] = S[1] = S[2] = 0;
      if (bad != 0 || !(mx > 0)) { // a NaN / infinite x: a NaN scale, so the outputs are NaN;
        // an all-zero group: scale 0
        xd.s1[static_cast<std::size_t>(m * xd.Gv + g)] =
            bad != 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
        std::memset(dh + ks, 0, static_cast<std::size_t>(ke - ks));
        continue;
      }
      const float inv1 = 127.0f / mx;
      xd.s1[static_cast<std::size_t>(m * xd.Gv + g)] = mx / 127.0f;
      const __m256 vi1 = _mm256_set1_ps(inv1);
      __m256i sh = _mm256_setzero_si256();
      k = ks;
      for (; k + 8 <= kx; k += 8) {
        // round to nearest even (MXCSR default), clamp to [-127, 127]
        const __m256i h = _mm256_min_epi32(
            hi,
            _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xr + k), vi1))));
        sh = _mm256_add_epi32(sh, h);
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(h, h), _mm256_setzero_si256());
        const std::int32_t b0 = _mm256_extract_epi32(b, 0), b1 = _mm256_extract_epi32(b, 4);
        std::memcpy(dh + k, &b0, 4);
        std::memcpy(dh + k + 4, &b1, 4);
      }
      alignas(32) std::int32_t sv[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(sv), sh);
      std::int32_t sum = 0;
      for (std::int32_t v : sv)
        sum += v;
      for (; k < ke; ++k) { // the tail, and padding rows (x = 0)
        const float v = k < kx ? xr[k] * inv1 : 0.0f;
        const auto h = static_cast<std::int32_t>(std::clamp(std::nearbyint(v), -127.0f, 127.0f));
        dh[k] = static_cast<std::int8_t>(h);
        sum += h;
      }
      S[0] = sum;
    }
  }
}

/// Digits of x for the GEMV kernels of the active ISA: make_x_digits on AVX-512, else
/// make_x_digit1_avx2 (one digit only: the AVX2 kernels take XPrecision::int8 alone).
inline void build_x_digits(const float* x, std::int64_t ldx, std::int64_t M, std::int64_t Kv,
                           std::int64_t seg, XDigits& xd, std::int64_t Kx, int nd) {
  if (vector_isa(active_isa()) == Isa::avx512)
    make_x_digits(x, ldx, M, Kv, seg, xd, Kx, nd);
  else
    make_x_digit1_avx2(x, ldx, M, Kv, seg, xd, Kx);
}

#pragma GCC diagnostic pop
#endif

} // namespace tpullm::kernels::detail
