#pragma once
/// AVX2 integer-dot GEMV of the linear over integer weights (int8 / int8_asym / int8_min / int4 /
/// int6)
/// with x rounded to one int8 digit per weight group (XPrecision::int8, matmul_x_digits.hpp):
/// the one-digit AVX-512 VNNI kernels (matmul_gemv_vnni.hpp) at ymm width, 8 columns per ymm.
///
/// Per weight group each column gets the exact int32 sum A = sum_k u[k] h[k] (u the unsigned
/// code VPDPBUSD takes there: int8 q + 128, the other formats' codes), then the same f32 steps:
/// t += (scale * s1) * (A - z * S) (z: 128 for int8, 8 for int4_sym, the zero point, 0 for the
/// scale-and-min formats, which then subtract min * s1 * S), with S = sum_k h[k]. The results are
/// those of the VNNI kernels bit for bit.
///
/// Two ways to the int32 sums:
///  - AVX-VNNI (cpu_features().avx_vnni): VEX VPDPBUSD of the codes by the digits, as on AVX-512.
///  - VPMADDUBSW + VPMADDWD (any AVX2 CPU). VPMADDUBSW sums two u8 x s8 products into an int16
///    with saturation, so the operands are kept where no pair can saturate (|h| <= 127):
///     * 4-bit codes u in [0, 15]: a pair is at most 2 * 15 * 127 = 3810, so eight VPMADDUBSW
///       results (32 rows: 4 octets, low and high nibbles) add up in int16 (<= 30480 < 32767)
///       before one VPMADDWD by ones widens them to int32.
///     * 6-bit codes u in [0, 63]: a pair is at most 2 * 63 * 127 = 16002, so two VPMADDUBSW
///       results (8 rows) add up in int16 before VPMADDWD.
///     * byte codes: the signed code q (int8: as stored; int8_asym / int8_min: u - 128) as |q|
///       (<= 128, unsigned) times sign(q) applied to the digit (VPSIGNB; the digit is never
///       -128, so the negation is exact): a pair is at most 2 * 128 * 127 = 32512 < 32767; each
///       VPMADDUBSW result is widened by VPMADDWD at once. Then A = sum q h + 128 S.

#include "tpullm/kernels/detail/avx_vnni.hpp"
#include "tpullm/kernels/detail/matmul_avx2_common.hpp"
#include "tpullm/kernels/detail/matmul_x_digits.hpp"

namespace tpullm::kernels::detail {

/// True when the AVX2 int8-activation GEMV takes VEX VPDPBUSD (AVX-VNNI, not disabled).
inline bool use_avx_vnni_gemv() {
  return cpu_features().avx_vnni && !avx_vnni_gemv_disabled();
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// Broadcast of the 4 digits at p (one VPBROADCASTD).
TPULLM_TARGET_AVX2 inline __m256i bcast4_avx2(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/// Ends one weight group for rows m0..m0+R-1 and the JN column octets j0..j0+JN-1 of panel p:
/// A[r][j] (exact int32 sums of the unsigned codes by the digits) -> t[r][j] as the VNNI
/// kernels do it (vnni_group_sum<1>, vnni_sub_mins).
template <WeightFormat F, int R, int JN>
TPULLM_TARGET_AVX2 inline __attribute__((always_inline)) void
int8_group_end_avx2(const PackedWeights& w, const XDigits& xd, std::int64_t m0, std::int64_t p,
                    std::int64_t g, std::int64_t gi, int j0, __m256i (*A)[JN], __m256 (*t)[JN]) {
  __m256 s[4], mn[4]; // only the octets j0..j0+JN-1 are formed and read
  group_scale_avx2(w, p, g, s, j0, JN);
  if constexpr (has_mins(F))
    group_min_avx2(w, p, g, mn, j0, JN);
  __m256 z[JN];
#pragma GCC unroll 4
  for (int j = 0; j < JN; ++j) {
    if constexpr (F == WeightFormat::int8)
      z[j] = _mm256_set1_ps(128.0f);
    else if constexpr (fixed_zero(F) != 0)
      z[j] = _mm256_set1_ps(static_cast<float>(fixed_zero(F)));
    else if constexpr (has_zeros(F))
      z[j] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(panel_zeros(w, p, g) + 8 * (j0 + j)))));
    else
      z[j] = _mm256_setzero_ps();
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const std::int32_t* S = xd.S.data() + ((m0 + r) * xd.Gv + gi) * 3;
    const float s1 = xd.s1[static_cast<std::size_t>((m0 + r) * xd.Gv + gi)];
    const __m256 vs1 = _mm256_set1_ps(s1), vS = _mm256_set1_ps(static_cast<float>(S[0]));
#pragma GCC unroll 4
    for (int j = 0; j < JN; ++j) {
      const __m256 f = _mm256_fnmadd_ps(z[j], vS, _mm256_cvtepi32_ps(A[r][j]));
      t[r][j] = _mm256_fmadd_ps(_mm256_mul_ps(s[j0 + j], vs1), f, t[r][j]);
    }
    if constexpr (has_mins(F)) {
      const __m256 xs = _mm256_set1_ps(vnni_digit_xsum(s1, S));
#pragma GCC unroll 4
      for (int j = 0; j < JN; ++j)
        t[r][j] = _mm256_fnmadd_ps(mn[j0 + j], xs, t[r][j]);
    }
  }
}

