// Out-of-line definitions of tpullm/support/output_file.hpp (compiled once into tpullm_core).
#include "tpullm/support/output_file.hpp"

namespace tpullm::detail {

std::filesystem::path staging_name(const std::filesystem::path& target, const char* tag) {
  static std::atomic<unsigned> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   (static_cast<std::uint64_t>(::getpid()) << 32));
  std::string name = target.filename().string();
  if (name.size() > 180)
    name.resize(180);
  const auto r = rng() ^ counter.fetch_add(1, std::memory_order_relaxed);
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "-%012llx",
                static_cast<unsigned long long>(r & 0xffffffffffffull));
  return target.parent_path() / ("." + name + "." + tag + suffix);
}

void check_output_name(const std::filesystem::path& target) {
  const std::string s = target.string();
  if (s.empty())
    throw Error(ErrorKind::invalid_input, "--output", "the output path is empty");
  if (s.size() >= PATH_MAX)
    throw Error(ErrorKind::invalid_input, "--output",
                "the output path is longer than " + std::to_string(PATH_MAX - 1) + " bytes");
  const std::string name = target.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw Error(ErrorKind::invalid_input, s, "names a directory, not a file");
  if (name.size() > NAME_MAX)
    throw Error(ErrorKind::invalid_input, s,
                "the file name is " + std::to_string(name.size()) + " bytes, longer than " +
                    std::to_string(NAME_MAX) + " (the file system's limit)");
}

