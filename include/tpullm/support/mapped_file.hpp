#pragma once
/// Read-only access to a whole file, zero-copy through POSIX mmap or copied into memory.
/// Zero-copy views into the bytes hold a std::shared_ptr<const MappedFile> so the memory
/// outlives every view.
///
/// Truncation while mapped (the SIGBUS decision). A mapping reflects the file as it is *now*:
/// if another process truncates the file while it is mapped, touching a page past the new end
/// raises SIGBUS, which by default kills the process with no message. Nothing checked at open
/// time can rule that out, so tpullm does two things:
///  - FileAccess::read (the tools' `--no-mmap`) copies the file into private memory at open:
///    later changes to the file cannot affect the run, at the cost of the file's size in RAM;
///  - install_mapped_file_fault_handler() (the tools call it first thing) turns such a SIGBUS
///    into one line on stderr naming the file ("... was truncated or changed while in use ...;
///    rerun, or rerun with --no-mmap ...": every tpullm command that maps a file takes it) and
///    exit status 2, instead of a crash. A SIGBUS at an address
///    outside every MappedFile is a real bug and keeps the default action.

#include "tpullm/support/temp_registry.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/input_file.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tpullm {

/// How MappedFile holds a file's bytes.
enum class FileAccess {
  map,  ///< mmap the file (zero-copy, lazy); see the note above on truncation
  read, ///< read the whole file into private memory at open (immune to later changes)
};

namespace detail {

/// One registered mapping, readable from a signal handler: state 0 free, 1 being written,
/// 2 ready. The path is truncated to fit.
struct MappingSlot {
  std::atomic<int> state{0};
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  char path[480] = {};
};
inline constexpr int kMappingSlots = 64;
inline MappingSlot g_mapping_slots[kMappingSlots];
inline char g_fault_program[64] = "tpullm";

/// Records [data, data + size) as a mapping of `path`; returns the slot or -1 when all are
/// in use (the handler then reports the fault without the file name).
int register_mapping(const std::byte* data, std::size_t size, const std::string& path);

inline void unregister_mapping(int slot) noexcept {
  if (slot >= 0)
    g_mapping_slots[slot].state.store(0, std::memory_order_release);
}

void write_stderr(const char* s) noexcept;

/// SIGBUS handler: async-signal-safe (write, _exit, signal).
void on_mapping_fault(int sig, siginfo_t* info, void*);

} // namespace detail

/// Installs the SIGBUS handler described at the top of this file for the whole process;
/// `program` prefixes its message. Call once, early, from a tool's main().
void install_mapped_file_fault_handler(const char* program);

/// A read-only view of a whole regular, non-empty file: mapped (FileAccess::map) or copied into
/// private memory (FileAccess::read). Move-only; usually held through std::shared_ptr (see
/// MappedFile::open) so that views can share ownership.
class MappedFile {
public:
  /// Opens `path` (see open_regular_file: FIFOs, directories and devices are refused without
  /// blocking). Throws Error(io) naming the path when the file is missing, unreadable, not a
  /// regular file or cannot be mapped / read, Error(invalid_input) when it is empty.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path,
                                                FileAccess access = FileAccess::map) {
    return std::make_shared<const MappedFile>(map_tag{}, path, access);
  }

  struct map_tag {};
  /// Use MappedFile::open; public only for std::make_shared.
  MappedFile(map_tag, const std::filesystem::path& path, FileAccess access = FileAccess::map);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept
      : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)), slot_(std::exchange(o.slot_, -1)), access_(o.access_),
        identity_(o.identity_) {}
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      slot_ = std::exchange(o.slot_, -1);
      access_ = o.access_;
      identity_ = o.identity_;
    }
    return *this;
  }
  ~MappedFile() { unmap(); }

  /// The whole file: [size()] bytes, page-aligned start.
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  /// Size of the file in bytes (> 0).
  std::size_t size() const noexcept { return size_; }
  /// The path the file was opened from.
  const std::filesystem::path& path() const noexcept { return path_; }
  /// True when the bytes are a live mapping of the file (FileAccess::map).
  bool is_mapped() const noexcept { return access_ == FileAccess::map; }
  /// The file's identity as fstat saw it on the descriptor the bytes came from.
  const FileIdentity& identity() const noexcept { return identity_; }

private:
  void unmap() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  int slot_ = -1;
  FileAccess access_ = FileAccess::map;
  FileIdentity identity_;
};

} // namespace tpullm
