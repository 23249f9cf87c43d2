#pragma once
/// Element types of the IR, with constexpr traits. Sub-byte types (i4/u4) are stored packed two
/// per byte; their `bits` is 4 and byte sizes round up. i6 and u6 exist only as the element types
/// of packed 6-bit weights (kernels' int6_sym and int6_min blocks), never as activations.

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tpullm::ir {

#define TPULLM_DTYPES(X)                                                                           \
  /*  name  bits  float  signed  integer */                                                        \
  X(f32, 32, true, true, false)                                                                    \
  X(f16, 16, true, true, false)                                                                    \
  X(bf16, 16, true, true, false)                                                                   \
  X(f64, 64, true, true, false)                                                                    \
  X(i8, 8, false, true, true)                                                                      \
  X(u8, 8, false, false, true)                                                                     \
  X(i4, 4, false, true, true)                                                                      \
  X(u4, 4, false, false, true)                                                                     \
  X(i32, 32, false, true, true)                                                                    \
  X(i64, 64, false, true, true)                                                                    \
  X(i1, 1, false, false, true)                                                                     \
  X(i6, 6, false, true, true)                                                                      \
  X(u6, 6, false, false, true)

/// An element type.
enum class DType : std::uint8_t {
#define TPULLM_X(name, bits, fl, sg, in) name,
  TPULLM_DTYPES(TPULLM_X)
#undef TPULLM_X
};

/// Static facts about one DType.
struct DTypeInfo {
  std::string_view name; ///< text spelling, e.g. "bf16"
  int bits;              ///< storage bits per element (1 for i1, stored one per byte)
  bool is_float;         ///< floating point
  bool is_signed;        ///< signed (floats are signed)
  bool is_integer;       ///< integer (including i1)
};

inline constexpr std::array<DTypeInfo, 13> kDTypeInfo = {{
#define TPULLM_X(name, bits, fl, sg, in) {#name, bits, fl, sg, in},
    TPULLM_DTYPES(TPULLM_X)
#undef TPULLM_X
}};

/// Traits of `t`.
constexpr const DTypeInfo& info(DType t) {
  return kDTypeInfo[static_cast<std::size_t>(t)];
}
/// Text spelling of `t`.
constexpr std::string_view name(DType t) {
  return info(t).name;
}
constexpr bool is_float(DType t) {
  return info(t).is_float;
}
constexpr bool is_integer(DType t) {
  return info(t).is_integer;
}
/// True for the packed sub-byte types i4 and u4.
constexpr bool is_packed(DType t) {
  return info(t).bits < 8 && t != DType::i1;
}

/// Bytes needed for `count` elements (sub-byte types packed, rounded up; i1 one byte each).
constexpr std::int64_t byte_size(DType t, std::int64_t count) {
  const int bits = info(t).bits;
  if (t == DType::i1)
    return count;
  return (count * bits + 7) / 8;
}

/// Parses a dtype spelling ("f32", "u4", ...); nullopt when unknown.
constexpr std::optional<DType> parse_dtype(std::string_view s) {
  for (std::size_t i = 0; i < kDTypeInfo.size(); ++i)
    if (kDTypeInfo[i].name == s)
      return static_cast<DType>(i);
  return std::nullopt;
}

static_assert(info(DType::bf16).bits == 16 && name(DType::u4) == "u4");
static_assert(byte_size(DType::u4, 3) == 2 && byte_size(DType::f32, 3) == 12);

} // namespace tpullm::ir
