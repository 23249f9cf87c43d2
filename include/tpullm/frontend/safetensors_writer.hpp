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
  void declare(const std::string& name, DType dtype, std::vector<std::int64_t> shape) {
    check(!started_, ErrorKind::internal, where(name), "declared after writing began");
    check(!name.empty() && name != "__metadata__", ErrorKind::invalid_input, path_.string(),
          "invalid tensor name '", name, "'");
    check(names_.insert(name).second, ErrorKind::invalid_input, where(name), "declared twice");
    std::uint64_t n = dtype_size(dtype);
    for (auto d : shape) {
      check(d >= 0, ErrorKind::invalid_input, where(name), "negative dimension in shape ",
            shape_str(shape));
      const auto p = checked_mul(n, static_cast<std::uint64_t>(d));
      check(p.has_value(), ErrorKind::invalid_input, where(name), "shape ", shape_str(shape),
            " overflows 64 bits");
      n = *p;
    }
    tensors_.push_back({name, dtype, std::move(shape), data_size_, data_size_ + n});
    data_size_ += n;
  }

  /// Sets a "__metadata__" entry (e.g. {"format", "pt"}). Only before the first write().
  void set_metadata(const std::string& key, const std::string& value) {
    check(!started_, ErrorKind::internal, path_.string(), "metadata set after writing began");
    metadata_[key] = value;
  }

  /// The header bytes (8-byte length + padded JSON) for the declarations so far.
  std::string header() const {
    nlohmann::json h = nlohmann::json::object();
    if (!metadata_.empty())
      h["__metadata__"] = metadata_;
    for (const auto& t : tensors_)
      h[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                   {"shape", t.shape},
                   {"data_offsets", {t.begin, t.end}}};
    std::string json = h.dump();
    json.append((8 - json.size() % 8) % 8, ' ');
    const std::uint64_t n = json.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &n, 8);
    return out + json;
  }

  /// Appends `bytes` to tensor `name`, which must be the first declared tensor not yet
  /// complete (tensors are written in declaration order; a tensor may take several chunks).
  /// The first call writes the header.
  void write(std::string_view name, std::span<const std::byte> bytes) {
    if (!started_)
      start();
    if (bytes.empty())
      return;
    skip_complete();
    check(current_ < tensors_.size(), ErrorKind::internal, where(std::string(name)),
          "written after every declared tensor is complete");
    Entry& t = tensors_[current_];
    check(t.name == name, ErrorKind::internal, where(std::string(name)),
          "written out of order: tensor '", t.name, "' is not complete yet");
    check(bytes.size() <= t.end - t.begin - t.written, ErrorKind::internal, where(t.name),
          bytes.size(), " more bytes than its remaining ", t.end - t.begin - t.written);
    put(bytes.data(), bytes.size());
    t.written += bytes.size();
  }

  /// Checks that every declared byte was written, then commits the file (flush, fsync, close,
  /// rename into place; OutputError naming the file on failure).
  void finish() {
    if (!started_)
      start();
    skip_complete();
    check(current_ == tensors_.size(), ErrorKind::internal,
          current_ < tensors_.size() ? where(tensors_[current_].name) : path_.string(),
          "finished before all its bytes were written");
    out_->commit();
  }

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
  void start() {
    started_ = true;
    out_.emplace(path_, options_);
    const std::string h = header();
    put(h.data(), h.size());
  }
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
