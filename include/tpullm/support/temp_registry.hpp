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

#include <pthread.h>
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
void remove_flat_dir(const char* path) noexcept;

/// Removes every registered path (async-signal-safe; also used at normal exit by no one: the
/// owners remove their own paths).
void remove_all() noexcept;

/// The thread that called install_signal_cleanup(): the handler runs the cleanup there only
/// (another thread that takes the signal forwards it with pthread_kill).
inline pthread_t g_owner{};
inline std::atomic<bool> g_owner_set{false};

void on_signal(int sig);

} // namespace detail

/// Registers `path` (a temporary file, or a flat staging directory when `directory`) to be
/// removed if a signal ends the process. Returns the slot to pass to remove(), or -1 when the
/// path is too long or the registry full (the path is then simply not protected).
int add(const std::string& path, bool directory) noexcept;

/// Forgets slot `slot` (from add(); -1 is ignored): its path was committed or removed.
inline void remove(int slot) noexcept {
  if (slot >= 0 && slot < detail::kSlots)
    detail::g_slots[slot].state.store(0, std::memory_order_release);
}

/// Installs the handler described at the top of this file for SIGINT, SIGTERM, SIGHUP, SIGQUIT
/// and SIGPIPE, except where a signal is ignored (a tool started with SIGINT ignored keeps
/// ignoring it). Call once from a tool's main() (run_tool() does): the calling thread is the one
/// that cleans up; a signal another thread takes is forwarded to it.
void install_signal_cleanup() noexcept;

} // namespace temp_registry

/// Blocks the signals of temp_registry in this thread for its lifetime, so that a commit's
/// renames complete (or do not start) as a whole; a signal that arrives meanwhile is delivered
/// when the block ends. Other threads are not affected (they may run the handler, which only
/// removes paths still registered).
class SignalBlock {
public:
  SignalBlock() noexcept;
  ~SignalBlock() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;

private:
  sigset_t old_;
};

} // namespace tpullm
