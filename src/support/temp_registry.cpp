// Out-of-line definitions of tpullm/support/temp_registry.hpp (compiled once into tpullm_core).
#include "tpullm/support/temp_registry.hpp"

namespace tpullm::temp_registry::detail {

void remove_flat_dir(const char* path) noexcept {
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

void remove_all() noexcept {
  for (auto& s : g_slots) {
    const int st = s.state.load(std::memory_order_acquire);
    if (st == 2)
      ::unlink(s.path);
    else if (st == 3)
      remove_flat_dir(s.path);
  }
}

void on_signal(int sig) {
  // Taken by a thread other than the one that installed the handler (a compile, OpenMP or
  // checksum worker, which starts with the tool's mask): handed to that thread instead, so that
  // the cleanup never runs while the main thread goes on creating or committing outputs. If the
  // main thread blocks the signal (a commit's SignalBlock), it stays pending there until the
  // commit is whole.
  if (g_owner_set.load(std::memory_order_acquire) && !::pthread_equal(::pthread_self(), g_owner)) {
    ::pthread_kill(g_owner, sig);
    return;
  }
  remove_all();
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
}

} // namespace tpullm::temp_registry::detail

namespace tpullm::temp_registry {

int add(const std::string& path, bool directory) noexcept {
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

void install_signal_cleanup() noexcept {
  detail::g_owner = ::pthread_self();
  detail::g_owner_set.store(true, std::memory_order_release);
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

} // namespace tpullm::temp_registry

namespace tpullm {

SignalBlock::SignalBlock() noexcept {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : temp_registry::detail::kSignals)
    sigaddset(&set, sig);
  ::pthread_sigmask(SIG_BLOCK, &set, &old_);
}

} // namespace tpullm
