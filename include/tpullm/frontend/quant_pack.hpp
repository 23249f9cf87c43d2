#pragma once
/// Packing of plain quantized integers into the checkpoint words of GPTQ and AWQ (GEMM), from
/// the formats' definitions (int32 words little-endian; b bits, pack = 32 / b, value i of a
/// word at bits [b*i, b*i + b)):
///   GPTQ qweight [K/pack, N]: word (r, n) value i = q[pack*r + i][n]          (along K)
///        qzeros  [G, N/pack]: word (g, c) value i = zero[g][pack*c + i] - off (along N;
///                             off 1 for checkpoint_format gptq, 0 for gptq_v2)
///   AWQ  qweight [K, N/8]:    word (k, c) nibble i = q[k][8c + order[i]], order 0,2,4,6,1,3,5,7
///        qzeros  [G, N/8]:    word (g, c) nibble i = zero[g][8c + order[i]]
/// Used by `tpullm make-model --quantize` (devtools/make_model.hpp). The importer's unpacking
/// (conversion/quant_repack.hpp) is the inverse, written separately.

#include "tpullm/support/error.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace tpullm::frontend {

/// GPTQ qweight [K/pack, N] of `q` [K, N] row-major (values in [0, 2^bits)).
std::vector<std::int32_t> pack_gptq_qweight(std::span<const std::uint8_t> q, std::int64_t K,
                                            std::int64_t N, int bits);

/// GPTQ qzeros [G, N/pack] of real zeros `z` [G, N] (stored z - `offset`, which must fit).
std::vector<std::int32_t> pack_gptq_qzeros(std::span<const std::uint8_t> z, std::int64_t G,
                                           std::int64_t N, int bits, int offset);

/// AWQ GEMM words [rows, N/8] of 4-bit `v` [rows, N] (qweight with rows = K, qzeros with G).
std::vector<std::int32_t> pack_awq_rows(std::span<const std::uint8_t> v, std::int64_t rows,
                                        std::int64_t N);

} // namespace tpullm::frontend
