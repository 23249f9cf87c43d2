#pragma once
/// Read-only memory mapping of a whole file (POSIX mmap). Zero-copy views into the mapping hold
/// a std::shared_ptr<const MappedFile> so the mapping outlives every view.

#include "tpullm/support/error.hpp"

#include <cerrno>
#include <cstddef>
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

/// A read-only, private mapping of a regular, non-empty file. Move-only; usually held through
/// std::shared_ptr (see MappedFile::open) so that views can share ownership.
class MappedFile {
public:
  /// Maps `path` read-only. Throws Error(io) naming the path when the file is missing,
  /// unreadable, not a regular file or cannot be mapped, Error(invalid_input) when it is empty.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path) {
    return std::make_shared<const MappedFile>(map_tag{}, path);
  }

  struct map_tag {};
  /// Use MappedFile::open; public only for std::make_shared.
  MappedFile(map_tag, const std::filesystem::path& path) : path_(path) {
    const std::string where = path.string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      throw_error(ErrorKind::io, where, "cannot open file: ", std::strerror(e));
    }
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      throw_error(ErrorKind::io, where, "cannot stat file: ", std::strerror(e));
    }
    if (!S_ISREG(st.st_mode))
      throw_error(ErrorKind::io, where, "not a regular file");
    if (st.st_size <= 0)
      throw_error(ErrorKind::invalid_input, where, "file is empty");
    size_ = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      throw_error(ErrorKind::io, where, "cannot mmap ", size_, " bytes: ", std::strerror(e));
    }
    data_ = static_cast<const std::byte*>(p);
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept
      : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
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

private:
  void unmap() noexcept {
    if (data_ != nullptr)
      ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

} // namespace tpullm