/// int6: the four quads (rows 4q..4q+3 of the 16-row block at r) of column octet j as unsigned
/// codes u in [0, 63] (packed_weights.hpp; the AVX-512 load_quads6 at ymm width).
TPULLM_TARGET_AVX2 inline __attribute__((always_inline)) void
load_quads6_avx2(const std::uint8_t* r, int j, __m256i (&q)[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  const __m256i o0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32 * j));
  const __m256i o1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 128 + 32 * j));
  const __m256i hb = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 256 + 32 * j));
  q[0] = _mm256_or_si256(_mm256_and_si256(o0, m4), _mm256_and_si256(_mm256_slli_epi32(hb, 4), m2));
  q[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(o0, 4), m4),
                         _mm256_and_si256(_mm256_slli_epi32(hb, 2), m2));
  q[2] = _mm256_or_si256(_mm256_and_si256(o1, m4), _mm256_and_si256(hb, m2));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(o1, 4), m4),
                         _mm256_and_si256(_mm256_srli_epi32(hb, 2), m2));
}

/// y[m0 + r][column octets j0..j0+JN-1 of panel p] = t[r] (+ bias) (+ y when accumulating).
template <int R, int JN>
TPULLM_TARGET_AVX2 inline void int8_store_avx2(const LinearArgs& a, std::int64_t m0, std::int64_t p,
                                               int j0, __m256 (*t)[JN]) {
  const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
  const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, a.v.w->N - p * kPanelCols));
  for (int j = 0; j < JN; ++j) {
    const int jj = j0 + j;
    if (8 * jj >= nc)
      break;
    const __m256i mk = col_mask_avx2(nc, jj);
    for (int r = 0; r < R; ++r) {
      float* yr = a.y + (m0 + r) * a.ldy + c0 + 8 * jj;
      __m256 v = t[r][j];
      if (a.bias)
        v = _mm256_add_ps(v, _mm256_maskload_ps(a.bias + c0 + 8 * jj, mk));
      if (a.accumulate)
        v = _mm256_add_ps(v, _mm256_maskload_ps(yr, mk));
      _mm256_maskstore_ps(yr, mk, v);
    }
  }
}

