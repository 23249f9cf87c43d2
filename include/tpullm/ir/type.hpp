#pragma once
/// Tensor types: a static shape, an element type and, for quantized weights, how the stored
/// integers map back to real values. Spelled `tensor<1x128x896xf32>` or
/// `tensor<896x4864xu4, quant<gptq, group = 32, zero_point, act_order>>` in text.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tpullm/ir/dtype.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::ir {

/// How a quantized weight's integers are laid out and scaled.
enum class QuantFormat : std::uint8_t {
  gptq,    ///< GPTQ checkpoint layout (qweight [K/8, N] i32, qzeros stored zero-1, g_idx)
  awq,     ///< AWQ GEMM checkpoint layout (qweight [K, N/8], nibble order 0,2,4,6,1,3,5,7)
  packed,  ///< tpullm's own kernel layout (see docs/kernels.md)
  gptq_v2, ///< GPTQ layout with zeros stored exactly (checkpoint_format gptq_v2)
  ggml,    ///< a GGUF tensor's ggml blocks as stored (QuantSpec::ggml_type), rows [N, K]
  /// An int8 KV cache (i8, never a weight): each row of the last dimension (one position's head
  /// of d values) stored as its d codes then its f32 scale, d + 4 bytes (kernels/kv8.hpp).
  kv_rows,
};

/// Text spelling of a QuantFormat.
constexpr std::string_view name(QuantFormat f) {
  switch (f) {
  case QuantFormat::gptq:
    return "gptq";
  case QuantFormat::awq:
    return "awq";
  case QuantFormat::packed:
    return "packed";
  case QuantFormat::gptq_v2:
    return "gptq_v2";
  case QuantFormat::ggml:
    return "ggml";
  case QuantFormat::kv_rows:
    return "kv_rows";
  }
  return "?";
}

/// Parses "gptq" | "awq" | "packed" | "gptq_v2" (a ggml format is spelled by parse_quant_spelling).
std::optional<QuantFormat> parse_quant_format(std::string_view s);

/// Quantization of a weight tensor of logical shape [K, N]: group-wise scales along K
/// (group_size == 0 means one scale per output channel), optional zero points or mins.
struct QuantSpec {
  QuantFormat format = QuantFormat::packed; ///< storage layout of the integers
  std::int64_t group_size = 0;              ///< rows of K sharing one scale; 0 = per channel
  bool zero_point = false;                  ///< asymmetric: value = (q - zero) * scale
  bool act_order = false;                   ///< GPTQ act-order: row k uses group g_idx[k]
  bool min = false; ///< scale and min (packed u4 / u8 only): value = q * scale - min, f32 mins
  /// Packed weights with two-level scales (ggml's K-quants), else 0: rows per super-block. The
  /// parts are then "scales" (and "mins") f32 per super-block and "scale_codes" (and
  /// "min_codes") i8 per group, whose product is the group's scale (conversion/weight_convert.hpp).
  std::int64_t super_rows = 0;
  /// format ggml: the ggml_type id of the blocks (conversion/ggml_types.hpp). Such a weight's
  /// logical shape is the stored [N, K] (rows of K elements, blocks along K), read with
  /// transpose_b as a float HF weight is; its one part "blocks" holds the row bytes as stored.
  std::uint32_t ggml_type = 0;

  friend bool operator==(const QuantSpec&, const QuantSpec&) = default;
};

/// True when a quantized weight of spec q is stored as rows [N, K] (format ggml): it is read with
/// transpose_b, as a float HuggingFace weight is, and a table of such rows can be gathered.
constexpr bool quant_stored_as_rows(const QuantSpec& q) {
  return q.format == QuantFormat::ggml;
}

/// The text spelling of q's format: name(q.format), or "ggml_<type>" ("ggml_q4_k") for ggml.
std::string quant_spelling(const QuantSpec& q);

/// Parses a format spelling of quant_spelling into q.format (and q.ggml_type); false if unknown.
bool parse_quant_spelling(std::string_view s, QuantSpec& q);

/// How a tensor's elements are arranged in memory.
enum class Layout : std::uint8_t {
  row_major, ///< dense, outermost dimension first (every activation, every Top value)
  panels,    ///< a Tpu weight [K, N] in the kernel library's 32-column panels (docs/kernels.md)
};

/// Documented limits of a TensorType, checked by the parser (with line:col), by op type
/// inference and by the verifier: every dimension in [0, kMaxDim] and at most kMaxElements
/// elements, so that element counts and byte sizes (up to 8 bytes an element) never overflow
/// int64 and anything larger than any real model is refused instead of wrapping around.
inline constexpr std::int64_t kMaxDim = std::int64_t{1} << 48;
/// Largest element count of a TensorType (2^48).
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;

