// Out-of-line definitions of tpullm/support/input_file.hpp (compiled once into tpullm_core).
#include "tpullm/support/input_file.hpp"

namespace tpullm {

std::string_view file_kind(mode_t mode) noexcept {
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

FileIdentity file_identity(const struct stat& st) noexcept {
  const auto ns = [](const struct timespec& t) {
    return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + static_cast<std::int64_t>(t.tv_nsec);
  };
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::int64_t>(st.st_size), ns(st.st_mtim), ns(st.st_ctim)};
}

UniqueFd open_regular_file(const std::filesystem::path& path, struct stat* st) {
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

} // namespace tpullm

namespace tpullm::detail {

void read_all(int fd, std::string& out, const std::string& where, std::size_t max_bytes) {
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

} // namespace tpullm::detail

namespace tpullm {

std::string read_regular_file(const std::filesystem::path& path, std::size_t max_bytes) {
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

} // namespace tpullm
