#pragma once
/// Reading .safetensors files and HuggingFace checkpoint directories, zero-copy over mmap.
///
/// File layout: [u64 little-endian N][N bytes of JSON header][data region]. The header maps each
/// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the
/// first byte of the data region, plus an optional "__metadata__" string->string map.
/// Every bound is checked at open time; a TensorView handed out is always in range and its byte
/// size always equals product(shape) * dtype_size.

#include "tpullm/support/checked.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/float16.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/mapped_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpullm::frontend {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts are not supported");

/// Element type of a stored tensor (the safetensors dtype strings F64 ... BOOL).
enum class DType { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean };

/// Size of one element of `t` in bytes.
inline constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
  case DType::f64:
  case DType::i64:
    return 8;
  case DType::f32:
  case DType::i32:
    return 4;
  case DType::f16:
  case DType::bf16:
  case DType::i16:
    return 2;
  case DType::i8:
  case DType::u8:
  case DType::boolean:
    return 1;
  }
  return 0;
}

/// The safetensors spelling of `t` ("F32", "BF16", "BOOL", ...).
inline constexpr std::string_view dtype_name(DType t) noexcept {
  switch (t) {
  case DType::f64:
    return "F64";
  case DType::f32:
    return "F32";
  case DType::f16:
    return "F16";
  case DType::bf16:
    return "BF16";
  case DType::i64:
    return "I64";
  case DType::i32:
    return "I32";
  case DType::i16:
    return "I16";
  case DType::i8:
    return "I8";
  case DType::u8:
    return "U8";
  case DType::boolean:
    return "BOOL";
  }
  return "?";
}

/// Parses a safetensors dtype string; nullopt for anything not in DType (e.g. "F8_E4M3").
std::optional<DType> parse_dtype(std::string_view s) noexcept;

/// True for the floating dtypes F64, F32, F16, BF16.
inline constexpr bool is_float(DType t) noexcept {
  return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

/// The DType stored as C++ type T (float, double, bf16_t, f16_t, int8_t ... int64_t, bool).
template <class T>
inline constexpr DType dtype_of = [] {
  if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, f16_t>)
    return DType::f16;
  else if constexpr (std::is_same_v<T, bf16_t>)
    return DType::bf16;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DType::i64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::i32;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return DType::i16;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return DType::i8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DType::u8;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::boolean;
  else
    static_assert(sizeof(T) == 0, "no safetensors dtype for this C++ type");
}();

/// Formats a shape as "[a, b, c]".
std::string shape_str(std::span<const std::int64_t> shape);

/// a * b, or nullopt on overflow of uint64 (tpullm::checked_mul for uint64_t).
inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) noexcept {
  return tpullm::checked_mul<std::uint64_t>(a, b);
}

/// A zero-copy view of one stored tensor: row-major (C order) elements of `dtype` with `shape`,
/// little-endian, in `bytes` (bytes.size() == numel() * dtype_size(dtype)). The bytes may be
/// misaligned for the dtype: use the copying accessors (to_f32, to_i32, copy_as) or check
/// is_aligned() before data<T>(). `keepalive` owns the memory behind `bytes`.
struct TensorView {
  /// Tensor name as stored in the file (e.g. "model.norm.weight").
  std::string name;
  /// Element type.
  DType dtype = DType::f32;
  /// Dimensions, outermost first; empty for a scalar.
  std::vector<std::int64_t> shape;
  /// The raw little-endian element bytes.
  std::span<const std::byte> bytes;
  /// Owner of the memory `bytes` points into (the mapped file), or null for borrowed memory.
  std::shared_ptr<const void> keepalive;
  /// Where the tensor came from (file path), for error messages.
  std::string source;

  /// Number of elements (1 for a scalar).
  std::int64_t numel() const noexcept {
    return static_cast<std::int64_t>(bytes.size() / dtype_size(dtype));
  }
  /// Number of dimensions.
  std::size_t rank() const noexcept { return shape.size(); }
  /// "<source>: tensor '<name>'", the location used in error messages.
  std::string where() const { return str_cat(source, ": tensor '", name, "'"); }
  /// True when bytes.data() is aligned for the dtype (always true for a 1-byte dtype).
  bool is_aligned() const noexcept {
    return reinterpret_cast<std::uintptr_t>(bytes.data()) % dtype_size(dtype) == 0;
  }

  /// Zero-copy typed span; throws Error unless dtype_of<T> == dtype and the data is aligned.
  template <class T>
  std::span<const T> data() const {
    require_dtype(dtype_of<T>, "data<T>()");
    check(is_aligned(), ErrorKind::unsupported, where(), "data is not aligned to ",
          dtype_size(dtype), " bytes for zero-copy access; use a copying accessor");
    return {reinterpret_cast<const T*>(bytes.data()), static_cast<std::size_t>(numel())};
  }

  /// Copies the elements out as T; requires dtype_of<T> == dtype (alignment-safe memcpy).
  template <class T>
  std::vector<T> copy_as() const {
    require_dtype(dtype_of<T>, "copy_as<T>()");
    std::vector<T> out(static_cast<std::size_t>(numel()));
    if (!out.empty())
      std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }

