#pragma once
/// Unpacking of GPTQ (4 / 8-bit) and AWQ-GEMM (4-bit) checkpoint tensors into plain (value,
/// scale, zero) form and repacking into the kernel library's packed layout
/// (kernels/packed_weights.hpp).
///
/// Checkpoint layouts (all int32 words little-endian; with b bits, pack = 32 / b values a word,
/// value i = bits [b*i, b*i + b)):
///   GPTQ  qweight [K/pack, N]: word (r, n) value i = q[pack*r + i][n]           (along K)
///         qzeros  [G, N/pack]: word (g, c) value i = zero[g][pack*c + i] - off  (along N)
///                            off = 1 for "v1" (checkpoint_format gptq), 0 for gptq_v2
///         scales  [G, N] f16, g_idx [K] int32: row k uses group g_idx[k] (act-order = any map)
///   AWQ   qweight [K, N/8]  : word (k, c) nibble i = q[k][8c + kAwqOrder[i]]    (along N)
///         qzeros  [G, N/8]  : word (g, c) nibble i = zero[g][8c + kAwqOrder[i]] (no offset)
///         scales  [G, N] f16, rows in natural order (row k uses group k / group_size)
/// with kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7} (AutoAWQ shifts column order_map[i] by 4*i).
/// AWQ without zero points (zero_point: false) has no qzeros: every zero is 8 (signed values
/// stored offset by 8). Dequantization is w[k][n] = (q[k][n] - zero[g][n]) * scale[g][n] in all.

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/packed_weights.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::conversion {

/// AWQ nibble order: nibble i of a packed word holds column 8c + kAwqOrder[i].
inline constexpr std::array<int, 8> kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7};

/// A 4- or 8-bit quantized W: [K, N] in plain form: w[k][n] = (q[k][n] - zeros[g][n]) *
/// scales[g][n] with g = g_idx[k].
struct QuantPlain {
  std::int64_t K = 0, N = 0;       ///< logical shape of W
  int bits = 4;                    ///< 4, 6 or 8
  std::int64_t group_size = 0;     ///< rows per group (checkpoint's group_size)
  std::vector<std::uint8_t> q;     ///< [K, N] row-major, values in [0, 2^bits)
  std::vector<float> scales;       ///< [G, N] row-major, G = K / group_size
  std::vector<std::uint8_t> zeros; ///< [G, N] row-major, real zero points in [0, 2^bits)
  std::vector<std::int32_t> g_idx; ///< [K] group of each row (empty: k / group_size)
  /// [G, N] row-major, or empty. When present the weight is "scale and min" (ggml's Q4_1,
  /// Q5_1 and K-quants): w[k][n] = q[k][n] * scales[g][n] - mins[g][n], and `zeros` is empty.
  std::vector<float> mins;
  /// Two-level scales (ggml's K-quants), or 0: rows per super-block. Then scales[g][n] ==
  /// super_scales[g * group_size / super_rows][n] * scale_codes[g][n] in f32, exactly (mins
  /// likewise with min_codes / super_mins), and repack_quant stores them in two levels
  /// (kernels/two_level_scales.hpp). `scales` / `mins` keep the products either way.
  std::int64_t super_rows = 0;
  std::vector<std::int8_t> scale_codes; ///< [G, N] row-major (two-level only)
  std::vector<float> super_scales;      ///< [K / super_rows, N] row-major (two-level only)
  std::vector<std::int8_t> min_codes;   ///< [G, N] row-major (two-level scale and min only)
  std::vector<float> super_mins;        ///< [K / super_rows, N] row-major (two-level mins only)

  /// W: [K, N] row-major f32 (reference dequantization).
  std::vector<float> dequantize() const;
};

namespace detail {
void expect_size(const char* what, std::size_t have, std::int64_t want);
inline std::uint8_t nib(std::int32_t word, int i) {
  return static_cast<std::uint8_t>((static_cast<std::uint32_t>(word) >> (4 * i)) & 0xF);
}
/// Value i of `bits` bits in a packed word.
inline std::uint8_t field(std::int32_t word, int i, int bits) {
  return static_cast<std::uint8_t>((static_cast<std::uint32_t>(word) >> (bits * i)) &
                                   ((1u << bits) - 1));
}
std::int64_t groups_of(const char* what, std::int64_t K, std::int64_t N, std::int64_t group_size,
                       std::int64_t pack = 8);
} // namespace detail