/// AVX-VNNI kernel: rows m0..m0+R-1, column octets j0..j0+JN-1 of panel p, over the view's K.
/// Accumulators: R x JN int32 and R x JN f32 ymm.
template <WeightFormat F, int R, int JN>
TPULLM_TARGET_AVX_VNNI void gemv_int8_avxvnni(const LinearArgs& a, const XDigits& xd,
                                              std::int64_t m0, std::int64_t p, int j0) {
  constexpr int RG = static_cast<int>(row_group(F));
  const PackedWeights& w = *a.v.w;
  __m256 t[R][JN];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < JN; ++j)
      t[r][j] = _mm256_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  const __m256i m4 = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const std::int8_t* xr[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    xr[r] = xd.d.data() + (m0 + r) * xd.Kv - a.v.k0;
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m256i acc[R][JN];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < JN; ++j)
        acc[r][j] = _mm256_setzero_si256();
    if constexpr (is_six_format(F)) {
      const std::uint8_t* row = panel_row(w, p, ks);
      for (std::int64_t k = ks; k < ke; k += 16, row += 384) {
        for (int b = 0; b < 384; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + b, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < JN; ++j) {
          __m256i q[4];
          load_quads6_avx2(row, j0 + j, q);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i)
              dpbusd_vex(acc[r][j], q[i], bcast4_avx2(xr[r] + k + 4 * i));
        }
      }
      int8_group_end_avx2<F, R, JN>(w, xd, m0, p, ks / w.group_rows(), gi, j0, acc, t);
      continue;
    }
    const std::uint8_t* row = panel_row(w, p, ks) + 32 * j0;
    for (std::int64_t k = ks; k < ke; k += RG, row += 128) {
      _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf, _MM_HINT_T0);
      if constexpr (JN > 2)
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + 64, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int j = 0; j < JN; ++j) {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(row + 32 * j));
        if constexpr (is_byte_format(F)) {
          const __m256i u = F == WeightFormat::int8 ? _mm256_xor_si256(v, flip) : v;
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r)
            dpbusd_vex(acc[r][j], u, bcast4_avx2(xr[r] + k));
        } else {
          const __m256i ul = _mm256_and_si256(v, m4);
          const __m256i uh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            dpbusd_vex(acc[r][j], ul, bcast4_avx2(xr[r] + k));
            dpbusd_vex(acc[r][j], uh, bcast4_avx2(xr[r] + k + 4));
          }
        }
      }
    }
    int8_group_end_avx2<F, R, JN>(w, xd, m0, p, ks / w.group_rows(), gi, j0, acc, t);
  }
  int8_store_avx2<R, JN>(a, m0, p, j0, t);
}

/// VPMADDUBSW kernel (no AVX-VNNI): rows m0..m0+R-1, column octets j0..j0+JN-1 of panel p, over
/// the view's K; the int16 / int32 steps of the file comment, so the int32 sums equal the
/// AVX-VNNI kernel's.
template <WeightFormat F, int R, int JN>
TPULLM_TARGET_AVX2 void gemv_int8_maddubs(const LinearArgs& a, const XDigits& xd, std::int64_t m0,
                                          std::int64_t p, int j0) {
  const PackedWeights& w = *a.v.w;
  __m256 t[R][JN];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < JN; ++j)
      t[r][j] = _mm256_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  const __m256i m4 = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  const std::int8_t* xr[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    xr[r] = xd.d.data() + (m0 + r) * xd.Kv - a.v.k0;
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m256i acc[R][JN];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < JN; ++j)
        acc[r][j] = _mm256_setzero_si256();
    const std::uint8_t* row = panel_row(w, p, ks) + 32 * j0;
    if constexpr (is_six_format(F)) {
      // u <= 63: a VPMADDUBSW pair is at most 2 * 63 * 127 = 16002, two quads' sum 32004 < 32767
      const std::uint8_t* blk = panel_row(w, p, ks);
      for (std::int64_t k = ks; k < ke; k += 16, blk += 384) {
        for (int b = 0; b < 384; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk) + kGemvPf + b, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < JN; ++j) {
          __m256i q[4];
          load_quads6_avx2(blk, j0 + j, q);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
            for (int i = 0; i < 4; i += 2) {
              const __m256i s16 = _mm256_add_epi16(
                  _mm256_maddubs_epi16(q[i], bcast4_avx2(xr[r] + k + 4 * i)),
                  _mm256_maddubs_epi16(q[i + 1], bcast4_avx2(xr[r] + k + 4 * i + 4)));
              acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(s16, ones));
            }
        }
      }
    } else if constexpr (is_byte_format(F)) {
      for (std::int64_t k = ks; k < ke; k += 4, row += 128) {
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf, _MM_HINT_T0);
        if constexpr (JN > 2)
          _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + 64, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < JN; ++j) {
          const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(row + 32 * j));
          const __m256i q = F == WeightFormat::int8 ? v : _mm256_xor_si256(v, flip);
          const __m256i uq = _mm256_abs_epi8(q); // |q| <= 128 as an unsigned byte
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            const __m256i hs = _mm256_sign_epi8(bcast4_avx2(xr[r] + k), q); // h * sign(q)
            acc[r][j] =
                _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(_mm256_maddubs_epi16(uq, hs), ones));
          }
        }
      }
      // sum q h -> sum u h (u = q + 128): the sums the VNNI kernels finish from
      for (int r = 0; r < R; ++r) {
        const std::int32_t S0 = xd.S[static_cast<std::size_t>(((m0 + r) * xd.Gv + gi) * 3)];
        const __m256i c = _mm256_set1_epi32(128 * S0);
#pragma GCC unroll 4
        for (int j = 0; j < JN; ++j)
          acc[r][j] = _mm256_add_epi32(acc[r][j], c);
      }
    } else {
      // chunks of up to 4 octets (32 rows) add in int16 before one VPMADDWD
      for (std::int64_t kc = ks; kc < ke; kc += 32, row += 512) {
        const int oct = static_cast<int>(std::min<std::int64_t>(32, ke - kc) / 8);
        __m256i s16[R][JN];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
          for (int j = 0; j < JN; ++j)
            s16[r][j] = _mm256_setzero_si256();
        for (int o = 0; o < oct; ++o) {
          const std::uint8_t* ro = row + 128 * o;
          const std::int64_t k = kc + 8 * o;
          _mm_prefetch(reinterpret_cast<const char*>(ro) + kGemvPf, _MM_HINT_T0);
          if constexpr (JN > 2)
            _mm_prefetch(reinterpret_cast<const char*>(ro) + kGemvPf + 64, _MM_HINT_T0);
#pragma GCC unroll 4
          for (int j = 0; j < JN; ++j) {
            const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(ro + 32 * j));
            const __m256i ul = _mm256_and_si256(v, m4);
            const __m256i uh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r)
              s16[r][j] = _mm256_add_epi16(
                  s16[r][j],
                  _mm256_add_epi16(_mm256_maddubs_epi16(ul, bcast4_avx2(xr[r] + k)),
                                   _mm256_maddubs_epi16(uh, bcast4_avx2(xr[r] + k + 4))));
          }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
          for (int j = 0; j < JN; ++j)
            acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(s16[r][j], ones));
      }
    }
    int8_group_end_avx2<F, R, JN>(w, xd, m0, p, ks / w.group_rows(), gi, j0, acc, t);
  }
  int8_store_avx2<R, JN>(a, m0, p, j0, t);
}

