#pragma once
/// AVX-512 VNNI GEMV of the linear (int8 / int8_asym / int8_min / int4 weights): VPDPBUSD over the
/// digits of x. Zero-point formats finish a group as s * s1 * sum_d 256^-d (A_d - z S_d); the
/// scale-and-min formats (w = u s - m) as s * s1 * sum_d 256^-d A_d - m * xs, with xs = s1 *
/// sum_d 256^-d S_d the group's sum of x as the digits represent it.

#include "tpullm/kernels/detail/matmul_avx512_common.hpp"
#include "tpullm/kernels/detail/matmul_x_digits.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

#define TPULLM_TARGET_AVX512_VNNI                                                                  \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c,bmi2,"        \
                        "prefer-vector-width=512")))

/// acc += VPDPBUSD(u8 a, s8 b), in place (with the intrinsic GCC 12 copies the accumulator
/// before every instruction).
TPULLM_TARGET_AVX512_VNNI inline __attribute__((always_inline)) void dpbusd(__m512i& acc, __m512i a,
                                                                            __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

/// Sum over the 16 columns of one half after a group: sum_d 256^-d (A_d - z * S_d) over the ND
/// digits (3, or 1: a1 and a2 are not read).
template <int ND>
TPULLM_TARGET_AVX512_VNNI inline __m512 vnni_group_sum(__m512i a0, __m512i a1, __m512i a2, __m512 z,
                                                       const std::int32_t* S) {
  if constexpr (ND == 1) {
    (void)a1, (void)a2;
    return _mm512_fnmadd_ps(z, _mm512_set1_ps(static_cast<float>(S[0])), _mm512_cvtepi32_ps(a0));
  }
  const __m512 f0 =
      _mm512_fnmadd_ps(z, _mm512_set1_ps(static_cast<float>(S[0])), _mm512_cvtepi32_ps(a0));
  const __m512 f1 =
      _mm512_fnmadd_ps(z, _mm512_set1_ps(static_cast<float>(S[1])), _mm512_cvtepi32_ps(a1));
  const __m512 f2 =
      _mm512_fnmadd_ps(z, _mm512_set1_ps(static_cast<float>(S[2])), _mm512_cvtepi32_ps(a2));
  return _mm512_fmadd_ps(f2, _mm512_set1_ps(1.0f / 65536.0f),
                         _mm512_fmadd_ps(f1, _mm512_set1_ps(1.0f / 256.0f), f0));
}

/// The zero point a VNNI group sum subtracts per column half: 128 for int8 (codes flipped), 0 for
/// the scale-and-min formats (their mins are applied after the scale), else the format's zero.
template <WeightFormat F>
TPULLM_TARGET_AVX512_VNNI inline void vnni_zero(const PackedWeights& w, std::int64_t p,
                                                std::int64_t g, __m512& z0, __m512& z1) {
  if constexpr (F == WeightFormat::int8)
    z0 = z1 = _mm512_set1_ps(128.0f);
  else if constexpr (has_mins(F))
    z0 = z1 = _mm512_setzero_ps();
  else
    group_zero_avx512<F>(w, p, g, z0, z1);
}

/// t0 -= m[0] * xs, t1 -= m[1] * xs: a scale-and-min group's mins times its sum of x.
TPULLM_TARGET_AVX512_VNNI inline void sub_group_mins(const __m512 (&m)[2], float xs, __m512& t0,
                                                     __m512& t1) {
  const __m512 x = _mm512_set1_ps(xs);
  t0 = _mm512_fnmadd_ps(m[0], x, t0);
  t1 = _mm512_fnmadd_ps(m[1], x, t1);
}

/// Scale-and-min formats: t[h] -= m[h] * xs for the group's mins (no-op for the other formats).
template <WeightFormat F>
TPULLM_TARGET_AVX512_VNNI inline void vnni_sub_mins(const PackedWeights& w, std::int64_t p,
                                                    std::int64_t g, float xs, __m512& t0,
                                                    __m512& t1) {
  if constexpr (has_mins(F)) {
    __m512 m[2];
    group_min_avx512(w, p, g, m[0], m[1]);
    sub_group_mins(m, xs, t0, t1);
  } else {
    (void)w, (void)p, (void)g, (void)xs, (void)t0, (void)t1;
  }
}

TPULLM_TARGET_AVX512_VNNI inline __m512i bcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/// 64 weight bytes of a byte format as VPDPBUSD's unsigned operand: int8 q + 128 (sign bit
/// flipped), int8_asym codes as stored.
template <WeightFormat F>
TPULLM_TARGET_AVX512_VNNI inline __m512i load_codes(const std::uint8_t* p) {
  const __m512i v = _mm512_load_si512(p);
  if constexpr (F == WeightFormat::int8)
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  else
    return v;
}

/// int6: the four quads (rows 4q..4q+3 of the 16-row block at r) of column half h as VPDPBUSD's
/// unsigned operands u in [0, 63]: the low nibbles from the octets, the high two bits from the
/// block's 2-bit plane moved to bits 4..5 (packed_weights.hpp).
TPULLM_TARGET_AVX512_VNNI inline __attribute__((always_inline)) void
load_quads6(const std::uint8_t* r, int h, __m512i (&q)[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
  const __m512i o0 = _mm512_load_si512(r + 64 * h), o1 = _mm512_load_si512(r + 128 + 64 * h);
  const __m512i hb = _mm512_load_si512(r + 256 + 64 * h);
  // (a & m4) | b, b already masked to bits 4..5: ternary-logic 0xEC = (A & C) | B
  q[0] = _mm512_ternarylogic_epi32(o0, _mm512_and_si512(_mm512_slli_epi32(hb, 4), m2), m4, 0xEC);
  q[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(o0, 4),
                                   _mm512_and_si512(_mm512_slli_epi32(hb, 2), m2), m4, 0xEC);
  q[2] = _mm512_ternarylogic_epi32(o1, _mm512_and_si512(hb, m2), m4, 0xEC);
  q[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(o1, 4),
                                   _mm512_and_si512(_mm512_srli_epi32(hb, 2), m2), m4, 0xEC);
}

/// One 4-row step of the single-row kernel: the two column halves' weights w0 / w1 times the
/// digits at xh / xl / xt (ND = 1: xh only) into the accumulators of digit h (h0, h1), l and t.
template <int ND>
TPULLM_TARGET_AVX512_VNNI inline __attribute__((always_inline)) void
dp_digits(__m512i& h0, __m512i& h1, __m512i& l0, __m512i& l1, __m512i& u0, __m512i& u1, __m512i w0,
          __m512i w1, const std::int8_t* xh, const std::int8_t* xl, const std::int8_t* xt) {
  __m512i b = bcast4(xh);
  dpbusd(h0, w0, b);
  dpbusd(h1, w1, b);
  if constexpr (ND == 3) {
    b = bcast4(xl);
    dpbusd(l0, w0, b);
    dpbusd(l1, w1, b);
    b = bcast4(xt);
    dpbusd(u0, w0, b);
    dpbusd(u1, w1, b);
  }
}

/// Single-row VNNI GEMV for one panel with every accumulator a named register: int4 uses 12
/// (3 digits x 2 column halves x low/high nibble rows), int8 12 (3 digits x 2 halves x 2 quads);
/// ND = 1 uses the digit-h ones only.
template <WeightFormat F, int ND>
TPULLM_TARGET_AVX512_VNNI void gemv_panel_vnni_r1(const LinearArgs& a, const XDigits& xd,
                                                  std::int64_t m0, std::int64_t p) {
  const PackedWeights& w = *a.v.w;
  __m512 t0 = _mm512_setzero_ps(), t1 = _mm512_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const std::int8_t* xh = xd.d.data() + (m0 * ND + 0) * xd.Kv - a.v.k0;
  const std::int8_t* xl = ND == 3 ? xd.d.data() + (m0 * ND + 1) * xd.Kv - a.v.k0 : xh;
  const std::int8_t* xt = ND == 3 ? xd.d.data() + (m0 * ND + 2) * xd.Kv - a.v.k0 : xh;
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    const __m512i zero = _mm512_setzero_si512();
    __m512i h0a = zero, h0b = zero, h1a = zero, h1b = zero; // digit h, half 0/1, set a/b
    __m512i l0a = zero, l0b = zero, l1a = zero, l1b = zero;
    __m512i u0a = zero, u0b = zero, u1a = zero, u1b = zero; // digit t
    const std::uint8_t* row = panel_row(w, p, ks);
    std::int64_t k = ks;
    if constexpr (is_byte_format(F)) {
      for (; k + 8 <= ke; k += 8, row += 256) {
        for (int b = 0; b < 256; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + b, _MM_HINT_T0);
        const __m512i w0a = load_codes<F>(row);
        const __m512i w1a = load_codes<F>(row + 64);
        const __m512i w0b = load_codes<F>(row + 128);
        const __m512i w1b = load_codes<F>(row + 192);
        dp_digits<ND>(h0a, h1a, l0a, l1a, u0a, u1a, w0a, w1a, xh + k, xl + k, xt + k);
        dp_digits<ND>(h0b, h1b, l0b, l1b, u0b, u1b, w0b, w1b, xh + k + 4, xl + k + 4, xt + k + 4);
      }
      for (; k < ke; k += 4, row += 128) {
        const __m512i w0 = load_codes<F>(row);
        const __m512i w1 = load_codes<F>(row + 64);
        dp_digits<ND>(h0a, h1a, l0a, l1a, u0a, u1a, w0, w1, xh + k, xl + k, xt + k);
      }
    } else if constexpr (is_six_format(F)) {
      for (; k < ke; k += 16, row += 384) {
        for (int b = 0; b < 384; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + b, _MM_HINT_T0);
        __m512i q0[4], q1[4];
        load_quads6(row, 0, q0);
        load_quads6(row, 1, q1);
        dp_digits<ND>(h0a, h1a, l0a, l1a, u0a, u1a, q0[0], q1[0], xh + k, xl + k, xt + k);
        dp_digits<ND>(h0b, h1b, l0b, l1b, u0b, u1b, q0[1], q1[1], xh + k + 4, xl + k + 4,
                      xt + k + 4);
        dp_digits<ND>(h0a, h1a, l0a, l1a, u0a, u1a, q0[2], q1[2], xh + k + 8, xl + k + 8,
                      xt + k + 8);
        dp_digits<ND>(h0b, h1b, l0b, l1b, u0b, u1b, q0[3], q1[3], xh + k + 12, xl + k + 12,
                      xt + k + 12);
      }
    } else {
      for (; k < ke; k += 8, row += 128) {
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + 64, _MM_HINT_T0);
        const __m512i v0 = _mm512_load_si512(row), v1 = _mm512_load_si512(row + 64);
        const __m512i lo0 = _mm512_and_si512(v0, m4), lo1 = _mm512_and_si512(v1, m4);
        const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi32(v0, 4), m4);
        const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi32(v1, 4), m4);
        // low nibbles: rows k..k+3, high nibbles: rows k+4..k+7
        dp_digits<ND>(h0a, h1a, l0a, l1a, u0a, u1a, lo0, lo1, xh + k, xl + k, xt + k);
        dp_digits<ND>(h0b, h1b, l0b, l1b, u0b, u1b, hi0, hi1, xh + k + 4, xl + k + 4, xt + k + 4);
      }
    }
    const std::int64_t g = ks / w.group_rows();
    __m512 sc0, sc1, z0, z1;
    group_scale_avx512(w, p, g, sc0, sc1);
    vnni_zero<F>(w, p, g, z0, z1);
    const std::int32_t* S = xd.S.data() + (m0 * xd.Gv + gi) * 3;
    const float s1f = xd.s1[static_cast<std::size_t>(m0 * xd.Gv + gi)];
    const __m512 s1 = _mm512_set1_ps(s1f);
    const __m512 r0 = vnni_group_sum<ND>(_mm512_add_epi32(h0a, h0b), _mm512_add_epi32(l0a, l0b),
                                         _mm512_add_epi32(u0a, u0b), z0, S);
    const __m512 r1 = vnni_group_sum<ND>(_mm512_add_epi32(h1a, h1b), _mm512_add_epi32(l1a, l1b),
                                         _mm512_add_epi32(u1a, u1b), z1, S);
    t0 = _mm512_fmadd_ps(_mm512_mul_ps(sc0, s1), r0, t0);
    t1 = _mm512_fmadd_ps(_mm512_mul_ps(sc1, s1), r1, t1);
    if constexpr (has_mins(F))
      vnni_sub_mins<F>(w, p, g, vnni_digit_xsum(s1f, S), t0, t1);
  }
  __m512 t[1][2] = {{t0, t1}};
  store_rows_avx512(a, m0, 1, p, t);
}

