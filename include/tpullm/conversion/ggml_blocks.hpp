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
///   Q6_K  -> 6-bit codes as stored, zero 32, group 16      (int6_sym)
///   Q5_0  -> 6-bit codes (value + 32), zero 32, group 32   (int6_sym)
///   Q8_0, IQ4_NL, IQ4_XS -> 8-bit codes (value + 128), zero 128 (int8)
///   Q5_1, Q5_K -> 6-bit codes as stored, scale and min, group 32 (int6_min)
/// The K-quants and IQ4_XS keep their scales in two levels (kernels/two_level_scales.hpp): the
/// integer per group (Q4_K's 6-bit sc and m, Q6_K's int8, Q3_K's sc - 32, ...) as an int8 code
/// and the f16 d (dmin) per 256 elements as an f32, so Q4_K reads 4.75 bits a weight, not 6.

#include "tpullm/conversion/ggml_types.hpp"
#include "tpullm/conversion/quant_repack.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tpullm::conversion {

/// The integer container a block type repacks into (the table in the file comment).
struct GgmlPacking {
  int bits = 0;                ///< 4, 6 or 8 (0: not a block type tpullm imports)
  std::int64_t group_size = 0; ///< 16 or 32 elements along the row
  bool has_mins = false;       ///< scale and min (int4_min / int6_min / int8_min), not a zero point
  /// Two-level scales: rows per super-block (256: the K-quants and IQ4_XS, whose group scales
  /// are an f16 per 256 elements times an integer per group), else 0 (one f32 per group).
  std::int64_t super_rows = 0;

  /// The kernel format a weight of this container packs to (the table in the file comment):
  /// int4_min / int6_min / int8_min with mins, else int4_sym (zero 8), int6_sym (zero 32) or int8
  /// (zero 128).
  constexpr kernels::WeightFormat format() const noexcept {
    if (has_mins)
      return bits == 8   ? kernels::WeightFormat::int8_min
             : bits == 6 ? kernels::WeightFormat::int6_min
                         : kernels::WeightFormat::int4_min;
    if (bits == 6)
      return kernels::WeightFormat::int6_sym;
    return bits == 8 ? kernels::WeightFormat::int8 : kernels::WeightFormat::int4_sym;
  }
};

/// The container of `t`; bits 0 for float types and types that are not importable.
constexpr GgmlPacking ggml_packing(GgmlType t) noexcept {
  switch (t) {
  case GgmlType::q4_0:
    return {4, 32, false};
  case GgmlType::q3_k:
    return {4, 16, false, 256};
  case GgmlType::q2_k:
    return {4, 16, true, 256};
  case GgmlType::q4_1:
    return {4, 32, true};
  case GgmlType::q4_k:
    return {4, 32, true, 256};
  case GgmlType::q5_0:
    return {6, 32, false};
  case GgmlType::q8_0:
  case GgmlType::iq4_nl:
    return {8, 32, false};
  case GgmlType::iq4_xs:
    return {8, 32, false, 256};
  case GgmlType::q6_k:
    return {6, 16, false, 256};
  case GgmlType::q5_1:
    return {6, 32, true};
  case GgmlType::q5_k:
    return {6, 32, true, 256};
  case GgmlType::f32:
  case GgmlType::f16:
  case GgmlType::bf16:
  case GgmlType::q8_1:
  case GgmlType::q8_k:
  case GgmlType::iq2_xxs:
  case GgmlType::iq2_xs:
  case GgmlType::iq3_xxs:
  case GgmlType::iq1_s:
  case GgmlType::iq3_s:
  case GgmlType::iq2_s:
  case GgmlType::i8:
  case GgmlType::i16:
  case GgmlType::i32:
  case GgmlType::i64:
  case GgmlType::f64:
  case GgmlType::iq1_m:
  case GgmlType::tq1_0:
  case GgmlType::tq2_0:
  case GgmlType::mxfp4:
  case GgmlType::nvfp4:
  case GgmlType::q1_0:
  case GgmlType::q2_0:
    break;
  }
  return {};
}

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
