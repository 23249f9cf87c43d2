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
  int bits = 4;                    ///< 4 or 8
  std::int64_t group_size = 0;     ///< rows per group (checkpoint's group_size)
  std::vector<std::uint8_t> q;     ///< [K, N] row-major, values in [0, 2^bits)
  std::vector<float> scales;       ///< [G, N] row-major, G = K / group_size
  std::vector<std::uint8_t> zeros; ///< [G, N] row-major, real zero points in [0, 2^bits)
  std::vector<std::int32_t> g_idx; ///< [K] group of each row

  /// W: [K, N] row-major f32 (reference dequantization).
  std::vector<float> dequantize() const {
    std::vector<float> w(static_cast<std::size_t>(K * N));
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int64_t g = g_idx[static_cast<std::size_t>(k)];
      for (std::int64_t n = 0; n < N; ++n)
        w[k * N + n] = (static_cast<float>(q[k * N + n]) - static_cast<float>(zeros[g * N + n])) *
                       scales[g * N + n];
    }
    return w;
  }
};

namespace detail {
inline void expect_size(const char* what, std::size_t have, std::int64_t want) {
  if (static_cast<std::int64_t>(have) != want)
    throw Error(ErrorKind::invalid_input, "",
                std::string(what) + ": expected " + std::to_string(want) + " elements, got " +
                    std::to_string(have));
}
inline std::uint8_t nib(std::int32_t word, int i) {
  return static_cast<std::uint8_t>((static_cast<std::uint32_t>(word) >> (4 * i)) & 0xF);
}
/// Value i of `bits` bits in a packed word.
inline std::uint8_t field(std::int32_t word, int i, int bits) {
  return static_cast<std::uint8_t>((static_cast<std::uint32_t>(word) >> (bits * i)) &
                                   ((1u << bits) - 1));
}
inline std::int64_t groups_of(const char* what, std::int64_t K, std::int64_t N,
                              std::int64_t group_size, std::int64_t pack = 8) {
  if (K <= 0 || N <= 0 || K % pack != 0 || N % pack != 0)
    throw Error(ErrorKind::invalid_input, "",
                std::string(what) + ": K and N must be positive multiples of " +
                    std::to_string(pack) + ", got K=" + std::to_string(K) +
                    " N=" + std::to_string(N));
  if (group_size <= 0 || K % group_size != 0)
    throw Error(ErrorKind::invalid_input, "",
                std::string(what) + ": K=" + std::to_string(K) +
                    " is not a multiple of group_size=" + std::to_string(group_size));
  return K / group_size;
}
} // namespace detail