/// VNNI GEMV (int8 / int4 only) over R rows for one panel: per weight group, three VPDPBUSD
/// accumulations (one per activation digit) of unsigned weights u (int8: q + 128; int8_asym /
/// int8_min: the code) by the signed digits; the group's result is s1 * sum_d 256^-d (A_d - z *
/// S_d) * scale (scale-and-min: z = 0, minus min * xs). ND = 1: the one digit h only.
template <WeightFormat F, int R, int ND>
TPULLM_TARGET_AVX512_VNNI void gemv_panel_vnni(const LinearArgs& a, const XDigits& xd,
                                               std::int64_t m0, std::int64_t p) {
  constexpr int RG = static_cast<int>(row_group(F));
  constexpr bool kSplit = R <= 2; // separate lo/hi accumulators to shorten dependency chains
  constexpr int NH = (is_byte_format(F) || !kSplit) ? 1 : 2;
  constexpr std::int64_t kStep = row_group(F) * row_bytes(F); // bytes per row group
  const PackedWeights& w = *a.v.w;
  __m512 t[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    t[r][0] = t[r][1] = _mm512_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m512i acc[R][ND][2][NH];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
      for (int d = 0; d < ND; ++d)
#pragma GCC unroll 4
        for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
          for (int n = 0; n < NH; ++n)
            acc[r][d][h][n] = _mm512_setzero_si512();
    const std::uint8_t* row = panel_row(w, p, ks);
    const std::int8_t* xdr[R][ND];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int d = 0; d < ND; ++d)
        xdr[r][d] = xd.d.data() + ((m0 + r) * ND + d) * xd.Kv - a.v.k0;
    if constexpr (is_six_format(F)) {
      for (std::int64_t k = ks; k < ke; k += RG, row += kStep) {
        for (int b = 0; b < kStep; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + b, _MM_HINT_T0);
        __m512i q[2][4];
        load_quads6(row, 0, q[0]);
        load_quads6(row, 1, q[1]);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
          for (int d = 0; d < ND; ++d)
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
              const __m512i b = bcast4(xdr[r][d] + k + 4 * j);
#pragma GCC unroll 2
              for (int h = 0; h < 2; ++h)
                dpbusd(acc[r][d][h][j % NH], q[h][j], b);
            }
      }
    } else {
      for (std::int64_t k = ks; k < ke; k += RG, row += kStep) {
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + 64, _MM_HINT_T0);
        __m512i wl[2], wh[2];
#pragma GCC unroll 4
        for (int h = 0; h < 2; ++h) {
          const __m512i v = _mm512_load_si512(row + 64 * h);
          if constexpr (is_byte_format(F)) {
            wl[h] = F == WeightFormat::int8 ? _mm512_xor_si512(v, flip) : v;
            wh[h] = wl[h];
          } else {
            wl[h] = _mm512_and_si512(v, m4);
            wh[h] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
          }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
          for (int d = 0; d < ND; ++d) {
            std::int32_t xl;
            std::memcpy(&xl, xdr[r][d] + k, 4);
            const __m512i bl = _mm512_set1_epi32(xl);
            if constexpr (is_byte_format(F)) {
#pragma GCC unroll 4
              for (int h = 0; h < 2; ++h)
                dpbusd(acc[r][d][h][0], wl[h], bl);
            } else {
              std::int32_t xh;
              std::memcpy(&xh, xdr[r][d] + k + 4, 4);
              const __m512i bh = _mm512_set1_epi32(xh);
#pragma GCC unroll 4
              for (int h = 0; h < 2; ++h) {
                dpbusd(acc[r][d][h][0], wl[h], bl);
                dpbusd(acc[r][d][h][NH - 1], wh[h], bh);
              }
            }
          }
      }
    }
    const std::int64_t g = ks / w.group_rows();
    __m512 sc[2], z[2];
    group_scale_avx512(w, p, g, sc[0], sc[1]);
    vnni_zero<F>(w, p, g, z[0], z[1]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::int32_t* S = xd.S.data() + ((m0 + r) * xd.Gv + gi) * 3;
      const float s1 = xd.s1[static_cast<std::size_t>((m0 + r) * xd.Gv + gi)];
#pragma GCC unroll 4
      for (int h = 0; h < 2; ++h) {
        __m512 f[ND];
#pragma GCC unroll 4
        for (int d = 0; d < ND; ++d) {
          __m512i ai = acc[r][d][h][0];
          if constexpr (NH == 2)
            ai = _mm512_add_epi32(ai, acc[r][d][h][1]);
          f[d] = _mm512_fnmadd_ps(z[h], _mm512_set1_ps(static_cast<float>(S[d])),
                                  _mm512_cvtepi32_ps(ai));
        }
        __m512 sum = f[0];
        if constexpr (ND == 3)
          sum = _mm512_fmadd_ps(f[2], _mm512_set1_ps(1.0f / 65536.0f),
                                _mm512_fmadd_ps(f[1], _mm512_set1_ps(1.0f / 256.0f), f[0]));
        t[r][h] = _mm512_fmadd_ps(_mm512_mul_ps(sc[h], _mm512_set1_ps(s1)), sum, t[r][h]);
      }
      if constexpr (has_mins(F))
        vnni_sub_mins<F>(w, p, g, vnni_digit_xsum(s1, S), t[r][0], t[r][1]);
    }
  }
  store_rows_avx512(a, m0, R, p, t);
}

