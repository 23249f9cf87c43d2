#pragma once
/// Opening files for reading without hangs or surprises. Every reader of a user-named file goes
/// through open_regular_file(): the open itself cannot block (O_NONBLOCK, so a FIFO without a
/// writer or a terminal cannot hang the caller), and fstat() on the opened descriptor (no
/// check-then-open race) refuses anything but a regular file with Error(io) naming the path and
/// what it is instead ("is a FIFO (named pipe)", "is a directory", "is a character device").

#include <sys/stat.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "tpullm/support/error.hpp"

namespace tpullm {

/// An owned POSIX file descriptor, closed on destruction (close errors ignored: read-only use).
class UniqueFd {
public:
  UniqueFd() = default;
  /// Takes ownership of `fd` (-1 = none).
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  /// The descriptor (-1 when none).
  int get() const noexcept { return fd_; }
  /// True when a descriptor is held.
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Gives up ownership and returns the descriptor.
  int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the descriptor (if any).
  void reset() noexcept {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

private:
  int fd_ = -1;
};

/// "a FIFO (named pipe)", "a directory", ... for the file type bits of st_mode.
inline std::string_view file_kind(mode_t mode) noexcept {
  if (S_ISREG(mode))
    return "a regular file";
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO (named pipe)";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISLNK(mode))
    return "a symbolic link";
  return "not a regular file";
}

/// Opens `path` read-only, refusing anything but a regular file (symlinks to regular files are
/// fine). The open never blocks; the returned descriptor is in blocking mode. `st`, when given,
/// receives the file's status. Throws Error(io) naming the path.
inline UniqueFd open_regular_file(const std::filesystem::path& path, struct stat* st = nullptr) {
  const std::string where = path.string();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) {
    const int e = errno;
    throw_error(ErrorKind::io, where, "cannot open file: ", std::strerror(e));
  }
  struct stat s {};
  if (::fstat(fd.get(), &s) != 0) {
    const int e = errno;
    throw_error(ErrorKind::io, where, "cannot stat file: ", std::strerror(e));
  }
  if (!S_ISREG(s.st_mode))
    throw_error(ErrorKind::io, where, "is ", file_kind(s.st_mode), ", not a regular file");
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0)
    ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  if (st)
    *st = s;
  return fd;
}

/// Default cap of read_regular_file: 1 GiB (text inputs; checkpoints are mapped instead).
inline constexpr std::size_t kMaxReadBytes = std::size_t{1} << 30;

namespace detail {
/// Appends everything readable from `fd` to `out`; throws Error(io) / Error(invalid_input).
inline void read_all(int fd, std::string& out, const std::string& where, std::size_t max_bytes) {
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const int e = errno;
      throw_error(ErrorKind::io, where, "read failed: ", std::strerror(e));
    }
    if (n == 0)
      return;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes)
      throw_error(ErrorKind::invalid_input, where, "is larger than the ", max_bytes,
                  "-byte limit for this input");
    out.append(buf, static_cast<std::size_t>(n));
  }
}
} // namespace detail

/// The whole content of the regular file `path` (opened with open_regular_file). Throws
/// Error(io) on open / read failures and Error(invalid_input) when it exceeds `max_bytes`.
inline std::string read_regular_file(const std::filesystem::path& path,
                                     std::size_t max_bytes = kMaxReadBytes) {
  struct stat st {};
  UniqueFd fd = open_regular_file(path, &st);
  const std::string where = path.string();
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    throw_error(ErrorKind::invalid_input, where, "is ", st.st_size, " bytes, larger than the ",
                max_bytes, "-byte limit for this input");
  std::string out;
  out.reserve(static_cast<std::size_t>(st.st_size));
  detail::read_all(fd.get(), out, where, max_bytes);
  return out;
}

/// Everything on standard input (whatever it is: a pipe or a terminal is what the user chose).
/// Throws Error(io) naming "<stdin>" on a read error.
inline std::string read_stdin(std::size_t max_bytes = kMaxReadBytes) {
  std::string out;
  detail::read_all(STDIN_FILENO, out, "<stdin>", max_bytes);
  return out;
}

} // namespace tpullm
