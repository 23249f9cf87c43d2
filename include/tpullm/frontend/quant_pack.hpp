#pragma once
/// Packing of plain quantized integers into the checkpoint words of GPTQ and AWQ (GEMM), from
/// the formats' definitions (int32 words little-endian; b bits, pack = 32 / b, value i of a
/// word at bits [b*i, b*i + b)):
///   GPTQ qweight [K/pack, N]: word (r, n) value i = q[pack*r + i][n]          (along K)
///        qzeros  [G, N/pack]: word (g, c) value i = zero[g][pack*c + i] - off (along N;
///                             off 1 for checkpoint_format gptq, 0 for gptq_v2)
///   AWQ  qweight [K, N/8]:    word (k, c) nibble i = q[k][8c + order[i]], order 0,2,4,6,1,3,5,7
///        qzeros  [G, N/8]:    word (g, c) nibble i = zero[g][8c + order[i]]
/// Used by `tpullm make-model --quantize` (frontend/make_model.hpp). The importer's unpacking
/// (conversion/quant_repack.hpp) is the inverse, written separately.

#include "tpullm/support/error.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace tpullm::frontend {

/// GPTQ qweight [K/pack, N] of `q` [K, N] row-major (values in [0, 2^bits)).
inline std::vector<std::int32_t> pack_gptq_qweight(std::span<const std::uint8_t> q, std::int64_t K,
                                                   std::int64_t N, int bits) {
  const int pack = 32 / bits;
  check((bits == 4 || bits == 8) && K % pack == 0 && static_cast<std::int64_t>(q.size()) == K * N,
        ErrorKind::invalid_input, "pack_gptq_qweight", "bad shape or bits");
  std::vector<std::uint32_t> w(static_cast<std::size_t>(K / pack * N), 0);
  for (std::int64_t r = 0; r < K / pack; ++r)
    for (int i = 0; i < pack; ++i)
      for (std::int64_t n = 0; n < N; ++n)
        w[static_cast<std::size_t>(r * N + n)] |=
            static_cast<std::uint32_t>(q[static_cast<std::size_t>((pack * r + i) * N + n)])
            << (bits * i);
  return {w.begin(), w.end()};
}

/// GPTQ qzeros [G, N/pack] of real zeros `z` [G, N] (stored z - `offset`, which must fit).
inline std::vector<std::int32_t> pack_gptq_qzeros(std::span<const std::uint8_t> z, std::int64_t G,
                                                  std::int64_t N, int bits, int offset) {
  const int pack = 32 / bits;
  check((bits == 4 || bits == 8) && N % pack == 0 && static_cast<std::int64_t>(z.size()) == G * N,
        ErrorKind::invalid_input, "pack_gptq_qzeros", "bad shape or bits");
  std::vector<std::uint32_t> w(static_cast<std::size_t>(G * N / pack), 0);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t c = 0; c < N / pack; ++c)
      for (int i = 0; i < pack; ++i) {
        const int stored = z[static_cast<std::size_t>(g * N + pack * c + i)] - offset;
        check(stored >= 0 && stored < (1 << bits), ErrorKind::invalid_input, "pack_gptq_qzeros",
              "zero ", stored + offset, " does not fit with offset ", offset);
        w[static_cast<std::size_t>(g * (N / pack) + c)] |= static_cast<std::uint32_t>(stored)
                                                           << (bits * i);
      }
  return {w.begin(), w.end()};
}

/// AWQ GEMM words [rows, N/8] of 4-bit `v` [rows, N] (qweight with rows = K, qzeros with G).
inline std::vector<std::int32_t> pack_awq_rows(std::span<const std::uint8_t> v, std::int64_t rows,
                                               std::int64_t N) {
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  check(N % 8 == 0 && static_cast<std::int64_t>(v.size()) == rows * N, ErrorKind::invalid_input,
        "pack_awq_rows", "bad shape");
  std::vector<std::uint32_t> w(static_cast<std::size_t>(rows * N / 8), 0);
  for (std::int64_t k = 0; k < rows; ++k)
    for (std::int64_t c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i)
        w[static_cast<std::size_t>(k * (N / 8) + c)] |=
            static_cast<std::uint32_t>(v[static_cast<std::size_t>(k * N + 8 * c + kOrder[i])] & 0xF)
            << (4 * i);
  return {w.begin(), w.end()};
}

} // namespace tpullm::frontend
