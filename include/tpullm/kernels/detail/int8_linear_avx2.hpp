#pragma once
/// AVX2-level W8A8 tiles:
///  - AVX-VNNI (VEX VPDPBUSD on ymm, where cpu_features().avx_vnni): the AVX-512 VNNI tile at
///    half width, same biased-code operands and column-sum correction;
///  - plain AVX2: weights sign-extended to int16 (VPMOVSXBW) and multiplied by the activations as
///    int16 (q - z) with VPMADDWD. VPMADDUBSW is not used: its int16 pair sums saturate for u8 x
///    s8 operands (255 * 127 * 2 > 32767), and the sign trick that avoids it (|a| times sign(a)
///    applied to b) is wrong whenever the sign-applied operand is -128, which both operands can
///    be here (int8 weights use the full [-128, 127]; static activations clamp to -128).
///    VPMADDWD of int16 pairs cannot overflow (|q - z| <= 255, |w| <= 128) and costs the same
///    instructions per multiply-add as the VPMADDUBSW + VPMADDWD pair with its sign fix-ups.
///    Layout: each 16-byte chunk of a weight quad (4 columns x 4 k) widens to one ymm whose
///    dwords hold (column c, k 0-1) and (column c, k 2-3) partial sums; the two partials are
///    added in the epilogue (VPHADDD + a lane permute).

#include "tpullm/kernels/detail/avx_vnni.hpp"
#include "tpullm/kernels/detail/int8_tile.hpp"
#include "tpullm/kernels/detail/matmul_common.hpp"

namespace tpullm::kernels::detail {

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// Test hook: when true, the AVX2-level W8A8 path uses VPMADDWD even where the CPU has AVX-VNNI
/// (so tests cover both on an AVX-VNNI machine).
inline bool& w8a8_avx_vnni_disabled() {
  static bool disabled = false;
  return disabled;
}

/// Rows of the AVX-VNNI GEMM tile (2 x 32 int32 = 8 ymm accumulators; 3 rows spill with GCC 12).
inline constexpr int kW8A8MrAvxVnni = 2;
/// Rows of the AVX2 (VPMADDWD) GEMM tile; each pass covers 8 of a panel's 32 columns (6 rows
/// spill accumulators with 16 ymm registers).
inline constexpr int kW8A8MrAvx2 = 4;

/// The 8 columns of ymm results y0 (columns 8j..8j+7 of a panel): scale, bias, masked store.
TPULLM_TARGET_AVX2 inline void w8a8_store8_avx2(const W8A8Tile& t, int s, int j, int r,
                                                __m256i isum) {
  const int nc = tile_cols(t, s) - 8 * j;
  if (nc <= 0)
    return;
  const std::int64_t c = 32 * s + 8 * j;
  __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(isum),
                           _mm256_mul_ps(_mm256_set1_ps(t.rs[r]), _mm256_loadu_ps(t.ws + c)));
  float* yr = t.y + r * t.ldy + c;
  if (nc >= 8) {
    if (t.bias)
      y = _mm256_add_ps(y, _mm256_loadu_ps(t.bias + c));
    _mm256_storeu_ps(yr, y);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, y);
  for (int i = 0; i < nc; ++i)
    yr[i] = t.bias ? tmp[i] + t.bias[c + i] : tmp[i];
}

/// colsum[c] = sum_k w[k][c] of one panel (AVX-VNNI).
TPULLM_TARGET_AVX_VNNI inline void w8a8_colsum_avxvnni(const std::uint8_t* panel, std::int64_t Kq,
                                                       std::int32_t* colsum) {
  const __m256i ones = _mm256_set1_epi8(1);
  __m256i c[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                  _mm256_setzero_si256()};
  for (std::int64_t q = 0; q < Kq; ++q, panel += 128)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      dpbusd_vex(c[j], ones, _mm256_load_si256(reinterpret_cast<const __m256i*>(panel + 32 * j)));
  for (int j = 0; j < 4; ++j)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(colsum + 8 * j), c[j]);
}

