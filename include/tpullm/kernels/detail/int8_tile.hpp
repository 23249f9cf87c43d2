#pragma once
/// The operands of one W8A8 register tile (R rows of x times S consecutive 32-column weight
/// panels over the whole K) and its epilogue, shared by the ISA kernels of the W8A8 linear
/// (int8_linear_avx512.hpp, int8_linear_avx2.hpp, int8_linear_portable.hpp).
///
/// Integer sum of a tile element, exact in int32 (|sum| < 2^31 for K <= 65536):
///   isum[r][n] = sum_k (q[r][k] - z) * w[k][n]
/// and its result, in the reference's operation order: y = float(isum) * (s_r * ws[n]) + bias[n].

#include <algorithm>
#include <cstdint>

#include "tpullm/kernels/packed_weights.hpp"

namespace tpullm::kernels::detail {

#ifndef TPULLM_W8A8_GEMV_STREAMS
#define TPULLM_W8A8_GEMV_STREAMS 4
#endif
/// DRAM streams per thread of the W8A8 GEMV (M <= 4): each panel's K is read as this many
/// pieces in lockstep (the read ceiling's best pattern is 4 streams per thread).
inline constexpr int kW8A8GemvStreams = TPULLM_W8A8_GEMV_STREAMS;
#ifndef TPULLM_W8A8_GEMV_PREFETCH
#define TPULLM_W8A8_GEMV_PREFETCH 1024
#endif
/// Software prefetch distance (bytes, a multiple of 128) of each W8A8 GEMV weight stream.
inline constexpr std::int64_t kW8A8GemvPf = TPULLM_W8A8_GEMV_PREFETCH;
static_assert(kW8A8GemvPf % 128 == 0 && kW8A8GemvStreams >= 1);

/// Largest K the W8A8 kernels accumulate in int32 (|(q + 128) * w| <= 255 * 128 per term).
inline constexpr std::int64_t kW8A8MaxK = 65536;

/// One tile call: activation element (r, quad t) at a + r * a_rs + t * a_qs (4 biased u8 codes,
/// or 4 int16 values q - z on the int16 paths); weights: the first panel's quad 0 at `w`, panels
/// `pbytes` apart, Kq quads each; results y[r][c] for columns [0, ncols) of the S panels.
struct W8A8Tile {
  const std::uint8_t* a = nullptr;
  std::int64_t a_rs = 0, a_qs = 0;
  const std::uint8_t* w = nullptr;
  std::int64_t pbytes = 0;
  std::int64_t Kq = 0;
  const std::int32_t* colsum = nullptr; ///< [S][32] sum_k w[k][n] (VNNI GEMM), or null
  std::int32_t zc = 0;                  ///< VNNI paths: 128 + z (the code bias plus zero point)
  const float* ws = nullptr;            ///< weight scales of the first panel ([S][32])
  const float* bias = nullptr;          ///< bias at the first panel's column 0, or null
  const float* rs = nullptr;            ///< [R] row scales
  float* y = nullptr;                   ///< y at (row 0, first panel's column 0)
  std::int64_t ldy = 0;
  std::int64_t ncols = 0; ///< valid columns from the first panel's column 0 (may exceed 32 * S)
};

/// Valid columns of panel s of a tile (0..32).
inline int tile_cols(const W8A8Tile& t, int s) {
  return static_cast<int>(std::clamp<std::int64_t>(t.ncols - 32 * s, 0, 32));
}

} // namespace tpullm::kernels::detail
