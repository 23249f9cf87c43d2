#pragma once
/// AVX-512 VNNI W8A8 tile: VPDPBUSD of the biased activation codes (q + 128, unsigned) by the
/// int8 weights as stored (signed, the quads of WeightFormat::int8 are its operand layout), so
/// sum_k (q - z) w = acc - (128 + z) * colsum(w). The GEMV (M <= 4) streams each panel once and
/// sums the weight columns in the same pass (one more VPDPBUSD by ones per weight vector); the
/// GEMM passes precomputed column sums (w8a8_colsum_avx512) and keeps 12 x 32 accumulators.

#include "tpullm/kernels/detail/int8_tile.hpp"
#include "tpullm/kernels/detail/matmul_common.hpp"
#include "tpullm/kernels/detail/matmul_gemv_vnni.hpp"

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

#ifndef TPULLM_W8A8_MR_VNNI
#define TPULLM_W8A8_MR_VNNI 12
#endif
/// Rows of the VNNI GEMM's register tile (12 x 32 int32 = 24 zmm accumulators: with 14 GCC 12
/// spills accumulators inside the k loop).
inline constexpr int kW8A8MrVnni = TPULLM_W8A8_MR_VNNI;

TPULLM_TARGET_AVX512_VNNI inline __m512i bcast_code(const std::uint8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/// colsum[c] = sum over the panel's Kq quads of w[k][c], c < 32.
TPULLM_TARGET_AVX512_VNNI inline void w8a8_colsum_avx512(const std::uint8_t* panel, std::int64_t Kq,
                                                         std::int32_t* colsum) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i c0 = _mm512_setzero_si512(), c1 = c0, d0 = c0, d1 = c0;
  std::int64_t t = 0;
  for (; t + 2 <= Kq; t += 2, panel += 256) {
    dpbusd(c0, ones, _mm512_load_si512(panel));
    dpbusd(c1, ones, _mm512_load_si512(panel + 64));
    dpbusd(d0, ones, _mm512_load_si512(panel + 128));
    dpbusd(d1, ones, _mm512_load_si512(panel + 192));
  }
  if (t < Kq) {
    dpbusd(c0, ones, _mm512_load_si512(panel));
    dpbusd(c1, ones, _mm512_load_si512(panel + 64));
  }
  _mm512_storeu_si512(colsum, _mm512_add_epi32(c0, d0));
  _mm512_storeu_si512(colsum + 16, _mm512_add_epi32(c1, d1));
}

/// The GEMM tile: R rows x S panels, column sums given (t.colsum); the GEMV has its own kernel
/// (w8a8_gemv_panel_avx512).
template <int R, int S>
TPULLM_TARGET_AVX512_VNNI void w8a8_tile_avx512(const W8A8Tile& t) {
  __m512i acc[S][R][2];
  const __m512i zero = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      acc[s][r][0] = acc[s][r][1] = zero;
  }
  const std::uint8_t* wq = t.w;
  const std::uint8_t* aq = t.a;
  for (std::int64_t q = 0; q < t.Kq; ++q, wq += 128, aq += t.a_qs) {
    __m512i w[S][2];
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const std::uint8_t* p = wq + s * t.pbytes;
      w[s][0] = _mm512_load_si512(p);
      w[s][1] = _mm512_load_si512(p + 64);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      // GEMM strips hold a row's quad at 4 * r: a compile-time offset frees the address registers
      const __m512i b = bcast_code(aq + r * 4);
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) {
        acc[s][r][0] = _mm512_dpbusd_epi32(acc[s][r][0], b, w[s][0]);
        acc[s][r][1] = _mm512_dpbusd_epi32(acc[s][r][1], b, w[s][1]);
      }
    }
  }
  const __m512i zc = _mm512_set1_epi32(t.zc);
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) {
    const int nc = tile_cols(t, s);
    const __mmask16 m0 = static_cast<__mmask16>(nc >= 16 ? 0xFFFF : (1u << nc) - 1u);
    const __mmask16 m1 = static_cast<__mmask16>(nc >= 32   ? 0xFFFF
                                                : nc <= 16 ? 0
                                                           : (1u << (nc - 16)) - 1u);
    const __m512i c0 = _mm512_mullo_epi32(_mm512_loadu_si512(t.colsum + 32 * s), zc);
    const __m512i c1 = _mm512_mullo_epi32(_mm512_loadu_si512(t.colsum + 32 * s + 16), zc);
    const __m512 ws0 = _mm512_loadu_ps(t.ws + 32 * s), ws1 = _mm512_loadu_ps(t.ws + 32 * s + 16);
    __m512 b0 = _mm512_setzero_ps(), b1 = b0;
    if (t.bias) {
      b0 = _mm512_maskz_loadu_ps(m0, t.bias + 32 * s);
      b1 = _mm512_maskz_loadu_ps(m1, t.bias + 32 * s + 16);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 sr = _mm512_set1_ps(t.rs[r]);
      __m512 y0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[s][r][0], c0)),
                                _mm512_mul_ps(sr, ws0));
      __m512 y1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[s][r][1], c1)),
                                _mm512_mul_ps(sr, ws1));
      if (t.bias) {
        y0 = _mm512_add_ps(y0, b0);
        y1 = _mm512_add_ps(y1, b1);
      }
      float* yr = t.y + r * t.ldy + 32 * s;
      _mm512_mask_storeu_ps(yr, m0, y0);
      _mm512_mask_storeu_ps(yr + 16, m1, y1);
    }
  }
}

