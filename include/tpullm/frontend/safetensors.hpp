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
inline std::optional<DType> parse_dtype(std::string_view s) noexcept {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::i16, DType::i8, DType::u8, DType::boolean})
    if (dtype_name(t) == s)
      return t;
  return std::nullopt;
}

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
inline std::string shape_str(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

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
  std::vector<float> to_f32() const {
    const std::size_t n = static_cast<std::size_t>(numel());
    std::vector<float> out(n);
    switch (dtype) {
    case DType::f32:
      if (n)
        std::memcpy(out.data(), bytes.data(), bytes.size());
      return out;
    case DType::f16:
      for (std::size_t i = 0; i < n; ++i)
        out[i] = f16_to_f32(load<std::uint16_t>(i));
      return out;
    case DType::bf16:
      for (std::size_t i = 0; i < n; ++i)
        out[i] = bf16_to_f32(load<std::uint16_t>(i));
      return out;
    case DType::f64:
      for (std::size_t i = 0; i < n; ++i)
        out[i] = static_cast<float>(load<double>(i));
      return out;
    case DType::i64:
    case DType::i32:
    case DType::i16:
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      break;
    }
    throw_error(ErrorKind::unsupported, where(), "cannot convert ", dtype_name(dtype),
                " to f32 (only F32, F16, BF16, F64)");
  }

  /// Copies out as int64: any integer dtype (and BOOL as 0/1), widened exactly.
  /// Throws Error(unsupported) for float dtypes.
  std::vector<std::int64_t> to_i64() const {
    const std::size_t n = static_cast<std::size_t>(numel());
    std::vector<std::int64_t> out(n);
    switch (dtype) {
    case DType::i64:
      for (std::size_t i = 0; i < n; ++i)
        out[i] = load<std::int64_t>(i);
      return out;
    case DType::i32:
      for (std::size_t i = 0; i < n; ++i)
        out[i] = load<std::int32_t>(i);
      return out;
    case DType::i16:
      for (std::size_t i = 0; i < n; ++i)
        out[i] = load<std::int16_t>(i);
      return out;
    case DType::i8:
      for (std::size_t i = 0; i < n; ++i)
        out[i] = load<std::int8_t>(i);
      return out;
    case DType::u8:
    case DType::boolean:
      for (std::size_t i = 0; i < n; ++i)
        out[i] = load<std::uint8_t>(i);
      return out;
    case DType::f64:
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      break;
    }
    throw_error(ErrorKind::unsupported, where(), "cannot convert ", dtype_name(dtype),
                " to an integer type");
  }

  /// Copies out as int32: integer dtypes widened; I64 values outside int32 throw
  /// Error(invalid_input) naming the index. Float dtypes throw Error(unsupported).
  std::vector<std::int32_t> to_i32() const {
    if (dtype == DType::i32)
      return copy_as<std::int32_t>();
    const std::vector<std::int64_t> wide = to_i64();
    std::vector<std::int32_t> out(wide.size());
    for (std::size_t i = 0; i < wide.size(); ++i) {
      check(wide[i] >= std::numeric_limits<std::int32_t>::min() &&
                wide[i] <= std::numeric_limits<std::int32_t>::max(),
            ErrorKind::invalid_input, where(), "element ", i, " = ", wide[i],
            " does not fit in int32");
      out[i] = static_cast<std::int32_t>(wide[i]);
    }
    return out;
  }

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
inline nlohmann::json parse_json_strict(std::string_view text, const std::string& where) {
  std::vector<std::set<std::string>> keys;
  std::string dup;
  nlohmann::json::parser_callback_t cb = [&](int, nlohmann::json::parse_event_t ev,
                                             nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (ev) {
    case E::object_start:
      keys.emplace_back();
      break;
    case E::object_end:
      if (!keys.empty())
        keys.pop_back();
      break;
    case E::key:
      if (!keys.empty() && parsed.is_string()) {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second && dup.empty())
          dup = k;
      }
      break;
    case E::array_start:
    case E::array_end:
    case E::value:
      break;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorKind::invalid_input, where, "invalid JSON: ", e.what());
  }
  check(dup.empty(), ErrorKind::invalid_input, where, "invalid JSON: duplicate key '", dup, "'");
  return j;
}