/// AVX-VNNI GEMM tile: R rows x one panel (4 ymm of 8 columns per row), column sums given
/// (t.colsum); the GEMV has its own kernel (w8a8_gemv_panel_avxvnni).
template <int R>
TPULLM_TARGET_AVX_VNNI void w8a8_tile_avxvnni(const W8A8Tile& t) {
  __m256i acc[R][4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      acc[r][j] = _mm256_setzero_si256();
  const std::uint8_t* wq = t.w;
  const std::uint8_t* aq = t.a;
  for (std::int64_t q = 0; q < t.Kq; ++q, wq += 128, aq += t.a_qs) {
    __m256i b[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      std::int32_t v;
      std::memcpy(&v, aq + r * t.a_rs, 4);
      b[r] = _mm256_set1_epi32(v);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(wq + 32 * j));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        acc[r][j] = _mm256_dpbusd_avx_epi32(acc[r][j], b[r], w);
    }
  }
  const __m256i zc = _mm256_set1_epi32(t.zc);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i corr = _mm256_mullo_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.colsum + 8 * j)), zc);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      w8a8_store8_avx2(t, 0, j, r, _mm256_sub_epi32(acc[r][j], corr));
  }
}

/// AVX-VNNI GEMV panel kernel: R rows (1..2) x one panel, its Kq quads read as S k-piece streams
/// in lockstep adding into the same accumulators, with the prefetch of w8a8_gemv_panel_avx512
/// (kW8A8GemvPf ahead in each stream, moving to the next panel's piece near a piece's end).
template <int R, int S>
TPULLM_TARGET_AVX_VNNI void w8a8_gemv_panel_avxvnni(const W8A8Tile& t) {
  static_assert(R >= 1 && R <= 2);
  __m256i acc[R][4], cs[4];
  const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi8(1);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    cs[j] = zero;
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r)
      acc[r][j] = zero;
  }
  const std::int64_t piece = t.Kq / S;
  constexpr std::int64_t dq = kW8A8GemvPf / 128;
  const std::int64_t wrap = (t.Kq - piece) * 128;
  auto step = [&](std::int64_t q) TPULLM_TARGET_AVX_VNNI {
    const std::uint8_t* p = t.w + q * 128;
    __m256i b[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      std::int32_t v;
      std::memcpy(&v, t.a + r * t.a_rs + 4 * q, 4);
      b[r] = _mm256_set1_epi32(v);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * j));
      cs[j] = _mm256_dpbusd_avx_epi32(cs[j], ones, w);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r)
        acc[r][j] = _mm256_dpbusd_avx_epi32(acc[r][j], b[r], w);
    }
  };
  for (std::int64_t i = 0; i < piece; ++i) {
    const std::int64_t pf = i + dq < piece ? dq * 128 : dq * 128 + wrap;
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const char* p = reinterpret_cast<const char*>(t.w + (s * piece + i) * 128);
      _mm_prefetch(p + pf, _MM_HINT_T0);
      _mm_prefetch(p + pf + 64, _MM_HINT_T0);
      step(s * piece + i);
    }
  }
  for (std::int64_t q = S * piece; q < t.Kq; ++q)
    step(q);
  const __m256i zc = _mm256_set1_epi32(t.zc);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i corr = _mm256_mullo_epi32(cs[j], zc);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r)
      w8a8_store8_avx2(t, 0, j, r, _mm256_sub_epi32(acc[r][j], corr));
  }
}

/// AVX2 tile: R rows x CW 16-byte chunks (4 columns each) of one panel, starting at chunk c0;
/// activations are int16 (q - z), 8 bytes per row per quad. The panel's Kq quads are read as S
/// k-piece streams in lockstep adding into the same accumulators (S = 1: one pass in k order);
/// `prefetch`: both cache lines of each quad kW8A8GemvPf ahead in its stream (the GEMV's first
/// column pass over a panel; near a piece's end, the next panel's piece).
template <int R, int CW, int S = 1>
TPULLM_TARGET_AVX2 void w8a8_tile_avx2(const W8A8Tile& t, int c0, bool prefetch) {
  static_assert(CW % 2 == 0);
  __m256i acc[R][CW];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < CW; ++j)
      acc[r][j] = _mm256_setzero_si256();
  const std::uint8_t* wc = t.w + 16 * c0;
  auto step = [&](std::int64_t q) TPULLM_TARGET_AVX2 {
    const std::uint8_t* wq = wc + q * 128;
    const std::uint8_t* aq = t.a + q * t.a_qs;
    __m256i w[CW];
#pragma GCC unroll 8
    for (int j = 0; j < CW; ++j)
      w[j] = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(wq + 16 * j)));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      std::int64_t v;
      std::memcpy(&v, aq + r * t.a_rs, 8);
      const __m256i b = _mm256_set1_epi64x(v);
