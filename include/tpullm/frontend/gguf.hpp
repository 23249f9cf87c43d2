#pragma once
/// Reading GGUF files (llama.cpp's model format, versions 2 and 3), zero-copy over mmap.
///
/// File layout (all integers little-endian):
///   magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
///   kv_count x { string key | u32 value_type | value }
///   tensor_count x { string name | u32 n_dims | n_dims x u64 ne | u32 ggml_type | u64 offset }
///   padding to `general.alignment` (default 32, a power of two)
///   data region: tensor t's bytes at data_start + offset_t (each offset a multiple of the
///   alignment)
/// A string is u64 length + that many bytes (no terminator). Value types: 0 u8, 1 i8, 2 u16,
/// 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32 element type + u64 count + the
/// elements; arrays of arrays are accepted one level deep), 10 u64, 11 i64, 12 f64.
/// Tensor dims are ggml's `ne`: ne[0] is the innermost (contiguous) dimension, so a linear
/// weight stored as [ne0 = in_features, ne1 = out_features] is row-major [out, in], the
/// HuggingFace nn.Linear orientation; blocks of a quantized type run along ne[0].
///
/// Every bound is checked at open time (one line naming the file, and the key or tensor):
/// truncated files, version 1 or > 3, counts past kGgufMaxTensors / kGgufMaxKeys /
/// kGgufMaxArray, strings longer than kGgufMaxString or not UTF-8 (keys, tensor names and
/// string values), an alignment that is not a power of two, unknown ggml types, a row size
/// that is not a whole number of blocks, tensor data past the end of the file, misaligned or
/// overlapping tensors, duplicate keys or tensor names. Work and memory are bounded by the
/// file's size (no count is trusted before the bytes it implies are known to be there): every
/// metadata element parsed takes at least one byte of the file and at most sizeof(GgufScalar)
/// (or sizeof(GgufValue) for an array of arrays) bytes of memory; tensor data is never copied.
/// Also refused: a big-endian file (unsupported), an empty key or tensor name, a bool that is
/// not 0 or 1, a tensor of 0 or more than 4 dimensions, a dimension of 2^63 or more.
/// A known ggml type that tpullm cannot import (IQ2_XXS, TQ1_0, ...) parses; the importer
/// refuses it by name.

#include "tpullm/conversion/ggml_types.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/mapped_file.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tpullm::frontend {

/// Most tensors a GGUF may declare (a 400B model has a few thousand).
inline constexpr std::uint64_t kGgufMaxTensors = 1u << 20;
/// Most metadata keys.
inline constexpr std::uint64_t kGgufMaxKeys = 1u << 16;
/// Most elements of one metadata array (a 256k vocabulary's token list is within it).
inline constexpr std::uint64_t kGgufMaxArray = 1u << 24;
/// Longest string (key, tensor name or value; a chat template is well within it).
inline constexpr std::uint64_t kGgufMaxString = 1u << 24;
/// Most dimensions of a tensor (ggml's GGML_MAX_DIMS).
inline constexpr std::uint32_t kGgufMaxDims = 4;
/// Largest `general.alignment` (a power of two; llama.cpp stores it as u32 and writes 32).
inline constexpr std::uint64_t kGgufMaxAlignment = std::uint64_t{1} << 30;

/// GGUF metadata value type ids, as stored.
enum class GgufValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

/// The spelling of a value type in messages ("u32", "string", "array", ...).
std::string_view gguf_value_type_name(GgufValueType t) noexcept;

/// A scalar metadata value: integers widened to int64 / uint64 (u64 kept unsigned), floats to
/// double, bool, string.
using GgufScalar = std::variant<std::int64_t, std::uint64_t, double, bool, std::string>;

/// One metadata value: a scalar or an array of scalars (its stored element type kept), or an
/// array of arrays (rare; kept as nested values).
struct GgufValue {
  /// The stored type (array for both array forms).
  GgufValueType type = GgufValueType::u8;
  /// Element type of an array (array of arrays: array).
  GgufValueType elem_type = GgufValueType::u8;
  /// A scalar's value (unused for arrays).
  GgufScalar scalar;
  /// An array of scalars' elements.
  std::vector<GgufScalar> array;
  /// An array of arrays' elements.
  std::vector<GgufValue> nested;

