#pragma once
/// Writing GGUF files (version 3 by default, 2 on request) in the layout frontend/gguf.hpp
/// reads: header, metadata in the order it was set, tensor infos in the order the tensors were
/// added, padding to the alignment, then each tensor's bytes at an aligned offset (padded after
/// each tensor, as llama.cpp's writers do). Tensors of any ggml type are given as their raw
/// stored bytes (whole blocks; see conversion/ggml_types.hpp), so tests can write quantized
/// files without a quantizer.
///
/// The writer refuses (Error(invalid_input), one line naming the file and the key or tensor)
/// everything the reader refuses: empty, non-UTF-8 or duplicate keys and tensor names, strings
/// or arrays past the reader's limits, values that do not fit their declared type, a row that
/// is not a whole number of blocks, byte counts that do not match the shape. What it writes
/// therefore always reads back. Tests that need broken files patch the bytes of image().
///
/// Output goes through tpullm::OutputFile (support/output_file.hpp): the file appears at its
/// path, complete, only when finish() succeeds; every write is checked. The output is a pure
/// function of the calls made (byte-identical reruns).

#include "tpullm/conversion/ggml_types.hpp"
#include "tpullm/frontend/gguf.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/output_file.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpullm::frontend {

/// Builds one GGUF file in memory (metadata, tensor table, tensor bytes) and writes it with
/// finish(), or returns its bytes with image(). Not copyable; cheap to move.
class GgufWriter {
public:
  /// A writer whose finish() writes `path` (may be empty when only image() is used).
  explicit GgufWriter(std::filesystem::path path = {}, OutputOptions options = {})
      : path_(std::move(path)), options_(options) {}
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;
  GgufWriter(GgufWriter&&) = default;
  GgufWriter& operator=(GgufWriter&&) = default;

  /// The GGUF version written: 2 or 3 (the default; the two share one layout).
  void set_version(std::uint32_t version);
  /// The data alignment (a power of two, 1 .. 2^30). Also stored as the u32 key
  /// `general.alignment` (at the position of the first call), which the reader honours.
  void set_alignment(std::uint64_t alignment);

  /// Sets metadata `key` to `value` (a scalar of `value.type`, or an array of `elem_type`
  /// holding `array`, or of arrays holding `nested`, one level deep). Integer scalars must fit
  /// the declared type, strings must be UTF-8. `general.alignment` goes through
  /// set_alignment(). Keys are unique.
  void set(std::string key, GgufValue value);

  /// Scalar setters, one per GGUF value type.
  void set_u8(std::string key, std::uint8_t v) {
    set_scalar(std::move(key), GgufValueType::u8, std::int64_t{v});
  }
  void set_i8(std::string key, std::int8_t v) {
    set_scalar(std::move(key), GgufValueType::i8, std::int64_t{v});
  }
  void set_u16(std::string key, std::uint16_t v) {
    set_scalar(std::move(key), GgufValueType::u16, std::int64_t{v});
  }
  void set_i16(std::string key, std::int16_t v) {
    set_scalar(std::move(key), GgufValueType::i16, std::int64_t{v});
  }
  void set_u32(std::string key, std::uint32_t v) {
    set_scalar(std::move(key), GgufValueType::u32, std::int64_t{v});
  }
  void set_i32(std::string key, std::int32_t v) {
    set_scalar(std::move(key), GgufValueType::i32, std::int64_t{v});
  }
  void set_u64(std::string key, std::uint64_t v) {
    set_scalar(std::move(key), GgufValueType::u64, v);
  }
  void set_i64(std::string key, std::int64_t v) {
    set_scalar(std::move(key), GgufValueType::i64, v);
  }
  void set_f32(std::string key, float v) {
    set_scalar(std::move(key), GgufValueType::f32, double{v});
  }
  void set_f64(std::string key, double v) { set_scalar(std::move(key), GgufValueType::f64, v); }
  void set_bool(std::string key, bool v) { set_scalar(std::move(key), GgufValueType::boolean, v); }
  void set_string(std::string key, std::string v) {
    set_scalar(std::move(key), GgufValueType::string, std::move(v));
  }

  /// An array of `elem` (any type but array) holding `values` (each convertible as for set()).
  void set_array(std::string key, GgufValueType elem, std::vector<GgufScalar> values);
  /// An array of strings (tokenizer.ggml.tokens, tokenizer.ggml.merges).
  void set_string_array(std::string key, const std::vector<std::string>& values);
  /// An array of i32 (tokenizer.ggml.token_type).
  void set_i32_array(std::string key, std::span<const std::int32_t> values);
  /// An array of f32 (tokenizer.ggml.scores).
  void set_f32_array(std::string key, std::span<const float> values);

  /// Adds tensor `name` of ggml type `type` with dims `ne` (innermost first, 1 to 4 entries,
  /// each >= 0; ne[0] a whole number of the type's blocks) and its stored bytes (copied; exactly
  /// rows x row_bytes(type, ne[0])). Any ggml type, importable or not.
  void add_tensor(std::string name, conversion::GgmlType type, std::vector<std::int64_t> ne,
                  std::span<const std::byte> bytes);
  /// An F32 tensor from floats (ne as for add_tensor; values.size() = product of ne).
  void add_tensor_f32(std::string name, std::vector<std::int64_t> ne,
                      std::span<const float> values);

  /// The whole file's bytes.
  std::vector<std::byte> image() const;
  /// Writes the file to the path given at construction (atomically; OutputError naming the
  /// file on failure).
  void finish() const;

  /// Byte offset of tensor `index`'s data from the start of the data region (as stored).
  std::uint64_t tensor_offset(std::size_t index) const;
  /// Byte offset of the data region from the start of the file.
  std::uint64_t data_start() const { return align_up(header_bytes().size()); }

private:
  struct Kv {
    std::string key;
    GgufValue value;
  };
  struct Tensor {
    std::string name;
    conversion::GgmlType type;
    std::vector<std::int64_t> ne;
    std::vector<std::byte> bytes;
  };

  void set_scalar(std::string key, GgufValueType type, GgufScalar v);
  std::string where() const { return path_.empty() ? std::string("<gguf image>") : path_.string(); }
  std::string where_key(std::string_view key) const {
    return str_cat(where(), ": key '", key, "'");
  }
  void check_key(const std::string& key) const;
  void check_value(const std::string& key, const GgufValue& v, int depth) const;
  std::uint64_t align_up(std::uint64_t n) const {
    return (n + alignment_ - 1) / alignment_ * alignment_;
  }
  /// Header, metadata and tensor infos (without the padding before the data region).
  std::string header_bytes() const;

  std::filesystem::path path_;
  OutputOptions options_;
  std::uint32_t version_ = 3;
  std::uint64_t alignment_ = 32;
  std::vector<Kv> kv_;
  std::set<std::string, std::less<>> keys_;
  std::vector<Tensor> tensors_;
  std::set<std::string, std::less<>> names_;
};

} // namespace tpullm::frontend