/// The GEMM's full 12 x 32 tile with every accumulator a named variable (GCC 12 keeps an array
/// of accumulators in memory around VPDPBUSD, whether through the intrinsic or the asm helper).
TPULLM_TARGET_AVX512_VNNI inline void w8a8_gemm12_avx512(const W8A8Tile& t) {
#define TPULLM_W8A8_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define TPULLM_W8A8_DECL(r) __m512i a##r##_0 = _mm512_setzero_si512(), a##r##_1 = a##r##_0;
#define TPULLM_W8A8_STEP(r)                                                                        \
  {                                                                                                \
    const __m512i b = bcast_code(aq + 4 * (r));                                                    \
    dpbusd(a##r##_0, b, w0);                                                                       \
    dpbusd(a##r##_1, b, w1);                                                                       \
  }
#define TPULLM_W8A8_STORE(r) store(r, a##r##_0, a##r##_1);
  TPULLM_W8A8_ROWS(TPULLM_W8A8_DECL)
  const std::uint8_t* wq = t.w;
  const std::uint8_t* aq = t.a;
  for (std::int64_t q = 0; q < t.Kq; ++q, wq += 128, aq += t.a_qs) {
    const __m512i w0 = _mm512_load_si512(wq), w1 = _mm512_load_si512(wq + 64);
    TPULLM_W8A8_ROWS(TPULLM_W8A8_STEP)
  }
  const int nc = tile_cols(t, 0);
  const __mmask16 m0 = static_cast<__mmask16>(nc >= 16 ? 0xFFFF : (1u << nc) - 1u);
  const __mmask16 m1 = static_cast<__mmask16>(nc >= 32   ? 0xFFFF
                                              : nc <= 16 ? 0
                                                         : (1u << (nc - 16)) - 1u);
  const __m512i zc = _mm512_set1_epi32(t.zc);
  const __m512i c0 = _mm512_mullo_epi32(_mm512_loadu_si512(t.colsum), zc);
  const __m512i c1 = _mm512_mullo_epi32(_mm512_loadu_si512(t.colsum + 16), zc);
  const __m512 ws0 = _mm512_loadu_ps(t.ws), ws1 = _mm512_loadu_ps(t.ws + 16);
  __m512 b0 = _mm512_setzero_ps(), b1 = b0;
  if (t.bias) {
    b0 = _mm512_maskz_loadu_ps(m0, t.bias);
    b1 = _mm512_maskz_loadu_ps(m1, t.bias + 16);
  }
  auto store = [&](int r, __m512i x0, __m512i x1) TPULLM_TARGET_AVX512_VNNI {
    const __m512 sr = _mm512_set1_ps(t.rs[r]);
    __m512 y0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(x0, c0)), _mm512_mul_ps(sr, ws0));
    __m512 y1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(x1, c1)), _mm512_mul_ps(sr, ws1));
    if (t.bias) {
      y0 = _mm512_add_ps(y0, b0);
      y1 = _mm512_add_ps(y1, b1);
    }
    _mm512_mask_storeu_ps(t.y + r * t.ldy, m0, y0);
    _mm512_mask_storeu_ps(t.y + r * t.ldy + 16, m1, y1);
  };
  TPULLM_W8A8_ROWS(TPULLM_W8A8_STORE)