/// Rows m0..m0+R-1 of panel p on the chosen kernel: JN column octets per pass (32 / 8 / JN
/// passes over the panel).
template <WeightFormat F, int R, int JN>
TPULLM_TARGET_AVX2 void gemv_int8_rows_avx2(const LinearArgs& a, const XDigits& xd, bool vnni,
                                            std::int64_t m0, std::int64_t p) {
  for (int j0 = 0; j0 < 4; j0 += JN) {
    if (vnni)
      gemv_int8_avxvnni<F, R, JN>(a, xd, m0, p, j0);
    else
      gemv_int8_maddubs<F, R, JN>(a, xd, m0, p, j0);
  }
}

/// AVX2 int8-activation GEMV of panels [pa, pb) for rows [0, a.M) (xd: one digit per element):
/// AVX-VNNI where the CPU has it (use_avx_vnni_gemv), else VPMADDUBSW. Rows in blocks of
/// kVnniRowBlock (their digits stay in L2), each panel read twice per 4 rows of a block (16
/// columns a pass), 2 rows twice, 1 row once.
template <WeightFormat F>
TPULLM_TARGET_AVX2 void gemv_int8_avx2(const LinearArgs& a, const XDigits& xd, std::int64_t pa,
                                       std::int64_t pb) {
  const bool vnni = use_avx_vnni_gemv();
  for (std::int64_t m0 = 0; m0 < a.M; m0 += kVnniRowBlock) {
    const std::int64_t m1 = std::min(a.M, m0 + kVnniRowBlock);
    for (std::int64_t p = pa; p < pb; ++p) {
      std::int64_t m = m0;
      // 4 rows x 16 columns per pass: 1.9-2.3x faster than 4 x 8 (four passes re-reading the
      // panel's lines) and 1.1-1.5x faster than 4 x 32 (which spills), int4 / int8 g32, M = 64
      for (; m + 4 <= m1; m += 4)
        gemv_int8_rows_avx2<F, 4, 2>(a, xd, vnni, m, p);
      for (; m + 2 <= m1; m += 2)
        gemv_int8_rows_avx2<F, 2, 2>(a, xd, vnni, m, p);
      if (m < m1)
        gemv_int8_rows_avx2<F, 1, 4>(a, xd, vnni, m, p);
    }
  }
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