/// Unpacks GPTQ tensors of a W: [K, N] linear (HF in_features = K, out_features = N) with
/// `bits` 4 or 8 (pack = 32 / bits): qweight: [K/pack, N], qzeros: [G, N/pack], scales: [G, N]
/// (f32 values; an overload takes f16 bits), g_idx: [K] (empty = k / group_size). `zero_offset` is
/// added to stored zeros: 1 for "v1" checkpoints (stored zero-1), 0 for "v2". Throws
/// Error(invalid_input) on size mismatch, a zero point outside [0, 2^bits) or g_idx out of [0, G).
inline QuantPlain unpack_gptq(std::span<const std::int32_t> qweight,
                              std::span<const std::int32_t> qzeros, std::span<const float> scales,
                              std::span<const std::int32_t> g_idx, std::int64_t K, std::int64_t N,
                              std::int64_t group_size, int zero_offset = 1, int bits = 4) {
  if (bits != 4 && bits != 8)
    throw Error(ErrorKind::unsupported, "",
                "unpack_gptq: " + std::to_string(bits) + "-bit weights are not supported (4, 8)");
  const int pack = 32 / bits, qmax = (1 << bits) - 1;
  const std::int64_t G = detail::groups_of("unpack_gptq", K, N, group_size, pack);
  const std::string p_s = std::to_string(pack);
  detail::expect_size(("unpack_gptq qweight [K/" + p_s + ", N]").c_str(), qweight.size(),
                      K / pack * N);
  detail::expect_size(("unpack_gptq qzeros [G, N/" + p_s + "]").c_str(), qzeros.size(),
                      G * N / pack);
  detail::expect_size("unpack_gptq scales [G, N]", scales.size(), G * N);
  if (!g_idx.empty())
    detail::expect_size("unpack_gptq g_idx [K]", g_idx.size(), K);
  QuantPlain p;
  p.K = K;
  p.N = N;
  p.bits = bits;
  p.group_size = group_size;
  p.q.resize(static_cast<std::size_t>(K * N));
  for (std::int64_t r = 0; r < K / pack; ++r)
    for (std::int64_t n = 0; n < N; ++n)
      for (int i = 0; i < pack; ++i)
        p.q[(pack * r + i) * N + n] = detail::field(qweight[r * N + n], i, bits);
  p.zeros.resize(static_cast<std::size_t>(G * N));
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t c = 0; c < N / pack; ++c)
      for (int i = 0; i < pack; ++i) {
        const int z = detail::field(qzeros[g * (N / pack) + c], i, bits) + zero_offset;
        if (z < 0 || z > qmax)
          throw Error(ErrorKind::invalid_input, "",
                      "unpack_gptq: zero point " + std::to_string(z) + " (group " +
                          std::to_string(g) + ") is outside [0, " + std::to_string(qmax) + "]");
        p.zeros[g * N + pack * c + i] = static_cast<std::uint8_t>(z);
      }
  p.scales.assign(scales.begin(), scales.end());
  p.g_idx.resize(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k) {
    const std::int64_t g = g_idx.empty() ? k / group_size : g_idx[static_cast<std::size_t>(k)];
    if (g < 0 || g >= G)
      throw Error(ErrorKind::invalid_input, "",
                  "unpack_gptq: g_idx[" + std::to_string(k) + "]=" + std::to_string(g) +
                      " is outside [0, " + std::to_string(G) + ")");
    p.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(g);
  }
  return p;
}

/// Unpacks AWQ (GEMM layout) 4-bit tensors of W: [K, N]: qweight: [K, N/8], qzeros: [G, N/8],
/// scales: [G, N] (f32 values; an overload takes f16 bits). Throws Error(invalid_input) on size
/// mismatch.
inline QuantPlain unpack_awq(std::span<const std::int32_t> qweight,
                             std::span<const std::int32_t> qzeros, std::span<const float> scales,
                             std::int64_t K, std::int64_t N, std::int64_t group_size) {
  const std::int64_t G = detail::groups_of("unpack_awq", K, N, group_size);
  detail::expect_size("unpack_awq qweight [K, N/8]", qweight.size(), K * N / 8);
  detail::expect_size("unpack_awq qzeros [G, N/8]", qzeros.size(), G * N / 8);
  detail::expect_size("unpack_awq scales [G, N]", scales.size(), G * N);
  QuantPlain p;
  p.K = K;
  p.N = N;
  p.group_size = group_size;
  p.q.resize(static_cast<std::size_t>(K * N));
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i)
        p.q[k * N + 8 * c + kAwqOrder[i]] = detail::nib(qweight[k * (N / 8) + c], i);
  p.zeros.resize(static_cast<std::size_t>(G * N));
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i)
        p.zeros[g * N + 8 * c + kAwqOrder[i]] = detail::nib(qzeros[g * (N / 8) + c], i);
  p.scales.assign(scales.begin(), scales.end());
  p.g_idx.resize(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k)
    p.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(k / group_size);
  return p;
}