  /// Copies out as f32: F32 as is, F16/BF16 widened exactly, F64 rounded to nearest.
  /// Throws Error(unsupported) for integer and bool dtypes.
  std::vector<float> to_f32() const;

  /// Copies out as int64: any integer dtype (and BOOL as 0/1), widened exactly.
  /// Throws Error(unsupported) for float dtypes.
  std::vector<std::int64_t> to_i64() const;

  /// Copies out as int32: integer dtypes widened; I64 values outside int32 throw
  /// Error(invalid_input) naming the index. Float dtypes throw Error(unsupported).
  std::vector<std::int32_t> to_i32() const;

private:
  void require_dtype(DType want, std::string_view what) const {
    check(dtype == want, ErrorKind::invalid_input, where(), what, " expects dtype ",
          dtype_name(want), " but the tensor is ", dtype_name(dtype));
  }
  template <class T>
  T load(std::size_t i) const noexcept {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  }
};

/// Largest header accepted (the reference implementation's limit): 100 MiB.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100ull << 20;

namespace detail {

/// Parses JSON text, throwing Error(invalid_input, where, ...) on syntax errors and on
/// duplicate keys in any object (nlohmann would silently keep the last one).
nlohmann::json parse_json_strict(std::string_view text, const std::string& where);

/// A JSON value as a non-negative integer, or nullopt (negative, float, non-number).
std::optional<std::uint64_t> json_uint(const nlohmann::json& v);

} // namespace detail

/// One parsed .safetensors file: an immutable table of TensorViews into the (mapped) bytes.
/// Cheap to copy (the views share the mapping).
class SafetensorsFile {
public:
  /// Maps (or, with FileAccess::read, reads) and parses `path`. Throws Error naming the path
  /// (and tensor) on any inconsistency; a FIFO, directory or device is refused without blocking.
  static SafetensorsFile open(const std::filesystem::path& path,
                              FileAccess access = FileAccess::map) {
    auto file = MappedFile::open(path, access);
    const auto bytes = file->bytes();
    return parse(bytes, std::move(file), path.string());
  }

  /// Parses an in-memory safetensors image. `keepalive` owns `file` (may be null when the caller
  /// guarantees the bytes outlive the result); `source` names it in errors.
  static SafetensorsFile parse(std::span<const std::byte> file,
                               std::shared_ptr<const void> keepalive, std::string source);

  /// The file path (or the name given to parse()).
  const std::string& source() const noexcept { return source_; }
  /// The optional "__metadata__" map (e.g. {"format": "pt"}).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// Number of tensors.
  std::size_t size() const noexcept { return tensors_.size(); }
  /// Size of the data region after the header, in bytes.
  std::uint64_t data_size() const noexcept { return data_size_; }
  /// All tensors, ordered by name.
  const std::map<std::string, TensorView, std::less<>>& tensors() const noexcept {
    return tensors_;
  }
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  /// True if a tensor named `name` exists.
  bool contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }
  /// The tensor named `name`, or nullptr.
  const TensorView* find(std::string_view name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  /// The tensor named `name`; throws Error(invalid_input) naming the file and the tensor.
  const TensorView& at(std::string_view name) const;

private:
  void parse_metadata(const nlohmann::json& m);

  std::string source_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::uint64_t data_size_ = 0;
  std::shared_ptr<const void> keepalive_;
};

/// Largest text file read_text_file accepts (config.json, the shard index): 64 MiB.
inline constexpr std::size_t kMaxTextFileBytes = std::size_t{64} << 20;

/// Reads a whole (small) text file such as config.json; throws Error(io) naming the path when
/// it is missing or not a regular file (a FIFO or device is refused without blocking), and
/// Error(invalid_input) when larger than kMaxTextFileBytes.
std::string read_text_file(const std::filesystem::path& path);

/// A HuggingFace checkpoint: one `model.safetensors` or shards listed by
/// `model.safetensors.index.json` ({"weight_map": {tensor name: shard file name}}).
/// Lookups are by tensor name across all shards.
class Checkpoint {
public:
  /// Opens a checkpoint directory (index preferred over a single file) or a single
  /// .safetensors file, mapping (or with FileAccess::read, reading) every shard. Every tensor of
  /// an index's weight_map must exist in its shard; shard names must be plain file names inside
  /// the directory.
  static Checkpoint open(const std::filesystem::path& path, FileAccess access = FileAccess::map);

  /// The checkpoint directory.
  const std::filesystem::path& dir() const noexcept { return dir_; }
  /// The opened shard files (one for a single-file checkpoint).
  const std::vector<SafetensorsFile>& shards() const noexcept { return shards_; }
  /// Number of tensors visible through the checkpoint.
  std::size_t size() const noexcept { return index_.size(); }
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  /// True if a tensor named `name` exists.
  bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }
  /// The tensor named `name`, or nullptr.
  const TensorView* find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &it->second;
  }
  /// The tensor named `name`; throws Error(invalid_input) naming the directory and the tensor.
  const TensorView& at(std::string_view name) const;

private:
  void add_single(SafetensorsFile f) {
    index_ = f.tensors();
    shards_.push_back(std::move(f));
  }

  void open_index(const std::filesystem::path& index);

  std::filesystem::path dir_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, TensorView, std::less<>> index_;
  FileAccess access_ = FileAccess::map;
};

} // namespace tpullm::frontend
