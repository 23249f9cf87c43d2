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
std::filesystem::path staging_name(const std::filesystem::path& target, const char* tag);

/// Refuses (Error(invalid_input)) an output path no file can have: empty, naming a directory
/// ("dir/", ".", ".."), longer than PATH_MAX, or with a name longer than NAME_MAX.
void check_output_name(const std::filesystem::path& target);

/// The directory a target lives in ("." for a bare file name).
inline std::filesystem::path parent_of(const std::filesystem::path& target) {
  const auto p = target.parent_path();
  return p.empty() ? std::filesystem::path(".") : p;
}

/// fsync of a directory (best effort: some file systems refuse it).
void fsync_dir(const std::filesystem::path& dir) noexcept;

/// A std::streambuf over a file descriptor that remembers the first write error (errno).
class FdStreamBuf : public std::streambuf {
public:
  FdStreamBuf() : buf_(1 << 16) { setp(buf_.data(), buf_.data() + buf_.size()); }
  void set_fd(int fd) noexcept { fd_ = fd; }
  /// errno of the first failed write (0 if none).
  int error() const noexcept { return error_; }
  /// Writes out the buffer; false on failure.
  bool flush_buffer();

protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override { return flush_buffer() ? 0 : -1; }

private:
  bool write_fully(const char* p, std::size_t n);

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
  explicit OutputFile(std::filesystem::path target, OutputOptions options = {});

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
  void commit();

  /// Drops everything written: the staged file is removed, the target untouched (a direct
  /// device or FIFO target has already received the bytes). Idempotent.
  void discard() noexcept;

  /// The path this output replaces.
  const std::filesystem::path& target() const noexcept { return target_; }
  /// The temporary file being written (empty for a direct device / FIFO target).
  const std::filesystem::path& staging_path() const noexcept { return staging_; }
  /// True once commit() succeeded.
  bool committed() const noexcept { return committed_; }

private:
  void open_direct();

  void open_staging();

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
  OutputDirectory(std::filesystem::path target, std::string marker, OutputOptions options = {});

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
  OutputFile file(const std::string& name);

  /// The directory being built (files may also be created in it directly).
  const std::filesystem::path& staging_path() const noexcept { return staging_; }
  /// The directory this output produces.
  const std::filesystem::path& target() const noexcept { return target_; }

  /// Writes the marker, then puts the staging directory in the target's place: a rename when
  /// the target does not exist, else an atomic exchange (renameat2 RENAME_EXCHANGE; on file
  /// systems without it, two renames) after which the previous directory is removed. Throws
  /// OutputError (the previous target intact) on failure.
  void commit();

  /// Removes the staging directory (the target untouched). Idempotent.
  void discard() noexcept;

  /// True once commit() succeeded.
  bool committed() const noexcept { return committed_; }

private:
  /// Throws Error(invalid_input) unless the target is missing, an empty directory, or a
  /// directory holding the marker.
  void check_replaceable() const;

  void swap_by_two_renames();

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
void write_stdout(std::string_view text);

/// Flushes std::cout and C's stdout and throws OutputError("<stdout>", ...) if anything written
/// to standard output was lost (a full disk, a closed descriptor). Tools call it before
/// reporting success.
void flush_stdout();

} // namespace tpullm