/// A JSON value as a non-negative integer, or nullopt (negative, float, non-number).
inline std::optional<std::uint64_t> json_uint(const nlohmann::json& v) {
  if (v.is_number_unsigned())
    return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

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
                               std::shared_ptr<const void> keepalive, std::string source) {
    SafetensorsFile st;
    st.source_ = std::move(source);
    const std::string& where = st.source_;
    check(file.size() >= 8, ErrorKind::invalid_input, where, "file is ", file.size(),
          " bytes, too small for the 8-byte header length");
    std::uint64_t n = 0;
    std::memcpy(&n, file.data(), 8);
    check(n <= kMaxSafetensorsHeader, ErrorKind::invalid_input, where, "header length ", n,
          " is larger than the ", kMaxSafetensorsHeader, "-byte limit");
    check(n <= file.size() - 8, ErrorKind::invalid_input, where, "header length ", n,
          " exceeds the file size (", file.size(), " bytes; truncated file?)");
    check(n >= 2, ErrorKind::invalid_input, where, "header length ", n, " is too small");
    const std::string_view text(reinterpret_cast<const char*>(file.data() + 8),
                                static_cast<std::size_t>(n));
    const nlohmann::json header = detail::parse_json_strict(text, where + ": header");
    check(header.is_object(), ErrorKind::invalid_input, where, "header is not a JSON object but a ",
          header.type_name());
    const auto data = file.subspan(static_cast<std::size_t>(8 + n));
    st.data_size_ = data.size();

    struct Extent {
      std::uint64_t begin, end;
      const std::string* name;
    };
    std::vector<Extent> extents;
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        st.parse_metadata(entry);
        continue;
      }
      const std::string tw = str_cat(where, ": tensor '", name, "'");
      check(!name.empty(), ErrorKind::invalid_input, where, "empty tensor name in header");
      check(entry.is_object(), ErrorKind::invalid_input, tw, "header entry is not an object");
      const auto dt = entry.find("dtype");
      const auto sh = entry.find("shape");
      const auto off = entry.find("data_offsets");
      check(dt != entry.end() && dt->is_string(), ErrorKind::invalid_input, tw,
            "missing or non-string \"dtype\"");
      check(sh != entry.end() && sh->is_array(), ErrorKind::invalid_input, tw,
            "missing or non-array \"shape\"");
      check(off != entry.end() && off->is_array() && off->size() == 2, ErrorKind::invalid_input, tw,
            "\"data_offsets\" must be an array [begin, end]");
      const std::string& dts = dt->get_ref<const std::string&>();
      const auto dtype = parse_dtype(dts);
      check(dtype.has_value(), ErrorKind::unsupported, tw, "unsupported dtype '", dts,
            "' (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");

      TensorView v;
      v.name = name;
      v.dtype = *dtype;
      v.source = where;
      v.keepalive = keepalive;
      std::uint64_t numel = 1;
      for (const auto& d : *sh) {
        const auto dim = detail::json_uint(d);
        check(dim.has_value() &&
                  *dim <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
              ErrorKind::invalid_input, tw, "shape entry ", d.dump(),
              " is not a non-negative integer");
        const auto p = checked_mul(numel, *dim);
        check(p.has_value(), ErrorKind::invalid_input, tw, "shape ", sh->dump(),
              " has more elements than fit in 64 bits");
        numel = *p;
        v.shape.push_back(static_cast<std::int64_t>(*dim));
      }
      const auto nbytes = checked_mul(numel, dtype_size(*dtype));
      check(nbytes.has_value(), ErrorKind::invalid_input, tw, "byte size of shape ", sh->dump(),
            " x ", dts, " overflows 64 bits");
      const auto b = detail::json_uint((*off)[0]);
      const auto e = detail::json_uint((*off)[1]);
      check(b.has_value() && e.has_value(), ErrorKind::invalid_input, tw, "data_offsets ",
            off->dump(), " are not non-negative integers");
      check(*e >= *b, ErrorKind::invalid_input, tw, "data_offsets ", off->dump(), ": end < begin");
      check(*e <= data.size(), ErrorKind::invalid_input, tw, "data_offsets ", off->dump(),
            " run past the data region of ", data.size(), " bytes");
      check(*e - *b == *nbytes, ErrorKind::invalid_input, tw, "data_offsets ", off->dump(),
            " hold ", *e - *b, " bytes but shape ", shape_str(v.shape), " x ", dts, " needs ",
            *nbytes);
      v.bytes = data.subspan(static_cast<std::size_t>(*b), static_cast<std::size_t>(*nbytes));
      auto [it, inserted] = st.tensors_.emplace(name, std::move(v));
      check(inserted, ErrorKind::invalid_input, tw, "duplicate tensor name");
      extents.push_back({*b, *e, &it->first});
    }
    std::sort(extents.begin(), extents.end(), [](const Extent& x, const Extent& y) {
      return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
    });
    const Extent* prev = nullptr;
    for (const Extent& x : extents) {
      if (x.begin == x.end)
        continue; // empty tensors occupy no bytes
      if (prev)
        check(x.begin >= prev->end, ErrorKind::invalid_input, where, "tensors '", *prev->name,
              "' [", prev->begin, ", ", prev->end, ") and '", *x.name, "' [", x.begin, ", ", x.end,
              ") overlap");
      prev = &x;
    }
    st.keepalive_ = std::move(keepalive);
    return st;
  }

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
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& kv : tensors_)
      out.push_back(kv.first);
    return out;
  }
  /// True if a tensor named `name` exists.
  bool contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }
  /// The tensor named `name`, or nullptr.
  const TensorView* find(std::string_view name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  /// The tensor named `name`; throws Error(invalid_input) naming the file and the tensor.
  const TensorView& at(std::string_view name) const {
    const TensorView* v = find(name);
    if (!v)
      throw_error(ErrorKind::invalid_input, source_, "tensor '", name, "' not found");
    return *v;
  }

private:
  void parse_metadata(const nlohmann::json& m) {
    check(m.is_object(), ErrorKind::invalid_input, source_,
          "\"__metadata__\" is not a JSON object");
    for (const auto& [k, v] : m.items()) {
      check(v.is_string(), ErrorKind::invalid_input, source_, "\"__metadata__\" value for '", k,
            "' is not a string");
      metadata_[k] = v.get<std::string>();
    }
  }

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
inline std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw_error(ErrorKind::io, path.string(), "no such file");
  return read_regular_file(path, kMaxTextFileBytes);
}