/// A ranked tensor type with a static shape.
struct TensorType {
  std::vector<std::int64_t> shape;   ///< dimensions, outermost first; empty = scalar
  DType dtype = DType::f32;          ///< element type (stored type for quantized weights)
  std::optional<QuantSpec> quant;    ///< quantized weights, and kv_rows on an int8 KV cache
  Layout layout = Layout::row_major; ///< panels only on packed Tpu weights

  TensorType() = default;
  TensorType(std::vector<std::int64_t> s, DType t, std::optional<QuantSpec> q = std::nullopt,
             Layout l = Layout::row_major)
      : shape(std::move(s)), dtype(t), quant(q), layout(l) {}

  std::int64_t rank() const { return static_cast<std::int64_t>(shape.size()); }
  /// Why this type breaks the limits (a dimension outside [0, kMaxDim], more than kMaxElements
  /// elements), or nullopt when it is within them. Linear in the rank; never overflows.
  std::optional<std::string> limit_violation() const;
  /// Product of the dimensions (1 for a scalar). Throws Error(invalid_input) when the type
  /// breaks the limits (see limit_violation), so the product never overflows.
  std::int64_t num_elements() const;
  /// Storage bytes for the elements (sub-byte types packed; a kv_rows cache adds a 4-byte scale
  /// per row of its last dimension).
  std::int64_t byte_size() const {
    const std::int64_t n = num_elements();
    if (quant && quant->format == QuantFormat::kv_rows)
      return n + (shape.empty() || shape.back() == 0 ? 0 : n / shape.back() * 4);
    return ir::byte_size(dtype, n);
  }
  /// Dimension `i`, negative counting from the back. Throws Error(invalid_input) when the
  /// tensor has no such axis (e.g. dim(-1) of a scalar).
  std::int64_t dim(std::int64_t i) const;
  /// Same type with another shape.
  TensorType with_shape(std::vector<std::int64_t> s) const {
    return {std::move(s), dtype, quant, layout};
  }

  friend bool operator==(const TensorType&, const TensorType&) = default;

  /// str() for messages, shortened for a large rank ("tensor<1x2x...(20000 dims)xf32>").
  std::string summary() const;

  /// Text spelling, e.g. "tensor<1x128x896xf32>".
  std::string str() const;
};

/// The type of a KV cache (or of rows stored into one) of `shape` [B, S, kv_heads, d] in element
/// type `dtype`: f32 / f16 / bf16 as they are, i8 with the kv_rows layout (codes and a scale per
/// head row).
inline TensorType kv_cache_type(std::vector<std::int64_t> shape, DType dtype) {
  std::optional<QuantSpec> q;
  if (dtype == DType::i8)
    q = QuantSpec{QuantFormat::kv_rows};
  return TensorType(std::move(shape), dtype, q);
}

/// Why `t` misuses the kv_rows layout (on anything but a row-major i8 tensor, or with a group or
/// flags), or nullopt when it does not use it or uses it as kv_cache_type makes it. One rule for
/// the text parser and the bundle reader.
inline std::optional<std::string> kv_rows_violation(const TensorType& t) {
  if (!t.quant || t.quant->format != QuantFormat::kv_rows)
    return std::nullopt;
  if (t.dtype != DType::i8 || t.layout != Layout::row_major)
    return "quant<kv_rows> is an int8 KV cache: row-major i8 only";
  if (!(*t.quant == QuantSpec{QuantFormat::kv_rows}))
    return "quant<kv_rows> takes no group or flags";
  return std::nullopt;
}

/// Streams t.str() (so that messages can format a type lazily: `str_cat("got ", t)`).
inline std::ostream& operator<<(std::ostream& os, const TensorType& t) {
  return os << t.str();
}

/// Token rows of a [1, L, ...] tensor (L): what layer-group row tiles split and what moves with
/// the position; 0 when the tensor is not row-shaped. The tiler, planner, executor and loader
/// all use this one rule.
inline std::int64_t rows_of(const TensorType& t) {
  return t.rank() >= 2 && t.shape[0] == 1 ? t.shape[1] : 0;
}

/// Rows of `t` seen as a matrix [elements / last dimension, last dimension] (1 for a scalar):
/// what a kernel iterates over and what the core-split thresholds count.
inline std::int64_t matrix_rows(const TensorType& t) {
  return t.rank() ? t.num_elements() / std::max<std::int64_t>(t.shape.back(), 1) : 1;
}

/// "[1, 128, 896]" for messages.
std::string shape_str(const std::vector<std::int64_t>& shape);

} // namespace tpullm::ir