/// Single-row VNNI GEMV over S panels p..p+S-1 at once (S interleaved weight streams). Per panel
/// 6 accumulators (3 digits x 2 column halves; int4 low- and high-nibble rows share them); the
/// digit broadcasts are shared by the S panels. ND = 1: the one digit h only.
template <WeightFormat F, int S, int ND>
TPULLM_TARGET_AVX512_VNNI void gemv_panels_vnni_r1(const LinearArgs& a, const XDigits& xd,
                                                   std::int64_t p) {
  constexpr int RG = static_cast<int>(row_group(F));
  const PackedWeights& w = *a.v.w;
  const std::int64_t pbytes = w.panel_bytes();
  __m512 t[S][2];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s)
    t[s][0] = t[s][1] = _mm512_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const std::int8_t* xdr[ND];
#pragma GCC unroll 3
  for (int d = 0; d < ND; ++d)
    xdr[d] = xd.d.data() + d * xd.Kv - a.v.k0;
  const GroupIndex gx(w);
  const std::uint8_t* const row0 = panel_row(w, p, 0);
  const std::uint8_t* const pend = row0 + pbytes; // stream 0's panel end
  std::int64_t gi = 0, g = a.v.k0 / gx.group_rows;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi, ++g) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m512i acc[S][3][2];
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s)
#pragma GCC unroll 3
      for (int d = 0; d < 3; ++d) // all 3 set (ND = 1 passes the unused two to vnni_group_sum)
        acc[s][d][0] = acc[s][d][1] = _mm512_setzero_si512();
    const std::uint8_t* row = row0 + ks * row_bytes(F);
    constexpr std::int64_t kStep = row_group(F) * row_bytes(F); // bytes per row group
    for (std::int64_t k = ks; k < ke; k += RG, row += kStep) {
      // Past its panel's end a stream's prefetch runs on into the same stream of the next S
      // panels (the next call's), so the S streams stay prefetched from one call to the next
      // (prefetches past the weights are harmless: PREFETCHT0 does not fault), as the float
      // GEMVs' streams do (matmul_gemv_stream_plan.hpp).
      const std::int64_t pf =
          row + kGemvVnniPf >= pend ? kGemvVnniPf + (S - 1) * pbytes : kGemvVnniPf;
      if constexpr (is_six_format(F)) {
        __m512i b6[ND][4];
#pragma GCC unroll 3
        for (int d = 0; d < ND; ++d)
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j)
            b6[d][j] = bcast4(xdr[d] + k + 4 * j);
#pragma GCC unroll 8
        for (int s = 0; s < S; ++s) {
          const std::uint8_t* r = row + s * pbytes;
          for (int b = 0; b < kStep; b += 64)
            _mm_prefetch(reinterpret_cast<const char*>(r) + pf + b, _MM_HINT_T0);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            __m512i q[4];
            load_quads6(r, h, q);
#pragma GCC unroll 3
            for (int d = 0; d < ND; ++d)
#pragma GCC unroll 4
              for (int j = 0; j < 4; ++j)
                dpbusd(acc[s][d][h], q[j], b6[d][j]);
          }
        }
        continue;
      }
      __m512i bl[ND], bh[ND];
