#pragma once
/// One process-wide, signal-safe registry of the temporary files and staging directories a tool
/// has created and not yet committed or removed. An interrupted command (SIGINT, SIGTERM,
/// SIGHUP, SIGQUIT, SIGPIPE) removes every registered path from the signal handler and then
/// dies of the same signal, so a killed compile or make-model leaves no temporary files behind.
///
///   const int slot = tpullm::temp_registry::add(path, /*directory=*/false);
///   ...                                   // write the file
///   tpullm::temp_registry::remove(slot);  // renamed into place or unlinked: forget it
///
///   tpullm::SignalBlock guard;            // a commit's renames are not interrupted halfway
///
/// Registered directories are expected to be flat (a staging directory of files): the handler
/// unlinks their entries and then the directory, with async-signal-safe calls only (open,
/// getdents64, unlinkat, rmdir). SIGKILL and power loss cannot be handled; their leftovers are
/// named `.NAME.tmp-XXXXXXXXXXXX` beside the target.

#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include <atomic>
#include <climits>
#include <cstddef>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <unistd.h>

namespace tpullm {

namespace temp_registry {

namespace detail {

/// One registered path: state 0 free, 1 being filled, 2 a file, 3 a directory.
struct Slot {
  std::atomic<int> state{0};
  char path[PATH_MAX];
};

inline constexpr int kSlots = 256;
inline Slot g_slots[kSlots];
/// The signals whose default action ends the process and that the handler cleans up after.
inline constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};

/// Removes the entries of flat directory `path`, then the directory (async-signal-safe).
inline void remove_flat_dir(const char* path) noexcept {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) char buf[4096];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0)
        break;
      for (long at = 0; at < n;) {
        // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[]
        unsigned short reclen;
        std::memcpy(&reclen, buf + at + 16, sizeof reclen);
        const char* name = buf + at + 19;
        if (!(name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))))
          ::unlinkat(fd, name, 0);
        at += reclen;
      }
    }
    ::close(fd);
  }
  ::rmdir(path);
}

/// Removes every registered path (async-signal-safe; also used at normal exit by no one: the
/// owners remove their own paths).
inline void remove_all() noexcept {
  for (auto& s : g_slots) {
    const int st = s.state.load(std::memory_order_acquire);
    if (st == 2)
      ::unlink(s.path);
    else if (st == 3)
      remove_flat_dir(s.path);
  }
}

inline void on_signal(int sig) {
  remove_all();
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
}

} // namespace detail

/// Registers `path` (a temporary file, or a flat staging directory when `directory`) to be
/// removed if a signal ends the process. Returns the slot to pass to remove(), or -1 when the
/// path is too long or the registry full (the path is then simply not protected).
inline int add(const std::string& path, bool directory) noexcept {
  if (path.empty() || path.size() >= PATH_MAX)
    return -1;
  for (int i = 0; i < detail::kSlots; ++i) {
    int expected = 0;
    auto& s = detail::g_slots[i];
    if (s.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      std::memcpy(s.path, path.c_str(), path.size() + 1);
      s.state.store(directory ? 3 : 2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

/// Forgets slot `slot` (from add(); -1 is ignored): its path was committed or removed.
inline void remove(int slot) noexcept {
  if (slot >= 0 && slot < detail::kSlots)
    detail::g_slots[slot].state.store(0, std::memory_order_release);
}

/// Installs the handler described at the top of this file for SIGINT, SIGTERM, SIGHUP, SIGQUIT
/// and SIGPIPE, except where a signal is ignored (a tool started with SIGINT ignored keeps
/// ignoring it). Call once from a tool's main() (run_tool() does).
inline void install_signal_cleanup() noexcept {
  for (int sig : detail::kSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN)
      continue;
    struct sigaction sa {};
    sa.sa_handler = &detail::on_signal;
    sigfillset(&sa.sa_mask); // no second signal runs the handler while it cleans up
    ::sigaction(sig, &sa, nullptr);
  }
}

} // namespace temp_registry

/// Blocks the signals of temp_registry in this thread for its lifetime, so that a commit's
/// renames complete (or do not start) as a whole; a signal that arrives meanwhile is delivered
/// when the block ends. Other threads are not affected (they may run the handler, which only
/// removes paths still registered).
class SignalBlock {
public:
  SignalBlock() noexcept {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : temp_registry::detail::kSignals)
      sigaddset(&set, sig);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~SignalBlock() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;

private:
  sigset_t old_;
};

} // namespace tpullm
