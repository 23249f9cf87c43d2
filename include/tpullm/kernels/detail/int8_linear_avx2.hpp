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

#include "tpullm/kernels/detail/int8_tile.hpp"
#include "tpullm/kernels/detail/matmul_common.hpp"

namespace tpullm::kernels::detail {

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

#define TPULLM_TARGET_AVX_VNNI __attribute__((target("avx2,fma,f16c,bmi2,avxvnni")))

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

/// acc += VPDPBUSD(u8 a, s8 b) on ymm (VEX encoding), in place.
TPULLM_TARGET_AVX_VNNI inline __attribute__((always_inline)) void dpbusd_vex(__m256i& acc,
                                                                             __m256i a, __m256i b) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
}

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

/// AVX-VNNI tile: R rows x one panel (4 ymm of 8 columns per row); kStream: column sums in the
/// same pass (GEMV), else t.colsum (GEMM).
template <int R, bool kStream>
TPULLM_TARGET_AVX_VNNI void w8a8_tile_avxvnni(const W8A8Tile& t) {
  __m256i acc[R][4], cs[4];
  const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi8(1);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    cs[j] = zero;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      acc[r][j] = zero;
  }
  const std::uint8_t* wq = t.w;
  const std::uint8_t* aq = t.a;
  for (std::int64_t q = 0; q < t.Kq; ++q, wq += 128, aq += t.a_qs) {
    if constexpr (kStream) {
      _mm_prefetch(reinterpret_cast<const char*>(wq) + kGemvPf, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(wq) + kGemvPf + 64, _MM_HINT_T0);
    }
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
      if constexpr (kStream) // value form (see w8a8_tile_avx512)
        cs[j] = _mm256_dpbusd_avx_epi32(cs[j], ones, w);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        acc[r][j] = _mm256_dpbusd_avx_epi32(acc[r][j], b[r], w);
    }
  }
  const __m256i zc = _mm256_set1_epi32(t.zc);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i c =
        kStream ? cs[j] : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.colsum + 8 * j));
    const __m256i corr = _mm256_mullo_epi32(c, zc);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      w8a8_store8_avx2(t, 0, j, r, _mm256_sub_epi32(acc[r][j], corr));
  }
}

/// AVX2 tile: R rows x CW 16-byte chunks (4 columns each) of one panel, starting at chunk c0;
/// activations are int16 (q - z), 8 bytes per row per quad.
template <int R, int CW>
TPULLM_TARGET_AVX2 void w8a8_tile_avx2(const W8A8Tile& t, int c0, bool stream) {
  static_assert(CW % 2 == 0);
  __m256i acc[R][CW];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < CW; ++j)
      acc[r][j] = _mm256_setzero_si256();
  const std::uint8_t* wq = t.w + 16 * c0;
  const std::uint8_t* aq = t.a;
  for (std::int64_t q = 0; q < t.Kq; ++q, wq += 128, aq += t.a_qs) {
    if (stream)
      _mm_prefetch(reinterpret_cast<const char*>(wq) + kGemvPf, _MM_HINT_T0);
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
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < CW; j += 2) {
      // [c0 c1 c4 c5 | c2 c3 c6 c7] -> columns in order
      const __m256i h = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][j], acc[r][j + 1]), 0xD8);
      w8a8_store8_avx2(t, 0, (c0 + j) / 2, r, h);
    }
}

/// One panel of 1..4 rows on the AVX2 VPMADDWD tile: 1 row in one pass, 2 rows in two column
/// passes (each cache line read once), 3-4 rows (the GEMM's tile) in four.
inline void w8a8_panel_avx2(const W8A8Tile& t, int rows, bool stream) {
  switch (rows) {
  case 1:
    w8a8_tile_avx2<1, 8>(t, 0, stream);
    return;
  case 2:
    w8a8_tile_avx2<2, 4>(t, 0, stream);
    w8a8_tile_avx2<2, 4>(t, 4, stream);
    return;
  default:
    break;
  }
  // 3 or 4 rows: four passes of 8 columns
  for (int c0 = 0; c0 < 8; c0 += 2) {
    if (rows == 3)
      w8a8_tile_avx2<3, 2>(t, c0, stream);
    else
      w8a8_tile_avx2<4, 2>(t, c0, stream);
  }
}

/// One panel on the AVX-VNNI tile (rows <= 2 for the GEMM; the GEMV splits 3-4 rows into 2 + 1-2).
inline void w8a8_panel_avxvnni(const W8A8Tile& t, int rows, bool stream) {
  if (stream) {
    if (rows == 1) {
      w8a8_tile_avxvnni<1, true>(t);
      return;
    }
    W8A8Tile u = t;
    for (int r = 0; r < rows; r += 2) {
      u.a = t.a + r * t.a_rs;
      u.rs = t.rs + r;
      u.y = t.y + r * t.ldy;
      if (rows - r >= 2)
        w8a8_tile_avxvnni<2, true>(u);
      else
        w8a8_tile_avxvnni<1, true>(u);
    }
    return;
  }
  if (rows == 1)
    w8a8_tile_avxvnni<1, false>(t);
  else
    w8a8_tile_avxvnni<2, false>(t);
}

#pragma GCC diagnostic pop
#endif

} // namespace tpullm::kernels::detail