namespace detail {
inline std::vector<float> widen_f16(std::span<const std::uint16_t> h) {
  std::vector<float> f(h.size());
  for (std::size_t i = 0; i < h.size(); ++i)
    f[i] = f16_to_f32(h[i]);
  return f;
}
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
inline std::vector<std::int32_t> group_sorted_rows(const QuantPlain& p) {
  const std::int64_t G = p.K / p.group_size;
  std::vector<std::int64_t> count(static_cast<std::size_t>(G), 0);
  for (std::int32_t g : p.g_idx)
    ++count[static_cast<std::size_t>(g)];
  for (std::int64_t g = 0; g < G; ++g)
    if (count[static_cast<std::size_t>(g)] != p.group_size)
      throw Error(ErrorKind::invalid_input, "",
                  "repack: group " + std::to_string(g) + " has " +
                      std::to_string(count[static_cast<std::size_t>(g)]) +
                      " rows in g_idx, the packed layout needs exactly group_size=" +
                      std::to_string(p.group_size));
  std::vector<std::int32_t> perm(static_cast<std::size_t>(p.K));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](std::int32_t a, std::int32_t b) {
    return p.g_idx[static_cast<std::size_t>(a)] < p.g_idx[static_cast<std::size_t>(b)];
  });
  return perm;
}

/// Packs plain 4- or 8-bit values into the kernel layout. 4-bit: all zero points == 8 gives
/// int4_sym (no zeros stored), otherwise int4_asym. 8-bit: all zero points == 128 gives int8
/// (q - 128), otherwise int8_asym (codes and zero points as given). `allow_sym` false keeps the
/// asymmetric format even when every zero is the midpoint. Rows are group-sorted with k_perm set
/// when g_idx is not k / group_size (act-order).
inline kernels::PackedWeights repack_quant(const QuantPlain& p, bool allow_sym = true) {
  const std::int64_t K = p.K, N = p.N;
  bool natural = true;
  for (std::int64_t k = 0; k < K; ++k)
    natural = natural && p.g_idx[static_cast<std::size_t>(k)] == k / p.group_size;
  std::vector<std::int32_t> perm;
  if (!natural)
    perm = group_sorted_rows(p);
  auto src_row = [&](std::int64_t j) {
    return perm.empty() ? j : perm[static_cast<std::size_t>(j)];
  };
  if (p.bits == 8) {
    const bool sym8 = allow_sym && std::all_of(p.zeros.begin(), p.zeros.end(),
                                               [](std::uint8_t z) { return z == 128; });
    if (!sym8) {
      std::vector<std::uint8_t> u(static_cast<std::size_t>(K * N));
      for (std::int64_t j = 0; j < K; ++j)
        for (std::int64_t n = 0; n < N; ++n)
          u[j * N + n] = p.q[src_row(j) * N + n];
      return kernels::pack_int8_asym(u, p.scales, p.zeros, K, N, p.group_size, perm);
    }
    std::vector<std::int8_t> q(static_cast<std::size_t>(K * N));
    for (std::int64_t j = 0; j < K; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        q[j * N + n] = static_cast<std::int8_t>(static_cast<int>(p.q[src_row(j) * N + n]) - 128);
    // Act-order 8-bit: rows are group-sorted, so packed row j of group g covers original row
    // perm[j]; the int8 packer has no k_perm argument, so it is set afterwards.
    kernels::PackedWeights w = kernels::pack_int8(q, p.scales, K, N, p.group_size);
    w.k_perm = perm;
    return w;
  }
  const bool sym = allow_sym && std::all_of(p.zeros.begin(), p.zeros.end(),
                                            [](std::uint8_t z) { return z == 8; });
  if (sym) {
    std::vector<std::int8_t> q(static_cast<std::size_t>(K * N));
    for (std::int64_t j = 0; j < K; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        q[j * N + n] = static_cast<std::int8_t>(static_cast<int>(p.q[src_row(j) * N + n]) - 8);
    return kernels::pack_int4_sym(q, p.scales, K, N, p.group_size, perm);
  }
  std::vector<std::uint8_t> q(static_cast<std::size_t>(K * N));
  for (std::int64_t j = 0; j < K; ++j)
    for (std::int64_t n = 0; n < N; ++n)
      q[j * N + n] = p.q[src_row(j) * N + n];
  return kernels::pack_int4_asym(q, p.scales, p.zeros, K, N, p.group_size, perm);
}

} // namespace tpullm::conversion
