// Out-of-line definitions of tpullm/support/temp_file.hpp (compiled once into tpullm_core).
#include "tpullm/support/temp_file.hpp"

namespace tpullm {

std::filesystem::path temp_directory() {
  const char* env = std::getenv("TMPDIR");
  const bool from_env = env != nullptr && *env != '\0';
  const std::string dir = from_env ? env : "/tmp";
  const std::string where = from_env ? "TMPDIR (" + dir + ")" : dir;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw Error(ErrorKind::invalid_input, where,
                std::string("cannot be used for temporary files: ") + std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    throw Error(ErrorKind::invalid_input, where, "is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(ErrorKind::invalid_input, where,
                std::string("cannot be used for temporary files: ") + std::strerror(errno));
  return dir;
}

TemporaryFile::TemporaryFile(const std::filesystem::path& dir, const std::string& prefix,
                             const std::string& suffix) {
  std::string tmpl = (dir / (prefix + "XXXXXX" + suffix)).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = -1, e = 0;
  {
    SignalBlock block; // created and registered as one step: a signal cannot come between
    fd = ::mkstemps(buf.data(), static_cast<int>(suffix.size()));
    e = errno;
    if (fd >= 0)
      slot_ = temp_registry::add(buf.data(), false);
  }
  if (fd < 0)
    throw Error(ErrorKind::io, dir.string(),
                std::string("cannot create a temporary file: ") + std::strerror(e));
  ::close(fd);
  path_ = buf.data();
}

} // namespace tpullm
