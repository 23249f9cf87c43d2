#pragma once
/// Block layouts of ggml's quantized types and their exact conversion into the kernel library's
/// integer panels (conversion/quant_repack.hpp's QuantPlain -> kernels::PackedWeights).
///
/// Every importable block type is affine per group of 16 or 32 elements along a row:
///   w = code * scale (- min)     code an integer, scale and min exact in f32
/// (a K-quant's sub-block scale d * sc is a product of an f16 and an integer of at most 8 bits:
/// at most 19 significant bits, exact in f32; IQ4_NL / IQ4_XS codes are the entries of ggml's
/// 16-entry int8 codebook). decode_ggml_rows keeps those codes and scales, so the packed weight
/// dequantizes to exactly what ggml's dequantize_row_<type> gives (up to the f32 product each
/// kernel computes anyway). Containers:
///   Q4_0  -> 4-bit codes, zero 8, group 32                 (int4_sym)
///   Q3_K  -> 4-bit codes (q3 + 8), zero 8, group 16         (int4_sym)
///   Q2_K  -> 4-bit codes, scale and min, group 16           (int4_min)
///   Q4_1, Q4_K -> 4-bit codes, scale and min, group 32      (int4_min)
///   Q8_0, Q5_0, Q6_K (group 16), IQ4_NL, IQ4_XS -> 8-bit codes (value + 128), zero 128 (int8)
///   Q5_1, Q5_K -> 8-bit codes, scale and min, group 32      (int8_min)

#include "tpullm/conversion/ggml_types.hpp"
#include "tpullm/conversion/quant_repack.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tpullm::conversion {

/// Decodes a GGUF tensor of block type `t` with ne = [K, N] (N rows of K elements, `data` =
/// N * ggml_row_bytes(t, K) bytes) into the plain form of W: [K, N], W[k][n] = element k of
/// row n: codes q [K, N], scales (and zeros or mins) [K / group, N] as the file comment says.
/// Throws Error(unsupported) naming the type for a type that is not importable or a float
/// type, Error(invalid_input) when the sizes do not match or K is not a multiple of the block.
QuantPlain decode_ggml_rows(GgmlType t, std::span<const std::byte> data, std::int64_t K,
                            std::int64_t N);

/// ggml's reference dequantization of `n` elements (n / block_elems blocks) of type `t` into
/// f32, written from the block definitions independently of decode_ggml_rows (the tests compare
/// the two, and both against files dequantized by llama.cpp). Accepts the float types too.
std::vector<float> dequantize_ggml(GgmlType t, std::span<const std::byte> data, std::int64_t n);

} // namespace tpullm::conversion