void fsync_dir(const std::filesystem::path& dir) noexcept {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

auto FdStreamBuf::flush_buffer() -> bool {
  const std::size_t n = static_cast<std::size_t>(pptr() - pbase());
  const bool ok = write_fully(pbase(), n);
  setp(buf_.data(), buf_.data() + buf_.size());
  return ok;
}

auto FdStreamBuf::overflow(int_type ch) -> int_type {
  if (!flush_buffer())
    return traits_type::eof();
  if (!traits_type::eq_int_type(ch, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(ch);
    pbump(1);
  }
  return traits_type::not_eof(ch);
}

auto FdStreamBuf::xsputn(const char* s, std::streamsize n) -> std::streamsize {
  if (n >= static_cast<std::streamsize>(buf_.size())) {
    if (!flush_buffer() || !write_fully(s, static_cast<std::size_t>(n)))
      return 0;
    return n;
  }
  return std::streambuf::xsputn(s, n);
}

auto FdStreamBuf::write_fully(const char* p, std::size_t n) -> bool {
  if (error_ != 0)
    return false;
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      error_ = w < 0 ? errno : EIO;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

} // namespace tpullm::detail

namespace tpullm {

OutputFile::OutputFile(std::filesystem::path target, OutputOptions options)
    : target_(std::move(target)), options_(options), buf_(std::make_unique<detail::FdStreamBuf>()),
      os_(std::make_unique<std::ostream>(nullptr)) {
  const std::string where = target_.string();
  detail::check_output_name(target_);
  struct stat lst {};
  if (::lstat(target_.c_str(), &lst) == 0) {
    struct stat st = lst;
    if (S_ISLNK(lst.st_mode)) {
      if (::stat(target_.c_str(), &st) != 0)
        throw_error(ErrorKind::invalid_input, where,
                    "is a symbolic link to nothing; refusing to write through it");
      if (S_ISREG(st.st_mode))
        throw_error(ErrorKind::invalid_input, where,
                    "is a symbolic link to a regular file; refusing to write through it "
                    "(give the file's real path, or remove the link)");
    }
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      open_direct();
      return;
    }
    if (!S_ISREG(st.st_mode))
      throw_error(ErrorKind::invalid_input, where, "is ", file_kind(st.st_mode),
                  "; the output must be a regular file");
    mode_ = st.st_mode & 07777;
    keep_mode_ = true;
  } else if (errno != ENOENT) {
    // A path the system refuses (too long, a component not a directory, no permission to
    // search): a bad output path, refused before any work.
    const int e = errno;
    throw_error(ErrorKind::invalid_input, where,
                "cannot be used as an output path: ", detail::errno_text(e));
  }
  open_staging();
}

auto OutputFile::commit() -> void {
  require_open();
  const std::string where = target_.string();
  os_->flush();
  if (!buf_->flush_buffer() || buf_->error() != 0 || os_->bad())
    fail("write failed: " + detail::errno_text(buf_->error() ? buf_->error() : EIO));
  if (!direct_ && options_.fsync && ::fsync(fd_.get()) != 0)
    fail("fsync failed: " + detail::errno_text(errno));
  if (keep_mode_ && !direct_)
    ::fchmod(fd_.get(), mode_);
  const int fd = fd_.release();
  if (::close(fd) != 0 && errno != EINTR)
    fail("close failed: " + detail::errno_text(errno));
  if (!direct_) {
    SignalBlock block; // renamed and forgotten as one step
    if (::rename(staging_.c_str(), target_.c_str()) != 0)
      fail("cannot rename the finished output into place: " + detail::errno_text(errno));
    temp_registry::remove(std::exchange(slot_, -1));
    if (options_.fsync)
      detail::fsync_dir(detail::parent_of(target_));
  }
  done_ = true;
  committed_ = true;
}

auto OutputFile::discard() noexcept -> void {
  if (done_)
    return;
  done_ = true;
  fd_.reset();
  if (!direct_ && !staging_.empty())
    ::unlink(staging_.c_str());
  temp_registry::remove(std::exchange(slot_, -1));
}

auto OutputFile::open_direct() -> void {
  direct_ = true;
  // Non-blocking, so that a FIFO nobody reads is refused (ENXIO) instead of hanging; the
  // descriptor is made blocking again for the writes.
  fd_ = UniqueFd(::open(target_.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  if (!fd_ && errno == ENXIO)
    throw_error(ErrorKind::invalid_input, target_.string(),
                "is a FIFO (named pipe) that nothing reads; refusing to block on it");
  if (!fd_)
    throw OutputError(target_.string(), "cannot open for writing: " + detail::errno_text(errno));
  const int flags = ::fcntl(fd_.get(), F_GETFL);
  if (flags >= 0)
    ::fcntl(fd_.get(), F_SETFL, flags & ~O_NONBLOCK);
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
    throw_error(ErrorKind::invalid_input, target_.string(),
                "changed while being opened; refusing to write");
  attach();
}

auto OutputFile::open_staging() -> void {
  int e = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    staging_ = detail::staging_name(target_, "tmp");
    {
      SignalBlock block; // created and registered as one step: a signal cannot come between
      fd_ = UniqueFd(
          ::open(staging_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666));
      e = errno;
      if (fd_)
        slot_ = temp_registry::add(staging_.string(), false);
    }
    if (fd_) {
      attach();
      return;
    }
    if (e != EEXIST)
      break;
  }
  staging_.clear();
  throw OutputError(target_.string(), "cannot create a temporary file in '" +
                                          detail::parent_of(target_).string() +
                                          "': " + detail::errno_text(e));
}

OutputDirectory::OutputDirectory(std::filesystem::path target, std::string marker,
                                 OutputOptions options)
    : target_(std::move(target)), marker_(std::move(marker)), options_(options) {
  namespace fs = std::filesystem;
  check(!marker_.empty() && fs::path(marker_).filename() == marker_, ErrorKind::internal,
        "OutputDirectory", "the marker must be a plain file name");
  if (target_.filename().empty()) // "out/" names the directory "out"
    target_ = target_.parent_path();
  check_replaceable();
  std::error_code ec;
  const fs::path parent = detail::parent_of(target_);
  fs::create_directories(parent, ec);
  if (ec)
    throw OutputError(target_.string(), "cannot create the parent directory '" + parent.string() +
                                            "': " + ec.message());
  int e = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    staging_ = detail::staging_name(target_, "tmp");
    {
      SignalBlock block; // created and registered as one step
      if (::mkdir(staging_.c_str(), 0777) == 0) {
        slot_ = temp_registry::add(staging_.string(), true);
        return;
      }
      e = errno;
    }
    if (e != EEXIST)
      break;
  }
  staging_.clear();
  throw OutputError(target_.string(), "cannot create a staging directory in '" + parent.string() +
                                          "': " + detail::errno_text(e));
}

auto OutputDirectory::file(const std::string& name) -> OutputFile {
  namespace fs = std::filesystem;
  check(!staging_.empty(), ErrorKind::internal, target_.string(),
        "output directory already committed or discarded");
  check(!name.empty() && fs::path(name).filename() == name && name != "." && name != ".." &&
            name != marker_,
        ErrorKind::invalid_input, target_.string(), "'", name,
        "' is not a plain file name for this output directory");
  return OutputFile(staging_ / name, options_);
}

auto OutputDirectory::commit() -> void {
  namespace fs = std::filesystem;
  check(!staging_.empty(), ErrorKind::internal, target_.string(),
        "output directory already committed or discarded");
  {
    OutputFile m(staging_ / marker_, options_);
    m.write("This directory was written by tpullm; it is replaced as a whole by the next "
            "run with the same output path.\n");
    m.commit();
  }
  if (options_.fsync)
    detail::fsync_dir(staging_);
  const std::string where = target_.string();
  // The swap and the registry change as one step for this thread's signals; the staging path
  // is forgotten first, so a handler running meanwhile in another thread can leave it behind
  // but never removes what is now the target.
  SignalBlock block;
  temp_registry::remove(std::exchange(slot_, -1));
  struct stat st {};
  if (::lstat(target_.c_str(), &st) != 0) {
    if (errno != ENOENT)
      throw OutputError(where, "cannot inspect the output path: " + detail::errno_text(errno));
    if (::rename(staging_.c_str(), target_.c_str()) != 0)
      throw OutputError(where,
                        "cannot move the finished output into place: " + detail::errno_text(errno));
  } else {
    check_replaceable(); // again: it may have changed since construction
    ::chmod(staging_.c_str(), st.st_mode & 07777);
    if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno != EINVAL && errno != ENOSYS)
        throw OutputError(where, "cannot swap the finished output into place: " +
                                     detail::errno_text(errno));
      swap_by_two_renames();
    }
    std::error_code ec;
    fs::remove_all(staging_, ec); // the previous output now lives at the staging path
  }
  if (options_.fsync)
    detail::fsync_dir(detail::parent_of(target_));
  staging_.clear();
  committed_ = true;
}