#pragma GCC unroll 8
      for (int j = 0; j < CW; ++j)
        acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(w[j], b));
    }
  };
  const std::int64_t piece = t.Kq / S;
  constexpr std::int64_t dq = kW8A8GemvPf / 128;
  const std::int64_t wrap = (t.Kq - piece) * 128;
  for (std::int64_t i = 0; i < piece; ++i) {
    const std::int64_t pf = i + dq < piece ? dq * 128 : dq * 128 + wrap;
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      if (prefetch) {
        const char* p = reinterpret_cast<const char*>(t.w + (s * piece + i) * 128);
        _mm_prefetch(p + pf, _MM_HINT_T0);
        _mm_prefetch(p + pf + 64, _MM_HINT_T0);
      }
      step(s * piece + i);
    }
  }
  for (std::int64_t q = S * piece; q < t.Kq; ++q)
    step(q);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < CW; j += 2) {
      // [c0 c1 c4 c5 | c2 c3 c6 c7] -> columns in order
      const __m256i h = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][j], acc[r][j + 1]), 0xD8);
      w8a8_store8_avx2(t, 0, (c0 + j) / 2, r, h);
    }
}

/// The GEMV's panel on the AVX2 VPMADDWD tile, kW8A8GemvStreams k-piece streams: 1 row in one
/// pass, 2 rows in two column passes (the first prefetches both lines of each quad, the second
/// reads the other line from cache), 3-4 rows as 2 + 1-2 rows, each pair over the whole panel.
inline void w8a8_gemv_panel_avx2(const W8A8Tile& t, int rows) {
  constexpr int S = kW8A8GemvStreams;
  if (rows == 1) {
    w8a8_tile_avx2<1, 8, S>(t, 0, true);
    return;
  }
  W8A8Tile u = t;
  for (int r = 0; r < rows; r += 2) {
    u.a = t.a + r * t.a_rs;
    u.rs = t.rs + r;
    u.y = t.y + r * t.ldy;
    if (rows - r >= 2) {
      w8a8_tile_avx2<2, 4, S>(u, 0, r == 0);
      w8a8_tile_avx2<2, 4, S>(u, 4, false);
    } else {
      w8a8_tile_avx2<1, 8, S>(u, 0, false);
    }
  }
}

/// One GEMM panel of 1..4 rows on the AVX2 VPMADDWD tile: 1 row in one pass, 2 rows in two
/// column passes, 3-4 rows (the GEMM's tile) in four.
inline void w8a8_panel_avx2(const W8A8Tile& t, int rows) {
  switch (rows) {
  case 1:
    w8a8_tile_avx2<1, 8>(t, 0, false);
    return;
  case 2:
    w8a8_tile_avx2<2, 4>(t, 0, false);
    w8a8_tile_avx2<2, 4>(t, 4, false);
    return;
  default:
    break;
  }
  // 3 or 4 rows: four passes of 8 columns
  for (int c0 = 0; c0 < 8; c0 += 2) {
    if (rows == 3)
      w8a8_tile_avx2<3, 2>(t, c0, false);
    else
      w8a8_tile_avx2<4, 2>(t, c0, false);
  }
}

/// The GEMV's panel on the AVX-VNNI kernel (kW8A8GemvStreams k-piece streams): 1-2 rows in one
/// pass, 3-4 rows as 2 + 1-2 (the second pass reads the panel from cache).
inline void w8a8_gemv_rows_avxvnni(const W8A8Tile& t, int rows) {
  constexpr int S = kW8A8GemvStreams;
  W8A8Tile u = t;
  for (int r = 0; r < rows; r += 2) {
    u.a = t.a + r * t.a_rs;
    u.rs = t.rs + r;
    u.y = t.y + r * t.ldy;
    if (rows - r >= 2)
      w8a8_gemv_panel_avxvnni<2, S>(u);
    else
      w8a8_gemv_panel_avxvnni<1, S>(u);
  }
}

/// One GEMM panel on the AVX-VNNI tile (rows <= 2, column sums given).
inline void w8a8_panel_avxvnni(const W8A8Tile& t, int rows) {
  if (rows == 1)
    w8a8_tile_avxvnni<1>(t);
  else
    w8a8_tile_avxvnni<2>(t);
}

#pragma GCC diagnostic pop
#endif

} // namespace tpullm::kernels::detail