#undef TPULLM_W8A8_STORE
#undef TPULLM_W8A8_STEP
#undef TPULLM_W8A8_DECL
#undef TPULLM_W8A8_ROWS
}

/// GEMM tile of 1..12 rows (run-time row count, one panel, column sums given).
template <std::size_t... I>
constexpr auto w8a8_gemm_table_avx512(std::index_sequence<I...>) {
  return std::array<void (*)(const W8A8Tile&), sizeof...(I)>{
      {&w8a8_tile_avx512<static_cast<int>(I) + 1, 1>...}};
}

inline void w8a8_gemm_tile_avx512(const W8A8Tile& t, int rows) {
  if (rows == 12) {
    w8a8_gemm12_avx512(t);
    return;
  }
  static constexpr auto table = w8a8_gemm_table_avx512(std::make_index_sequence<kW8A8MrVnni>{});
  table[static_cast<std::size_t>(rows - 1)](t);
}

/// The GEMV's panel kernel: R rows (1..4) x one panel (t's fields point at it), its Kq quads read
/// as S streams of Kq / S consecutive quads each (k pieces of the panel, in lockstep: S DRAM
/// streams per thread, as the read ceiling's best pattern) that all add into the same register
/// accumulators (the integer sums are exact, so the order of k does not change them); the tail
/// quads of Kq % S follow on one stream. Every cache line is prefetched kW8A8GemvPf bytes ahead in
/// its stream; near a piece's end the prefetch moves to the same piece of the next panel (what
/// this stream reads next), so the next panel starts warm. Column sums ride along (VPDPBUSD by
/// ones). R <= 2 keeps two accumulator sets (even / odd streams) to halve the VPDPBUSD chains.
template <int R, int S>
TPULLM_TARGET_AVX512_VNNI void w8a8_gemv_panel_avx512(const W8A8Tile& t) {
  constexpr int A = R <= 2 ? 2 : 1;
  __m512i acc[A][R][2], cs[A][2];
  const __m512i zero = _mm512_setzero_si512(), ones = _mm512_set1_epi8(1);
#pragma GCC unroll 2
  for (int h = 0; h < A; ++h) {
    cs[h][0] = cs[h][1] = zero;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      acc[h][r][0] = acc[h][r][1] = zero;
  }
  const std::int64_t piece = t.Kq / S;
  constexpr std::int64_t dq = kW8A8GemvPf / 128; // prefetch distance in quads
  const std::int64_t wrap = (t.Kq - piece) * 128;
  const std::uint8_t* a = t.a;
  for (std::int64_t i = 0; i < piece; ++i) {
    const std::int64_t pf = i + dq < piece ? dq * 128 : dq * 128 + wrap;
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const std::int64_t q = s * piece + i;
      const std::uint8_t* p = t.w + q * 128;
      _mm_prefetch(reinterpret_cast<const char*>(p) + pf, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p) + pf + 64, _MM_HINT_T0);
      const __m512i w0 = _mm512_load_si512(p), w1 = _mm512_load_si512(p + 64);
      const int h = A == 2 ? s % 2 : 0;
      cs[h][0] = _mm512_dpbusd_epi32(cs[h][0], ones, w0);
      cs[h][1] = _mm512_dpbusd_epi32(cs[h][1], ones, w1);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i b = bcast_code(a + r * t.a_rs + 4 * q);
        acc[h][r][0] = _mm512_dpbusd_epi32(acc[h][r][0], b, w0);
        acc[h][r][1] = _mm512_dpbusd_epi32(acc[h][r][1], b, w1);
      }
    }
  }
  for (std::int64_t q = S * piece; q < t.Kq; ++q) {
    const std::uint8_t* p = t.w + q * 128;
    const __m512i w0 = _mm512_load_si512(p), w1 = _mm512_load_si512(p + 64);
    cs[0][0] = _mm512_dpbusd_epi32(cs[0][0], ones, w0);
    cs[0][1] = _mm512_dpbusd_epi32(cs[0][1], ones, w1);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512i b = bcast_code(a + r * t.a_rs + 4 * q);
      acc[0][r][0] = _mm512_dpbusd_epi32(acc[0][r][0], b, w0);
      acc[0][r][1] = _mm512_dpbusd_epi32(acc[0][r][1], b, w1);
    }
  }
  if constexpr (A == 2) {
    cs[0][0] = _mm512_add_epi32(cs[0][0], cs[1][0]);
    cs[0][1] = _mm512_add_epi32(cs[0][1], cs[1][1]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      acc[0][r][0] = _mm512_add_epi32(acc[0][r][0], acc[1][r][0]);
      acc[0][r][1] = _mm512_add_epi32(acc[0][r][1], acc[1][r][1]);
    }
  }
  const int nc = tile_cols(t, 0);
  const __mmask16 m0 = static_cast<__mmask16>(nc >= 16 ? 0xFFFF : (1u << nc) - 1u);
  const __mmask16 m1 = static_cast<__mmask16>(nc >= 32   ? 0xFFFF
                                              : nc <= 16 ? 0
                                                         : (1u << (nc - 16)) - 1u);
  const __m512i zc = _mm512_set1_epi32(t.zc);
  const __m512i c0 = _mm512_mullo_epi32(cs[0][0], zc), c1 = _mm512_mullo_epi32(cs[0][1], zc);
  const __m512 ws0 = _mm512_loadu_ps(t.ws), ws1 = _mm512_loadu_ps(t.ws + 16);
  __m512 b0 = _mm512_setzero_ps(), b1 = b0;
  if (t.bias) {
    b0 = _mm512_maskz_loadu_ps(m0, t.bias);
    b1 = _mm512_maskz_loadu_ps(m1, t.bias + 16);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m512 sr = _mm512_set1_ps(t.rs[r]);
    __m512 y0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[0][r][0], c0)),
                              _mm512_mul_ps(sr, ws0));
    __m512 y1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[0][r][1], c1)),
                              _mm512_mul_ps(sr, ws1));
    if (t.bias) {
      y0 = _mm512_add_ps(y0, b0);
      y1 = _mm512_add_ps(y1, b1);
    }
    float* yr = t.y + r * t.ldy;
    _mm512_mask_storeu_ps(yr, m0, y0);
    _mm512_mask_storeu_ps(yr + 16, m1, y1);
  }
}

/// GEMV over panels [0, P) of a tile whose fields point at panel 0: rows 1..4, one panel at a
/// time on kW8A8GemvStreams k-piece streams (w8a8_gemv_panel_avx512).
inline void w8a8_gemv_avx512(W8A8Tile t, int rows, std::int64_t P) {
  constexpr int S = kW8A8GemvStreams;
  for (std::int64_t p = 0; p < P; ++p) {
    switch (rows) {
    case 1:
      w8a8_gemv_panel_avx512<1, S>(t);
      break;
    case 2:
      w8a8_gemv_panel_avx512<2, S>(t);
      break;
    case 3:
      w8a8_gemv_panel_avx512<3, S>(t);
      break;
    default:
      w8a8_gemv_panel_avx512<4, S>(t);
      break;
    }
    t.w += t.pbytes;
    t.ws += 32;
    if (t.bias)
      t.bias += 32;
    t.y += 32;
    t.ncols -= 32;
  }
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
