#pragma once
/// ggml's tensor storage types (the `ggml_type` ids GGUF files store) and their block geometry.
/// A row of n elements of a block type is n / block_elems blocks of block_bytes each, stored
/// one after the other; the per-type block layouts and their dequantization are in
/// conversion/ggml_blocks.hpp. Ids and sizes are ggml's (ggml.h / ggml-common.h).

#include <cstdint>
#include <optional>
#include <string_view>

namespace tpullm::conversion {

/// ggml_type ids. Ids ggml has retired (4, 5, 31-33, 36-38) are not listed.
// clang-format off
enum class GgmlType : std::uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
  iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22,
  iq4_xs = 23, i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
  tq1_0 = 34, tq2_0 = 35, mxfp4 = 39, nvfp4 = 40, q1_0 = 41, q2_0 = 42,
};
// clang-format on

/// Geometry and name of one ggml type.
struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;    ///< ggml's spelling ("Q4_K", "F16", "IQ4_XS", ...)
  std::int64_t block_elems; ///< elements per block (1 for plain types)
  std::int64_t block_bytes; ///< bytes per block
  bool importable;          ///< tpullm compiles weights of this type (others refused by name)
};

/// The table of every known ggml type.
// clang-format off
inline constexpr GgmlTypeInfo kGgmlTypes[] = {
    {GgmlType::f32, "F32", 1, 4, true},         {GgmlType::f16, "F16", 1, 2, true},
    {GgmlType::q4_0, "Q4_0", 32, 18, true},     {GgmlType::q4_1, "Q4_1", 32, 20, true},
    {GgmlType::q5_0, "Q5_0", 32, 22, true},     {GgmlType::q5_1, "Q5_1", 32, 24, true},
    {GgmlType::q8_0, "Q8_0", 32, 34, true},     {GgmlType::q8_1, "Q8_1", 32, 36, false},
    {GgmlType::q2_k, "Q2_K", 256, 84, true},    {GgmlType::q3_k, "Q3_K", 256, 110, true},
    {GgmlType::q4_k, "Q4_K", 256, 144, true},   {GgmlType::q5_k, "Q5_K", 256, 176, true},
    {GgmlType::q6_k, "Q6_K", 256, 210, true},   {GgmlType::q8_k, "Q8_K", 256, 292, false},
    {GgmlType::iq2_xxs, "IQ2_XXS", 256, 66, false}, {GgmlType::iq2_xs, "IQ2_XS", 256, 74, false},
    {GgmlType::iq3_xxs, "IQ3_XXS", 256, 98, false}, {GgmlType::iq1_s, "IQ1_S", 256, 50, false},
    {GgmlType::iq4_nl, "IQ4_NL", 32, 18, true}, {GgmlType::iq3_s, "IQ3_S", 256, 110, false},
    {GgmlType::iq2_s, "IQ2_S", 256, 82, false}, {GgmlType::iq4_xs, "IQ4_XS", 256, 136, true},
    {GgmlType::i8, "I8", 1, 1, false},          {GgmlType::i16, "I16", 1, 2, false},
    {GgmlType::i32, "I32", 1, 4, false},        {GgmlType::i64, "I64", 1, 8, false},
    {GgmlType::f64, "F64", 1, 8, false},        {GgmlType::iq1_m, "IQ1_M", 256, 56, false},
    {GgmlType::bf16, "BF16", 1, 2, true},       {GgmlType::tq1_0, "TQ1_0", 256, 54, false},
    {GgmlType::tq2_0, "TQ2_0", 256, 66, false}, {GgmlType::mxfp4, "MXFP4", 32, 17, false},
    {GgmlType::nvfp4, "NVFP4", 64, 36, false},  {GgmlType::q1_0, "Q1_0", 128, 18, false},
    {GgmlType::q2_0, "Q2_0", 64, 18, false},
};
// clang-format on

/// The info of a stored type id, or nullopt for an id ggml does not define (or has retired).
constexpr std::optional<GgmlTypeInfo> ggml_type_info(std::uint32_t id) noexcept {
  for (const auto& t : kGgmlTypes)
    if (static_cast<std::uint32_t>(t.type) == id)
      return t;
  return std::nullopt;
}

/// The info of `t` (always present for an enumerator).
constexpr GgmlTypeInfo ggml_info(GgmlType t) noexcept {
  return *ggml_type_info(static_cast<std::uint32_t>(t));
}

/// ggml's name of `t` ("Q4_K").
constexpr std::string_view ggml_name(GgmlType t) noexcept {
  return ggml_info(t).name;
}

/// True for the plain float types F32, F16, BF16 (everything else importable is block-quantized).
constexpr bool ggml_is_float(GgmlType t) noexcept {
  return t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16;
}

/// Bytes of a row of n elements, or nullopt when n is not a whole number of blocks (or < 0).
constexpr std::optional<std::int64_t> ggml_row_bytes(GgmlType t, std::int64_t n) noexcept {
  const GgmlTypeInfo i = ggml_info(t);
  if (n < 0 || n % i.block_elems != 0)
    return std::nullopt;
  return n / i.block_elems * i.block_bytes;
}

} // namespace tpullm::conversion
