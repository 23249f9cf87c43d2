#pragma once
/// Writing .safetensors files by streaming: every tensor (name, dtype, shape) is declared
/// first, so the header with all data offsets can be written before any data; then each
/// tensor's bytes are appended in declaration order, in chunks of any size. Nothing but the
/// header is held in memory, so a checkpoint larger than RAM can be written.
///
/// Output layout (what frontend/safetensors.hpp reads): [u64 little-endian N][N bytes of JSON
/// header, padded with spaces to a multiple of 8][data region]. Tensors are contiguous in the
/// data region in declaration order, without gaps; the header maps each name to {"dtype",
/// "shape", "data_offsets": [begin, end]} and carries "__metadata__" when any was set. The
/// output is a pure function of the declarations and the bytes written (byte-identical reruns).
/// The file is written through tpullm::OutputFile (support/output_file.hpp): it appears at its
/// path, complete, only when finish() succeeds, and every write is checked.

#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/output_file.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpullm::frontend {

/// Streams one .safetensors file: declare(...) every tensor, then write(...) their bytes in
/// declaration order, then finish(). Any misuse (a duplicate name, writing out of order or
/// more bytes than declared, finishing early) and any I/O failure throws tpullm::Error naming
/// the file and the tensor. A writer destroyed before finish() leaves `path` as it was (the
/// staged file is removed).
class SafetensorsWriter {
public:
  /// Writes to `path` (staged beside it from the first write, moved into place by finish()).
  explicit SafetensorsWriter(std::filesystem::path path, OutputOptions options = {})
      : path_(std::move(path)), options_(options) {}
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  /// Declares the next tensor: `name` (non-empty, unique, not "__metadata__"), element type and
  /// row-major shape (outermost first). Only before the first write().
  void declare(const std::string& name, DType dtype, std::vector<std::int64_t> shape);

  /// Sets a "__metadata__" entry (e.g. {"format", "pt"}). Only before the first write().
  void set_metadata(const std::string& key, const std::string& value) {
    check(!started_, ErrorKind::internal, path_.string(), "metadata set after writing began");
    metadata_[key] = value;
  }

  /// The header bytes (8-byte length + padded JSON) for the declarations so far.
  std::string header() const;

  /// Appends `bytes` to tensor `name`, which must be the first declared tensor not yet
  /// complete (tensors are written in declaration order; a tensor may take several chunks).
  /// The first call writes the header.
  void write(std::string_view name, std::span<const std::byte> bytes);

  /// Checks that every declared byte was written, then commits the file (flush, fsync, close,
  /// rename into place; OutputError naming the file on failure).
  void finish();

  /// Size of the data region declared so far, in bytes.
  std::uint64_t data_size() const { return data_size_; }
  /// Number of tensors declared.
  std::size_t size() const { return tensors_.size(); }

private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t begin, end;
    std::uint64_t written = 0;
  };

  std::string where(const std::string& name) const {
    return str_cat(path_.string(), ": tensor '", name, "'");
  }
  void start();
  void put(const void* p, std::size_t n) {
    out_->write(std::string_view(static_cast<const char*>(p), n));
  }
  void skip_complete() {
    while (current_ < tensors_.size() &&
           tensors_[current_].written == tensors_[current_].end - tensors_[current_].begin)
      ++current_;
  }

  std::filesystem::path path_;
  std::vector<Entry> tensors_;
  std::set<std::string> names_;
  std::map<std::string, std::string> metadata_;
  std::uint64_t data_size_ = 0;
  bool started_ = false;
  std::size_t current_ = 0;
  OutputOptions options_;
  std::optional<OutputFile> out_;
};

} // namespace tpullm::frontend
