#pragma once
/// Writing outputs so that no command destroys data: a file or a directory is built completely
/// beside its target and replaces it only on commit(); every write, the flush, fsync and close
/// are checked; standard output is checked too (flush_stdout()).
///
///   tpullm::OutputFile out(path);          // refuses a bad target up front
///   out.stream() << text;                  // or out.write(bytes)
///   out.commit();                          // target replaced atomically, or OutputError
///
///   tpullm::OutputDirectory dir(path, ".tpullm-import");
///   auto f = dir.file("a.tir"); f.write(...); f.commit();
///   dir.commit();                          // the new directory swapped in, the old one removed
///
/// Errors: a target refused before anything is written is Error(invalid_input); a failure while
/// writing or committing is OutputError (kind io), which the tools report with exit status 1.
/// Without commit(), the destructor removes whatever was staged and the target is untouched.

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <streambuf>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "tpullm/support/error.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/temp_registry.hpp"

namespace tpullm {

/// A failure to write an output (no space left, I/O error, closed standard output, ...).
/// `where` is the target path or "<stdout>". The tools exit with status 1 on it.
class OutputError : public Error {
public:
  /// where: the output path (or "<stdout>"); message: what failed, with the system's reason.
  OutputError(std::string where, std::string message)
      : Error(ErrorKind::io, std::move(where), std::move(message)) {}
};

/// Options of OutputFile and OutputDirectory.
struct OutputOptions {
  /// fsync the data before the rename and the directory after it, so that a crash or power
  /// loss leaves the old or the new output, never an empty file. Off only where speed matters
  /// more than durability (tests).
  bool fsync = true;
};

namespace detail {

inline std::string errno_text(int e) {
  return std::strerror(e);
}

/// A name for a staging entry beside `target`: ".<name>.<tag>-<random>" (name shortened so the
/// result stays below NAME_MAX).
inline std::filesystem::path staging_name(const std::filesystem::path& target, const char* tag) {
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

/// Refuses (Error(invalid_input)) an output path no file can have: empty, naming a directory
/// ("dir/", ".", ".."), longer than PATH_MAX, or with a name longer than NAME_MAX.
inline void check_output_name(const std::filesystem::path& target) {
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

/// The directory a target lives in ("." for a bare file name).
inline std::filesystem::path parent_of(const std::filesystem::path& target) {
  const auto p = target.parent_path();
  return p.empty() ? std::filesystem::path(".") : p;
}

/// fsync of a directory (best effort: some file systems refuse it).
inline void fsync_dir(const std::filesystem::path& dir) noexcept {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

/// A std::streambuf over a file descriptor that remembers the first write error (errno).
class FdStreamBuf : public std::streambuf {
public:
  FdStreamBuf() : buf_(1 << 16) { setp(buf_.data(), buf_.data() + buf_.size()); }
  void set_fd(int fd) noexcept { fd_ = fd; }
  /// errno of the first failed write (0 if none).
  int error() const noexcept { return error_; }
  /// Writes out the buffer; false on failure.
  bool flush_buffer() {
    const std::size_t n = static_cast<std::size_t>(pptr() - pbase());
    const bool ok = write_fully(pbase(), n);
    setp(buf_.data(), buf_.data() + buf_.size());
    return ok;
  }

protected:
  int_type overflow(int_type ch) override {
    if (!flush_buffer())
      return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n >= static_cast<std::streamsize>(buf_.size())) {
      if (!flush_buffer() || !write_fully(s, static_cast<std::size_t>(n)))
        return 0;
      return n;
    }
    return std::streambuf::xsputn(s, n);
  }
  int sync() override { return flush_buffer() ? 0 : -1; }

private:
  bool write_fully(const char* p, std::size_t n) {
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

  std::vector<char> buf_;
  int fd_ = -1;
  int error_ = 0;
};

} // namespace detail

/// One output file, replaced atomically (see the top of this header). Move-only.
class OutputFile {
public:
  /// Prepares to write `target`:
  ///  - a new path or an existing regular file: writes go to a temporary file created (O_EXCL,
  ///    mode 0666 & ~umask, or the existing file's mode) in the target's directory, and commit()
  ///    renames it over the target: the target is untouched or completely replaced;
  ///  - an existing character device or FIFO (/dev/null, /dev/stdout, a pipe), also through a
  ///    symbolic link: written directly, since there is nothing to replace;
  ///  - refused with Error(invalid_input) naming the path: a directory, a block device, a
  ///    socket, or a symbolic link to a regular file or to nothing (writing through the link
  ///    would change a file elsewhere, replacing it would silently break the link).
  /// Throws OutputError when the temporary file cannot be created (missing directory, no
  /// permission, ...).
  explicit OutputFile(std::filesystem::path target, OutputOptions options = {})
      : target_(std::move(target)), options_(options),
        buf_(std::make_unique<detail::FdStreamBuf>()),
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

  /// Takes over `o`'s staged output (`o` is left committed-or-discarded, owning nothing).
  OutputFile(OutputFile&& o) noexcept
      : target_(std::move(o.target_)), staging_(std::exchange(o.staging_, {})),
        options_(o.options_), fd_(std::move(o.fd_)), buf_(std::move(o.buf_)), os_(std::move(o.os_)),
        direct_(o.direct_), keep_mode_(o.keep_mode_), mode_(o.mode_),
        done_(std::exchange(o.done_, true)), committed_(o.committed_),
        slot_(std::exchange(o.slot_, -1)) {}
  /// Discards this output, then takes over `o`'s.
  OutputFile& operator=(OutputFile&& o) noexcept {
    if (this != &o) {
      discard();
      target_ = std::move(o.target_);
      staging_ = std::exchange(o.staging_, {});
      options_ = o.options_;
      fd_ = std::move(o.fd_);
      buf_ = std::move(o.buf_);
      os_ = std::move(o.os_);
      direct_ = o.direct_;
      keep_mode_ = o.keep_mode_;
      mode_ = o.mode_;
      done_ = std::exchange(o.done_, true);
      committed_ = o.committed_;
      slot_ = std::exchange(o.slot_, -1);
    }
    return *this;
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  /// Without commit(): discard().
  ~OutputFile() { discard(); }

  /// Appends `text`. Throws OutputError naming the target when a write fails.
  void write(std::string_view text) {
    require_open();
    buf_->sputn(text.data(), static_cast<std::streamsize>(text.size()));
    throw_if_failed();
  }
  /// Appends raw bytes. Throws OutputError naming the target when a write fails.
  void write(std::span<const std::byte> bytes) {
    write(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  /// A buffered std::ostream over the file. A failed write sets its badbit; commit() reports
  /// it (the error is never lost).
  std::ostream& stream() {
    require_open();
    return *os_;
  }

  /// Flushes, checks that every write succeeded, fsyncs (OutputOptions::fsync), closes and
  /// renames the staged file over the target. Throws OutputError naming the target on any
  /// failure; the staged file is then removed and the target left as it was.
  void commit() {
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

  /// Drops everything written: the staged file is removed, the target untouched (a direct
  /// device or FIFO target has already received the bytes). Idempotent.
  void discard() noexcept {
    if (done_)
      return;
    done_ = true;
    fd_.reset();
    if (!direct_ && !staging_.empty())
      ::unlink(staging_.c_str());
    temp_registry::remove(std::exchange(slot_, -1));
  }

  /// The path this output replaces.
  const std::filesystem::path& target() const noexcept { return target_; }
  /// The temporary file being written (empty for a direct device / FIFO target).
  const std::filesystem::path& staging_path() const noexcept { return staging_; }
  /// True once commit() succeeded.
  bool committed() const noexcept { return committed_; }

private:
  void open_direct() {
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

  void open_staging() {
    for (int attempt = 0; attempt < 100; ++attempt) {
      staging_ = detail::staging_name(target_, "tmp");
      fd_ = UniqueFd(
          ::open(staging_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666));
      if (fd_) {
        slot_ = temp_registry::add(staging_.string(), false);
        attach();
        return;
      }
      if (errno != EEXIST)
        break;
    }
    const int e = errno;
    staging_.clear();
    throw OutputError(target_.string(), "cannot create a temporary file in '" +
                                            detail::parent_of(target_).string() +
                                            "': " + detail::errno_text(e));
  }

  void attach() {
    buf_->set_fd(fd_.get());
    os_->rdbuf(buf_.get());
    done_ = false;
  }

  void require_open() const {
    if (done_ || !fd_)
      throw_error(ErrorKind::internal, target_.string(), "output already committed or discarded");
  }

  void throw_if_failed() {
    if (buf_->error() != 0)
      fail("write failed: " + detail::errno_text(buf_->error()));
  }

  [[noreturn]] void fail(const std::string& why) {
    discard();
    throw OutputError(target_.string(), why);
  }

  std::filesystem::path target_;
  std::filesystem::path staging_;
  OutputOptions options_;
  UniqueFd fd_;
  std::unique_ptr<detail::FdStreamBuf> buf_;
  std::unique_ptr<std::ostream> os_;
  bool direct_ = false;
  bool keep_mode_ = false;
  mode_t mode_ = 0;
  bool done_ = true;
  bool committed_ = false;
  int slot_ = -1; ///< temp_registry slot of the staged file
};

/// A directory output: built in a fresh staging directory beside the target, then swapped in
/// whole by commit(), so a failure leaves the previous output intact and a success leaves no
/// stale files of an earlier run. Move-only.
class OutputDirectory {
public:
  /// Prepares to produce directory `target` (missing parent directories are created).
  /// `marker` is the name of a file commit() writes into the new directory to mark it as this
  /// tool's output: an existing target is replaced only when it is empty or holds that marker,
  /// never a directory of other files. Refused with Error(invalid_input): a target that is a
  /// symbolic link, not a directory, or a non-empty directory without the marker. Throws
  /// OutputError when the staging directory cannot be created.
  OutputDirectory(std::filesystem::path target, std::string marker, OutputOptions options = {})
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
    for (int attempt = 0; attempt < 100; ++attempt) {
      staging_ = detail::staging_name(target_, "tmp");
      if (::mkdir(staging_.c_str(), 0777) == 0) {
        slot_ = temp_registry::add(staging_.string(), true);
        return;
      }
      if (errno != EEXIST)
        break;
    }
    const int e = errno;
    staging_.clear();
    throw OutputError(target_.string(), "cannot create a staging directory in '" + parent.string() +
                                            "': " + detail::errno_text(e));
  }

  /// Takes over `o`'s staging directory.
  OutputDirectory(OutputDirectory&& o) noexcept
      : target_(std::move(o.target_)), staging_(std::exchange(o.staging_, {})),
        marker_(std::move(o.marker_)), options_(o.options_),
        committed_(std::exchange(o.committed_, false)), slot_(std::exchange(o.slot_, -1)) {}
  OutputDirectory& operator=(OutputDirectory&&) = delete;
  OutputDirectory(const OutputDirectory&) = delete;
  OutputDirectory& operator=(const OutputDirectory&) = delete;
  /// Without commit(): removes the staging directory and everything in it.
  ~OutputDirectory() { discard(); }

  /// A new file `name` (a plain file name, not the marker) in the directory being built;
  /// commit the file before committing the directory.
  OutputFile file(const std::string& name) {
    namespace fs = std::filesystem;
    check(!staging_.empty(), ErrorKind::internal, target_.string(),
          "output directory already committed or discarded");
    check(!name.empty() && fs::path(name).filename() == name && name != "." && name != ".." &&
              name != marker_,
          ErrorKind::invalid_input, target_.string(), "'", name,
          "' is not a plain file name for this output directory");
    return OutputFile(staging_ / name, options_);
  }

  /// The directory being built (files may also be created in it directly).
  const std::filesystem::path& staging_path() const noexcept { return staging_; }
  /// The directory this output produces.
  const std::filesystem::path& target() const noexcept { return target_; }

  /// Writes the marker, then puts the staging directory in the target's place: a rename when
  /// the target does not exist, else an atomic exchange (renameat2 RENAME_EXCHANGE; on file
  /// systems without it, two renames) after which the previous directory is removed. Throws
  /// OutputError (the previous target intact) on failure.
  void commit() {
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
        throw OutputError(where, "cannot move the finished output into place: " +
                                     detail::errno_text(errno));
    } else {
      check_replaceable(); // again: it may have changed since construction
      ::chmod(staging_.c_str(), st.st_mode & 07777);
      if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) !=
          0) {
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

  /// Removes the staging directory (the target untouched). Idempotent.
  void discard() noexcept {
    if (staging_.empty())
      return;
    std::error_code ec;
    std::filesystem::remove_all(staging_, ec);
    staging_.clear();
    temp_registry::remove(std::exchange(slot_, -1));
  }

  /// True once commit() succeeded.
  bool committed() const noexcept { return committed_; }

private:
  /// Throws Error(invalid_input) unless the target is missing, an empty directory, or a
  /// directory holding the marker.
  void check_replaceable() const {
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
      throw_error(ErrorKind::invalid_input, where, "is ", file_kind(st.st_mode),
                  ", not a directory");
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

  void swap_by_two_renames() {
    const std::string where = target_.string();
    const auto old = detail::staging_name(target_, "old");
    if (::rename(target_.c_str(), old.c_str()) != 0)
      throw OutputError(where,
                        "cannot move the previous output aside: " + detail::errno_text(errno));
    if (::rename(staging_.c_str(), target_.c_str()) != 0) {
      const int e = errno;
      ::rename(old.c_str(), target_.c_str());
      throw OutputError(where,
                        "cannot move the finished output into place: " + detail::errno_text(e));
    }
    staging_ = old;
  }

  std::filesystem::path target_;
  std::filesystem::path staging_;
  std::string marker_;
  OutputOptions options_;
  bool committed_ = false;
  int slot_ = -1; ///< temp_registry slot of the staging directory
};

/// Writes `text` to standard output through std::cout (so it stays ordered with other output)
/// and throws OutputError("<stdout>", ...) with the system's reason when it cannot be written
/// (output still buffered is checked by flush_stdout()).
inline void write_stdout(std::string_view text) {
  errno = 0;
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  const int e = errno;
  if (!std::cout)
    throw OutputError("<stdout>", "write failed: " + detail::errno_text(e != 0 ? e : EIO));
}

/// Flushes std::cout and C's stdout and throws OutputError("<stdout>", ...) if anything written
/// to standard output was lost (a full disk, a closed descriptor). Tools call it before
/// reporting success.
inline void flush_stdout() {
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
