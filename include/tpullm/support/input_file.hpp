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
std::string_view file_kind(mode_t mode) noexcept;

/// Opens `path` read-only, refusing anything but a regular file (symlinks to regular files are
/// fine). The open never blocks; the returned descriptor is in blocking mode. `st`, when given,
/// receives the file's status. Throws Error(io) naming the path.
UniqueFd open_regular_file(const std::filesystem::path& path, struct stat* st = nullptr);

/// What identifies a file's content as the file system sees it, from one stat: device, inode,
/// size, and the last data-modification and status-change times in nanoseconds. Every write
/// through the file system moves ctime to the current time, and no user can set it back (touch
/// sets mtime only), so an unchanged identity means no write since it was taken (on a file
/// system whose timestamps are finer than the time between the writes).
struct FileIdentity {
  std::uint64_t device = 0, inode = 0; ///< st_dev, st_ino
  std::int64_t size = 0;               ///< st_size in bytes
  std::int64_t mtime_ns = 0;           ///< st_mtim in ns since the epoch
  std::int64_t ctime_ns = 0;           ///< st_ctim in ns since the epoch
  bool operator==(const FileIdentity&) const = default;
};

/// The FileIdentity of a stat result.
FileIdentity file_identity(const struct stat& st) noexcept;

/// Default cap of read_regular_file: 1 GiB (text inputs; checkpoints are mapped instead).
inline constexpr std::size_t kMaxReadBytes = std::size_t{1} << 30;

namespace detail {
/// Appends everything readable from `fd` to `out`; throws Error(io) / Error(invalid_input).
void read_all(int fd, std::string& out, const std::string& where, std::size_t max_bytes);
} // namespace detail

/// The whole content of the regular file `path` (opened with open_regular_file). Throws
/// Error(io) on open / read failures and Error(invalid_input) when it exceeds `max_bytes`.
std::string read_regular_file(const std::filesystem::path& path,
                              std::size_t max_bytes = kMaxReadBytes);

/// Everything on standard input (whatever it is: a pipe or a terminal is what the user chose).
/// Throws Error(io) naming "<stdin>" on a read error.
inline std::string read_stdin(std::size_t max_bytes = kMaxReadBytes) {
  std::string out;
  detail::read_all(STDIN_FILENO, out, "<stdin>", max_bytes);
  return out;
}

} // namespace tpullm