auto OutputDirectory::discard() noexcept -> void {
  if (staging_.empty())
    return;
  std::error_code ec;
  std::filesystem::remove_all(staging_, ec);
  staging_.clear();
  temp_registry::remove(std::exchange(slot_, -1));
}

auto OutputDirectory::check_replaceable() const -> void {
  namespace fs = std::filesystem;
  const std::string where = target_.string();
  struct stat st {};
  if (::lstat(target_.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return;
    throw OutputError(where, "cannot inspect the output path: " + detail::errno_text(errno));
  }
  if (S_ISLNK(st.st_mode))
    throw_error(ErrorKind::invalid_input, where,
                "is a symbolic link; refusing to replace it (give the real directory)");
  if (!S_ISDIR(st.st_mode))
    throw_error(ErrorKind::invalid_input, where, "is ", file_kind(st.st_mode), ", not a directory");
  std::error_code ec;
  const bool empty = fs::is_empty(target_, ec);
  if (ec)
    throw OutputError(where, "cannot list the directory: " + ec.message());
  struct stat mst {};
  const bool marked = ::lstat((target_ / marker_).c_str(), &mst) == 0 && S_ISREG(mst.st_mode);
  if (!empty && !marked)
    throw_error(ErrorKind::invalid_input, where,
                "exists and is not an earlier output of this "
                "command (no '",
                marker_, "' in it); refusing to replace it: choose a new or empty directory");
}

auto OutputDirectory::swap_by_two_renames() -> void {
  const std::string where = target_.string();
  const auto old = detail::staging_name(target_, "old");
  if (::rename(target_.c_str(), old.c_str()) != 0)
    throw OutputError(where, "cannot move the previous output aside: " + detail::errno_text(errno));
  if (::rename(staging_.c_str(), target_.c_str()) != 0) {
    const int e = errno;
    ::rename(old.c_str(), target_.c_str());
    throw OutputError(where,
                      "cannot move the finished output into place: " + detail::errno_text(e));
  }
  staging_ = old;
}

void write_stdout(std::string_view text) {
  errno = 0;
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  const int e = errno;
  if (!std::cout)
    throw OutputError("<stdout>", "write failed: " + detail::errno_text(e != 0 ? e : EIO));
}

void flush_stdout() {
  errno = 0;
  std::cout.flush();
  int e = errno;
  const bool lost = !std::cout.good();
  if (std::fflush(stdout) != 0 && e == 0)
    e = errno;
  if (lost || std::ferror(stdout))
    throw OutputError("<stdout>", "write failed: " + detail::errno_text(e != 0 ? e : EIO));
}

} // namespace tpullm
