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
///    into one line on stderr naming the file ("... was truncated or changed while in use;
///    rerun, or use --no-mmap") and exit status 2, instead of a crash. A SIGBUS at an address
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
inline int register_mapping(const std::byte* data, std::size_t size, const std::string& path) {
  for (int i = 0; i < kMappingSlots; ++i) {
    int expected = 0;
    MappingSlot& s = g_mapping_slots[i];
    if (!s.state.compare_exchange_strong(expected, 1, std::memory_order_acquire))
      continue;
    s.begin = reinterpret_cast<std::uintptr_t>(data);
    s.end = s.begin + size;
    const std::size_t n = std::min(path.size(), sizeof s.path - 1);
    std::memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

inline void unregister_mapping(int slot) noexcept {
  if (slot >= 0)
    g_mapping_slots[slot].state.store(0, std::memory_order_release);
}

inline void write_stderr(const char* s) noexcept {
  std::size_t n = 0;
  while (s[n] != '\0')
    ++n;
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0)
      return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

/// SIGBUS handler: async-signal-safe (write, _exit, signal).
inline void on_mapping_fault(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<std::uintptr_t>(info ? info->si_addr : nullptr);
  for (auto& s : g_mapping_slots) {
    if (s.state.load(std::memory_order_acquire) != 2 || addr < s.begin || addr >= s.end)
      continue;
    write_stderr(g_fault_program);
    write_stderr(": I/O error: ");
    write_stderr(s.path);
    write_stderr(": the file was truncated or changed while in use (SIGBUS on its memory "
                 "mapping); rerun (import and verify also take --no-mmap to read checkpoints into "
                 "memory)\n");
    temp_registry::detail::remove_all(); // no temporary output survives the exit
    ::_exit(2);
  }
  // Not one of our mappings: a genuine bug. Restore the default action and re-raise.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

} // namespace detail

/// Installs the SIGBUS handler described at the top of this file for the whole process;
/// `program` prefixes its message. Call once, early, from a tool's main().
inline void install_mapped_file_fault_handler(const char* program) {
  const std::size_t n = std::min(std::strlen(program), sizeof detail::g_fault_program - 1);
  std::memcpy(detail::g_fault_program, program, n);
  detail::g_fault_program[n] = '\0';
  struct sigaction sa {};
  sa.sa_sigaction = &detail::on_mapping_fault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

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
  MappedFile(map_tag, const std::filesystem::path& path, FileAccess access = FileAccess::map)
      : path_(path), access_(access) {
    const std::string where = path.string();
    struct stat st {};
    UniqueFd fd = open_regular_file(path, &st);
    if (st.st_size <= 0)
      throw_error(ErrorKind::invalid_input, where, "file is empty");
    const auto size = static_cast<std::size_t>(st.st_size);
    if (access == FileAccess::map) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        throw_error(ErrorKind::io, where, "cannot mmap ", size, " bytes: ", std::strerror(e));
      }
      data_ = static_cast<const std::byte*>(p);
      size_ = size;
      slot_ = detail::register_mapping(data_, size_, where);
      return;
    }
    // FileAccess::read: private anonymous pages (page-aligned, like a mapping), filled by read().
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      throw_error(ErrorKind::io, where, "cannot allocate ", size,
                  " bytes to read the file: ", std::strerror(e));
    }
    data_ = static_cast<const std::byte*>(p);
    size_ = size;
    auto* dst = static_cast<char*>(p);
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = ::read(fd.get(), dst + done, size - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : 0;
        unmap();
        if (e != 0)
          throw_error(ErrorKind::io, where, "read failed: ", std::strerror(e));
        throw_error(ErrorKind::io, where, "file shrank while being read (", done, " of ", size,
                    " bytes)");
      }
      done += static_cast<std::size_t>(n);
    }
    ::mprotect(p, size, PROT_READ);
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept
      : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)), slot_(std::exchange(o.slot_, -1)), access_(o.access_) {}
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      slot_ = std::exchange(o.slot_, -1);
      access_ = o.access_;
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

private:
  void unmap() noexcept {
    detail::unregister_mapping(slot_);
    slot_ = -1;
    if (data_ != nullptr)
      ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  int slot_ = -1;
  FileAccess access_ = FileAccess::map;
};

} // namespace tpullm
