#pragma once
/// A temporary file at an unpredictable path that this process created (mkstemp: O_EXCL, mode
/// 0600), registered with temp_registry so that a signal removes it too, and removed by the
/// destructor. It never removes or overwrites a file it did not create.
///
///   tpullm::TemporaryFile t(tpullm::temp_directory(), "tpullm-verify-", ".bundle");
///   write_into(t.path());   // e.g. an OutputFile renamed over it
///   // ~TemporaryFile: unlinked

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "tpullm/support/error.hpp"
#include "tpullm/support/temp_registry.hpp"

namespace tpullm {

/// The directory temporary files go to: $TMPDIR when set and non-empty, else /tmp. Throws
/// Error(invalid_input) naming TMPDIR (or /tmp) when it is not an existing, writable and
/// searchable directory.
std::filesystem::path temp_directory();

/// One temporary file (see the top of this header). Move-only.
class TemporaryFile {
public:
  /// Creates `dir`/`prefix`XXXXXX`suffix` exclusively. Throws Error(io) naming `dir` when it
  /// cannot.
  TemporaryFile(const std::filesystem::path& dir, const std::string& prefix,
                const std::string& suffix);
  TemporaryFile(TemporaryFile&& o) noexcept
      : path_(std::exchange(o.path_, {})), slot_(std::exchange(o.slot_, -1)) {}
  TemporaryFile& operator=(TemporaryFile&&) = delete;
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  /// Removes the file (whatever was renamed over it in between).
  ~TemporaryFile() {
    if (!path_.empty())
      ::unlink(path_.c_str());
    temp_registry::remove(slot_);
  }

  /// The file's path.
  const std::filesystem::path& path() const noexcept { return path_; }

private:
  std::filesystem::path path_;
  int slot_ = -1;
};

} // namespace tpullm