/// Unpacks GPTQ tensors of a W: [K, N] linear (HF in_features = K, out_features = N) with
/// `bits` 4 or 8 (pack = 32 / bits): qweight: [K/pack, N], qzeros: [G, N/pack], scales: [G, N]
/// (f32 values; an overload takes f16 bits), g_idx: [K] (empty = k / group_size). `zero_offset` is
/// added to stored zeros: 1 for "v1" checkpoints (stored zero-1), 0 for "v2". Throws
/// Error(invalid_input) on size mismatch, a zero point outside [0, 2^bits) or g_idx out of [0, G).
QuantPlain unpack_gptq(std::span<const std::int32_t> qweight, std::span<const std::int32_t> qzeros,
                       std::span<const float> scales, std::span<const std::int32_t> g_idx,
                       std::int64_t K, std::int64_t N, std::int64_t group_size, int zero_offset = 1,
                       int bits = 4);

/// Unpacks AWQ (GEMM layout) 4-bit tensors of W: [K, N]: qweight: [K, N/8], qzeros: [G, N/8],
/// scales: [G, N] (f32 values; an overload takes f16 bits). Throws Error(invalid_input) on size
/// mismatch.
QuantPlain unpack_awq(std::span<const std::int32_t> qweight, std::span<const std::int32_t> qzeros,
                      std::span<const float> scales, std::int64_t K, std::int64_t N,
                      std::int64_t group_size);

namespace detail {
std::vector<float> widen_f16(std::span<const std::uint16_t> h);
} // namespace detail

/// unpack_gptq with scales as f16 bits (widened exactly).
inline QuantPlain unpack_gptq(std::span<const std::int32_t> qweight,
                              std::span<const std::int32_t> qzeros,
                              std::span<const std::uint16_t> scales,
                              std::span<const std::int32_t> g_idx, std::int64_t K, std::int64_t N,
                              std::int64_t group_size, int zero_offset = 1, int bits = 4) {
  const std::vector<float> s = detail::widen_f16(scales);
  return unpack_gptq(qweight, qzeros, std::span<const float>(s), g_idx, K, N, group_size,
                     zero_offset, bits);
}

/// unpack_awq with scales as f16 bits (widened exactly).
inline QuantPlain unpack_awq(std::span<const std::int32_t> qweight,
                             std::span<const std::int32_t> qzeros,
                             std::span<const std::uint16_t> scales, std::int64_t K, std::int64_t N,
                             std::int64_t group_size) {
  const std::vector<float> s = detail::widen_f16(scales);
  return unpack_awq(qweight, qzeros, std::span<const float>(s), K, N, group_size);
}

/// Row order that makes groups contiguous: perm[j] = original row stored at packed row j
/// (stable sort of rows by g_idx). Throws unless every group has exactly group_size rows.
std::vector<std::int32_t> group_sorted_rows(const QuantPlain& p);

/// Packs plain 4- or 8-bit values into the kernel layout. 4-bit: all zero points == 8 gives
/// int4_sym (no zeros stored), otherwise int4_asym. 8-bit: all zero points == 128 gives int8
/// (q - 128), otherwise int8_asym (codes and zero points as given). `allow_sym` false keeps the
/// asymmetric format even when every zero is the midpoint. With `mins` (scale and min) the codes,
/// scales and mins are kept as they are: int4_min (4-bit) or int8_min (8-bit), whatever
/// `allow_sym` says; throws Error(invalid_input) when zeros are given too or a size is wrong.
/// Rows are group-sorted with k_perm set when g_idx is not k / group_size (act-order). With
/// `super_rows` the scales (and mins) are stored in two levels, after checking that the codes
/// and super-block values give the same f32 scales.
kernels::PackedWeights repack_quant(const QuantPlain& p, bool allow_sym = true);

} // namespace tpullm::conversion