#pragma GCC unroll 3
      for (int d = 0; d < ND; ++d) {
        bl[d] = bcast4(xdr[d] + k);
        if constexpr (!is_byte_format(F))
          bh[d] = bcast4(xdr[d] + k + 4);
      }
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) {
        const std::uint8_t* r = row + s * pbytes;
        _mm_prefetch(reinterpret_cast<const char*>(r) + pf, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(r) + pf + 64, _MM_HINT_T0);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m512i v = _mm512_load_si512(r + 64 * h);
          if constexpr (is_byte_format(F)) {
            const __m512i wl = F == WeightFormat::int8 ? _mm512_xor_si512(v, flip) : v;
#pragma GCC unroll 3
            for (int d = 0; d < ND; ++d)
              dpbusd(acc[s][d][h], wl, bl[d]);
          } else {
            const __m512i wl = _mm512_and_si512(v, m4);
            const __m512i wh = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
#pragma GCC unroll 3
            for (int d = 0; d < ND; ++d) {
              dpbusd(acc[s][d][h], wl, bl[d]);
              dpbusd(acc[s][d][h], wh, bh[d]);
            }
          }
        }
      }
    }
    const std::int32_t* S3 = xd.S.data() + gi * 3;
    const float s1f = xd.s1[static_cast<std::size_t>(gi)];
    const __m512 s1 = _mm512_set1_ps(s1f);
    [[maybe_unused]] const float xs = has_mins(F) ? vnni_digit_xsum(s1f, S3) : 0.0f;
    // one-level parameters: group g of panel p + s at (p + s) * G + g rows of 32 (the
    // accessors' divisions, once per call instead of per group and stream)
    const std::int64_t at0 = (p * gx.G + g) * kPanelCols;
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const std::int64_t at = at0 + s * gx.G * kPanelCols;
      __m512 sc[2], z[2];
      if (gx.two_level)
        group_scale_avx512(w, p + s, g, sc[0], sc[1]);
      else
        load_group_f32(w.scales.data() + at, sc);
      if constexpr (has_zeros(F))
        load_group_u8(w.zeros.data() + at, z);
      else
        vnni_zero<F>(w, p + s, g, z[0], z[1]);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m512 r = vnni_group_sum<ND>(acc[s][0][h], acc[s][1][h], acc[s][2][h], z[h], S3);
        t[s][h] = _mm512_fmadd_ps(_mm512_mul_ps(sc[h], s1), r, t[s][h]);
      }
      if constexpr (has_mins(F)) {
        if (gx.two_level) {
          vnni_sub_mins<F>(w, p + s, g, xs, t[s][0], t[s][1]);
        } else {
          __m512 mn[2];
          load_group_f32(w.mins.data() + at, mn);
          sub_group_mins(mn, xs, t[s][0], t[s][1]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s)
    store_rows_avx512(a, 0, 1, p + s, t + s);
}

template <WeightFormat F, int S, int ND>
TPULLM_TARGET_AVX512_VNNI void gemv_vnni_r1_rest(const LinearArgs& a, const XDigits& xd,
                                                 std::int64_t p, int rem) {
  if constexpr (S >= 1) {
    if (rem == S)
      gemv_panels_vnni_r1<F, S, ND>(a, xd, p);
    else
      gemv_vnni_r1_rest<F, S - 1, ND>(a, xd, p, rem);
  }
}

/// VNNI GEMV of panels [pa, pb) with x's ND digits (3 or 1).
template <WeightFormat F, int ND>
TPULLM_TARGET_AVX512_VNNI void gemv_vnni_nd(const LinearArgs& a, const XDigits& xd, std::int64_t pa,
                                            std::int64_t pb) {
  if (a.M == 1) {
    constexpr int S = kGemvStreamsVnni;
    std::int64_t p = pa;
    for (; p + S <= pb; p += S)
      gemv_panels_vnni_r1<F, S, ND>(a, xd, p);
    if (p < pb)
      gemv_vnni_r1_rest<F, S - 1, ND>(a, xd, p, static_cast<int>(pb - p));
    return;
  }
  // Blocks of kVnniRowBlock rows (their digits stay in L2) over every panel of the range.
  for (std::int64_t m0 = 0; m0 < a.M; m0 += kVnniRowBlock) {
    const std::int64_t m1 = std::min(a.M, m0 + kVnniRowBlock);
    for (std::int64_t p = pa; p < pb; ++p) {
      std::int64_t m = m0;
      if constexpr (ND == 1) // short prompts (kVnniInt8MaxRows): 4 rows per pass over the panel
        for (; m + 4 <= m1; m += 4)
          gemv_panel_vnni<F, 4, 1>(a, xd, m, p);
      for (; m + 2 <= m1; m += 2)
        gemv_panel_vnni<F, 2, ND>(a, xd, m, p);
      if (m < m1)
        gemv_panel_vnni_r1<F, ND>(a, xd, m, p);
    }
  }
}

/// VNNI GEMV of panels [pa, pb): three digits of x, or one (xd.nd == 1, XPrecision::int8).
template <WeightFormat F>
TPULLM_TARGET_AVX512_VNNI void gemv_vnni(const LinearArgs& a, const XDigits& xd, std::int64_t pa,
                                         std::int64_t pb) {
  if (xd.nd == 1)
    gemv_vnni_nd<F, 1>(a, xd, pa, pb);
  else
    gemv_vnni_nd<F, 3>(a, xd, pa, pb);
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