/// A HuggingFace checkpoint: one `model.safetensors` or shards listed by
/// `model.safetensors.index.json` ({"weight_map": {tensor name: shard file name}}).
/// Lookups are by tensor name across all shards.
class Checkpoint {
public:
  /// Opens a checkpoint directory (index preferred over a single file) or a single
  /// .safetensors file, mapping (or with FileAccess::read, reading) every shard. Every tensor of
  /// an index's weight_map must exist in its shard; shard names must be plain file names inside
  /// the directory.
  static Checkpoint open(const std::filesystem::path& path, FileAccess access = FileAccess::map) {
    namespace fs = std::filesystem;
    std::error_code ec;
    Checkpoint ck;
    ck.dir_ = path;
    ck.access_ = access;
    if (fs::exists(path, ec) && !fs::is_directory(path, ec)) {
      ck.dir_ = path.parent_path();
      ck.add_single(SafetensorsFile::open(path, access));
      return ck;
    }
    check(fs::is_directory(path, ec), ErrorKind::io, path.string(),
          "checkpoint directory does not exist");
    const fs::path index = path / "model.safetensors.index.json";
    const fs::path single = path / "model.safetensors";
    if (fs::exists(index, ec) || fs::is_symlink(index, ec)) {
      ck.open_index(index);
      return ck;
    }
    check(fs::exists(single, ec) || fs::is_symlink(single, ec), ErrorKind::io, path.string(),
          "no model.safetensors or model.safetensors.index.json in checkpoint directory");
    ck.add_single(SafetensorsFile::open(single, access));
    return ck;
  }