  /// True for both array forms.
  bool is_array() const noexcept { return type == GgufValueType::array; }
};

/// One tensor of a GGUF: a zero-copy view of its stored blocks.
struct GgufTensor {
  /// Tensor name as stored (e.g. "blk.0.attn_q.weight").
  std::string name;
  /// ggml's ne, innermost first (ne[0] = elements of one row); 1 to 4 entries.
  std::vector<std::int64_t> ne;
  /// Storage type.
  conversion::GgmlType type = conversion::GgmlType::f32;
  /// Offset of the data from the start of the data region.
  std::uint64_t offset = 0;
  /// The stored bytes: rows() rows of row_bytes(type, ne[0]) bytes.
  std::span<const std::byte> bytes;
  /// Owner of the memory `bytes` points into (the mapped file).
  std::shared_ptr<const void> keepalive;
  /// The file, for error messages.
  std::string source;

  /// Product of ne.
  std::int64_t numel() const noexcept;
  /// Product of ne[1..]: rows of ne[0] elements.
  std::int64_t rows() const noexcept;
  /// "<source>: tensor '<name>'".
  std::string where() const { return str_cat(source, ": tensor '", name, "'"); }
};

/// One parsed GGUF file: metadata and tensor table. Cheap to copy (views share the mapping).
class GgufFile {
public:
  /// Maps (or reads, with FileAccess::read) and parses `path`. Throws Error(invalid_input)
  /// naming the path on any inconsistency listed in the file comment, Error(unsupported) for a
  /// version other than 2 / 3 or a ggml type tpullm does not know, Error(io) when the file
  /// cannot be opened; a FIFO, directory or device is refused without blocking.
  static GgufFile open(const std::filesystem::path& path, FileAccess access = FileAccess::map);

  /// Parses an in-memory GGUF image (`keepalive` owns it; may be null when the caller keeps
  /// the bytes alive); `source` names it in errors.
  static GgufFile parse(std::span<const std::byte> file, std::shared_ptr<const void> keepalive,
                        std::string source);

  /// True when `path` is a regular file starting with the GGUF magic (reads 4 bytes).
  static bool looks_like_gguf(const std::filesystem::path& path) noexcept;

  /// The path (or name) given to open / parse, as errors show it.
  const std::string& source() const noexcept { return source_; }
  /// The file's GGUF version (2 or 3).
  std::uint32_t version() const noexcept { return version_; }
  /// The data alignment in bytes (`general.alignment`, default 32).
  std::uint64_t alignment() const noexcept { return alignment_; }
  /// Metadata by key (sorted by key, not in file order).
  const std::map<std::string, GgufValue, std::less<>>& metadata() const noexcept { return kv_; }
  /// Tensors in file order.
  const std::vector<GgufTensor>& tensors() const noexcept { return tensors_; }

  /// The value of `key`, or nullptr.
  const GgufValue* find(std::string_view key) const;
  /// The tensor named `name`, or nullptr.
  const GgufTensor* find_tensor(std::string_view name) const;

  /// Typed reads: nullopt when the key is absent; Error(invalid_input) naming the key when it
  /// holds another type. Integers of any stored integer type that fit; floats from f32 / f64
  /// (or an integer type, converted).
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  /// An array of strings (e.g. tokenizer.ggml.tokens); Error unless every element is a string.
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  /// An array of integers (token_type, eos ids); Error unless every element is an integer.
  std::optional<std::vector<std::int64_t>> get_int_array(std::string_view key) const;
  /// An array of numbers (any integer or float element type) as double (tokenizer.ggml.scores).
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;

private:
  std::string source_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> by_name_;
  std::shared_ptr<const void> keepalive_;
};

} // namespace tpullm::frontend