  /// The checkpoint directory.
  const std::filesystem::path& dir() const noexcept { return dir_; }
  /// The opened shard files (one for a single-file checkpoint).
  const std::vector<SafetensorsFile>& shards() const noexcept { return shards_; }
  /// Number of tensors visible through the checkpoint.
  std::size_t size() const noexcept { return index_.size(); }
  /// All tensor names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(index_.size());
    for (const auto& kv : index_)
      out.push_back(kv.first);
    return out;
  }
  /// True if a tensor named `name` exists.
  bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }
  /// The tensor named `name`, or nullptr.
  const TensorView* find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &it->second;
  }
  /// The tensor named `name`; throws Error(invalid_input) naming the directory and the tensor.
  const TensorView& at(std::string_view name) const {
    const TensorView* v = find(name);
    if (!v)
      throw_error(ErrorKind::invalid_input, dir_.string(), "tensor '", name,
                  "' not found in checkpoint");
    return *v;
  }

private:
  void add_single(SafetensorsFile f) {
    index_ = f.tensors();
    shards_.push_back(std::move(f));
  }

  void open_index(const std::filesystem::path& index) {
    namespace fs = std::filesystem;
    const std::string where = index.string();
    const nlohmann::json j = detail::parse_json_strict(read_text_file(index), where);
    check(j.is_object(), ErrorKind::invalid_input, where, "index is not a JSON object");
    const auto wm = j.find("weight_map");
    check(wm != j.end() && wm->is_object(), ErrorKind::invalid_input, where,
          "missing or non-object \"weight_map\"");
    check(!wm->empty(), ErrorKind::invalid_input, where, "\"weight_map\" is empty");
    std::map<std::string, std::size_t> shard_of_file;
    std::vector<std::pair<std::string, std::size_t>> mapped;
    for (const auto& [name, file] : wm->items()) {
      check(file.is_string(), ErrorKind::invalid_input, where, "weight_map entry for '", name,
            "' is not a string");
      const std::string& fname = file.get_ref<const std::string&>();
      const fs::path fp(fname);
      check(!fname.empty() && fp.filename() == fp && fname != "." && fname != "..",
            ErrorKind::invalid_input, where, "weight_map entry for '", name, "' names '", fname,
            "', which is not a plain file name in the checkpoint directory");
      auto it = shard_of_file.find(fname);
      if (it == shard_of_file.end()) {
        const fs::path shard_path = dir_ / fp;
        try {
          shards_.push_back(SafetensorsFile::open(shard_path, access_));
        } catch (const Error& e) {
          throw Error(
              e.kind(), e.where(),
              str_cat(e.message(), " (shard listed in ", where, " for tensor '", name, "')"));
        }
        it = shard_of_file.emplace(fname, shards_.size() - 1).first;
      }
      mapped.emplace_back(name, it->second);
    }
    // Only the tensors named by weight_map are visible (as in transformers).
    for (const auto& [name, si] : mapped) {
      const TensorView* v = shards_[si].find(name);
      check(v != nullptr, ErrorKind::invalid_input, where, "tensor '", name,
            "' is mapped to shard '", shards_[si].source(), "' but that shard has no such tensor");
      index_.emplace(name, *v);
    }
  }

  std::filesystem::path dir_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, TensorView, std::less<>> index_;
  FileAccess access_ = FileAccess::map;
};

} // namespace tpullm::frontend
