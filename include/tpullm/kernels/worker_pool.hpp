#pragma once
/// The persistent worker threads that run a kernel's core split (and a layer group's tiles).
///
/// One pool per Executor, created once: `size()` threads counting the caller, which always takes
/// part. A dispatch hands its items out one at a time from a shared counter, so a worker that is
/// late (descheduled by another process on its core) simply takes fewer of them. Idle workers
/// spin for a bounded time (`kSpin`) and then sleep on a condition variable, so a pool
/// between requests costs nothing and another process on the machine gets its share of the
/// cores.
///
/// A fork-join cannot avoid one stall: a worker preempted while it holds an item makes the
/// caller wait for it. The pool notices it (the caller waited far longer than an item takes) and
/// leaves that worker out of the next dispatches for a backoff period (20 ms, doubling while the
/// stalls go on, up to 1 s), then invites it again, but only when the stalls say another process
/// has the worker's core: one wait of `kLongStall` or more (a scheduler time slice), or shorter
/// waits adding up to `kStallBudget` within `kStallWindow`. A short stall alone (an interrupt or
/// a hypervisor tick: a 2-vCPU VM shows tens of 50-800 us gaps a second on an idle core) costs
/// the caller that wait once, where leaving the worker out would cost half the pool for 20 ms.
/// On a quiet machine no worker is left out; with a busy process on one of two cores a pool runs
/// at about the one-core speed instead of being dragged to the busy core's pace.
///
/// What the caller sees as a stall is left out only when the straggler was not running: its
/// thread's CPU time (CLOCK_THREAD_CPUTIME_ID, read only once a wait has passed the patience)
/// must have advanced by less than kRanShare of the wait. A worker that ran the whole wait was
/// slow, not displaced (a virtual CPU the host slowed, or one waking from idle), and leaving it
/// out would only make the pool wake it again later, from idle: on a 2-vCPU VM that loop had the
/// worker run 9% of a long-context decode, which ran 1.3-1.5x slower for it.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tpullm/kernels/isa_target.hpp"

#if TPULLM_X86
#include <immintrin.h>
#endif

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <signal.h>

namespace tpullm::kernels {

/// CPUs this process may run on (sched_getaffinity), at least 1.
inline int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, CPU_COUNT(&set));
}

/// The short-stall budget of one worker: the caller's waits for it that were each too short to
/// leave it out are charged within a window; charge() says when they reach the budget (and
/// starts counting again).
class StallBudget {
public:
  using clock = std::chrono::steady_clock;
  /// Charges `waited` at `now`; true when the waits charged within `window` (counted from the
  /// first charge after the previous window ended) reach `budget`.
  bool charge(clock::time_point now, clock::duration waited, clock::duration window,
              clock::duration budget) {
    if (now - start_ > window) {
      start_ = now;
      spent_ = clock::duration::zero();
    }
    spent_ += waited;
    if (spent_ < budget)
      return false;
    spent_ = clock::duration::zero();
    return true;
  }

private:
  clock::time_point start_{};
  clock::duration spent_{};
};

/// Persistent worker threads; see the file comment.
class WorkerPool {
public:
  /// How long an idle worker spins before it sleeps.
  static constexpr std::chrono::microseconds kSpin{200};
  /// Most threads a pool holds (the invitation mask has one bit per worker).
  static constexpr int kMaxThreads = 64;

  /// A pool of `threads` threads counting the caller (clamped to [1, kMaxThreads]); starts
  /// threads - 1 workers.
  explicit WorkerPool(int threads) : size_(std::clamp(threads, 1, kMaxThreads)) {
    slots_ = std::make_unique<Slot[]>(static_cast<std::size_t>(size_));
    workers_.reserve(static_cast<std::size_t>(size_ - 1));
    // Workers start with the asynchronous signals blocked (they inherit this mask), so a SIGINT
    // or SIGTERM sent to the process goes to a thread of the program's own, never to a worker:
    // a tool that blocks them around a commit (support/temp_registry.hpp SignalBlock) is then
    // never interrupted by a handler running on a worker.
    sigset_t all, old;
    sigfillset(&all);
    for (int sync : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS, SIGPIPE})
      sigdelset(&all, sync);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (int w = 1; w < size_; ++w)
      workers_.emplace_back([this, w] { work(w); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    for (int w = 1; w < size_; ++w)
      slots_[w].has_cpu_clock =
          pthread_getcpuclockid(workers_[static_cast<std::size_t>(w - 1)].native_handle(),
                                &slots_[w].cpu_clock) == 0;
  }
  ~WorkerPool() {
    stop_.store(true);
    epoch_.fetch_add(1);
    wake_sleepers();
    for (auto& t : workers_)
      t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Threads in the pool, the caller included.
  int size() const { return size_; }
  /// A single wait for a straggler this long leaves it out at once.
  static constexpr std::chrono::microseconds kLongStall{1000};
  /// Shorter waits for one worker leave it out when they add up to kStallBudget within
  /// kStallWindow (10% of the caller's time lost to that worker).
  static constexpr std::chrono::milliseconds kStallWindow{100}, kStallBudget{10};

  /// Dispatches that left a straggling worker out (for tests and the bench's report).
  std::int64_t stalls() const { return stalls_.load(std::memory_order_relaxed); }
  /// Dispatches that waited past the patience for a worker without leaving it out (short
  /// stalls; for tests).
  std::int64_t short_stalls() const { return short_stalls_.load(std::memory_order_relaxed); }
  /// A straggler whose thread ran at least this share of the caller's wait past the patience
  /// was slow, not displaced by another process, and stays in.
  static constexpr double kRanShare = 0.75;

  /// Runs body(item, worker) for every item in [0, items) on up to `parts` threads of the pool
  /// (the calling thread is worker 0; worker ids are < parts). Items are handed out one at a time;
  /// returns when all are done. The first exception a body throws is rethrown here (the other
  /// items still run). Called from inside a body, or with parts <= 1, it runs inline.
  template <class Body>
  void run(std::int64_t items, int parts, Body&& body) {
    if (items <= 0)
      return;
    parts = static_cast<int>(std::min<std::int64_t>({parts, size_, items}));
    if (parts <= 1 || inside()) {
      for (std::int64_t i = 0; i < items; ++i)
        body(i, 0);
      return;
    }
    std::lock_guard<std::mutex> one_at_a_time(dispatch_);
    const auto now = clock::now();
    std::uint64_t invited = 0;
    for (int w = 1; w < parts; ++w)
      if (slots_[w].left_out_until <= now)
        invited |= std::uint64_t{1} << w;
    if (invited == 0) {
      Inside in;
      for (std::int64_t i = 0; i < items; ++i)
        body(i, 0);
      return;
    }
    job_.fn = [](void* ctx, std::int64_t i, int w) { (*static_cast<Body*>(ctx))(i, w); };
    job_.ctx = &body;
    job_.items = items;
    job_.next.store(0, std::memory_order_relaxed);
    job_.done.store(0, std::memory_order_relaxed);
    job_.failure = nullptr;
    job_.invited.store(invited, std::memory_order_relaxed);
    ++sequence_;
    state_.store(sequence_ << 32, std::memory_order_release); // open, nobody joined
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0)
      wake_sleepers();

    // The caller's share, timed per item for the stall test below.
    std::int64_t mine = 0;
    const auto t0 = clock::now();
    {
      Inside in;
      run_items(0);
      mine = own_items_;
    }
    const auto t1 = clock::now();
    // Close: a worker that has not joined yet never will; wait for the ones that did.
    const auto joined =
        static_cast<std::uint32_t>(state_.fetch_or(kClosed, std::memory_order_acq_rel) & kJoined);
    // Without an item of its own the caller has no estimate: a generous fixed patience.
    const auto patience = mine > 0 ? 4 * ((t1 - t0) / mine) + std::chrono::microseconds(50)
                                   : clock::duration(std::chrono::milliseconds(1));
    std::uint64_t stragglers = 0;
    clock::time_point suspected{};
    for (std::uint32_t spins = 0; job_.done.load(std::memory_order_acquire) < joined; ++spins) {
      pause();
      if ((spins & 63) == 63 && stragglers == 0 && clock::now() - t1 > patience) {
        stragglers = busy_workers();
        suspected = clock::now();
        mark_cpu_time(stragglers);
      }
      if ((spins & 1023) == 1023)
        std::this_thread::yield();
    }
    // The leave-out runs from the end of this dispatch, when the straggler is finally done.
    const auto t2 = clock::now();
    if (stragglers != 0) {
      stragglers =
          long_stallers(stragglers, t2 - t1, t2) & ~kept_running(stragglers, suspected, t2);
      mark_cpu_time(0);
    }
    if (stragglers != 0)
      leave_out(stragglers, t2);
    else
      settle(invited, t2);
    if (job_.failure)
      std::rethrow_exception(job_.failure);
  }

private:
  using clock = std::chrono::steady_clock;
  // state_: [dispatch sequence : 32][closed : 1][workers joined : 31]
  static constexpr std::uint64_t kClosed = 0x80000000u, kJoined = 0x7fffffffu;

  struct Job {
    void (*fn)(void*, std::int64_t, int) = nullptr;
    void* ctx = nullptr;
    std::int64_t items = 0;
    std::atomic<std::int64_t> next{0};
    std::atomic<std::uint32_t> done{0};
    std::atomic<std::uint64_t> invited{0};
    std::exception_ptr failure;
    std::mutex failure_lock;
  };
  struct Slot {
    std::atomic<bool> busy{false};                ///< holding items of the open dispatch
    clock::time_point left_out_until{};           ///< not invited before this time
    std::chrono::milliseconds backoff{kBackoff0}; ///< next leave-out period
    clock::time_point invited_since{};            ///< back in the dispatches since
    StallBudget short_waits;                      ///< the caller's short waits for it
    clockid_t cpu_clock{};                        ///< its thread's CPU-time clock
    bool has_cpu_clock = false;                   ///< pthread_getcpuclockid succeeded
    std::int64_t cpu_marked_ns = -1;              ///< its CPU time when a wait was suspected
    std::atomic<bool> watched{false};             ///< a wait for it is suspected: note cpu_done_ns
    std::atomic<std::int64_t> cpu_done_ns{-1};    ///< its own CPU time read as it finished, or -1
    std::atomic<std::int64_t> done_at_ns{0};      ///< when it last finished its items
  };
  static constexpr std::chrono::milliseconds kBackoff0{20}, kBackoffMax{1000};

  // Wakes the workers sleeping in work(); the lock orders it after a sleeper's last epoch check.
  void wake_sleepers() {
    { std::lock_guard<std::mutex> l(sleep_lock_); }
    wake_.notify_all();
  }
  static void pause() {
#if TPULLM_X86
    _mm_pause();
#else
    std::this_thread::yield();
#endif
  }
  static bool& inside() {
    thread_local bool in = false;
    return in;
  }
  struct Inside {
    Inside() { inside() = true; }
    ~Inside() { inside() = false; }
  };

  void run_items(int w) {
    std::int64_t n = 0;
    for (std::int64_t i; (i = job_.next.fetch_add(1, std::memory_order_relaxed)) < job_.items;) {
      ++n;
      try {
        job_.fn(job_.ctx, i, w);
      } catch (...) {
        std::lock_guard<std::mutex> l(job_.failure_lock);
        if (!job_.failure)
          job_.failure = std::current_exception();
      }
    }
    if (w == 0)
      own_items_ = n;
  }

  // The workers still holding items of the open dispatch (a bit per worker; never 0 once the
  // caller gave up waiting: at least one bit, so a stall is counted once).
  std::uint64_t busy_workers() const {
    std::uint64_t m = 0;
    for (int w = 1; w < size_; ++w)
      if (slots_[w].busy.load(std::memory_order_acquire))
        m |= std::uint64_t{1} << w;
    return m != 0 ? m : 1;
  }
  // CPU time in ns of a thread CPU-time clock, or -1 where it cannot be read.
  static std::int64_t clock_ns(clockid_t clock) {
    timespec ts{};
    if (clock_gettime(clock, &ts) != 0)
      return -1;
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
  // Thread CPU time of worker w in ns, or -1 where its clock cannot be read.
  std::int64_t cpu_ns(int w) const {
    return slots_[w].has_cpu_clock ? clock_ns(slots_[w].cpu_clock) : -1;
  }
  // Notes the CPU time of each straggler in `mask` as the wait for it is suspected.
  // Each marked worker is asked to read its own CPU time as it finishes (cpu_done_ns): the
  // caller's later reading would also count the time the worker spent after its items, or not,
  // as the machine's load decides.
  void mark_cpu_time(std::uint64_t mask) {
    for (int w = 1; w < size_; ++w) {
      Slot& s = slots_[w];
      const bool marked = (mask >> w & 1) != 0;
      s.cpu_done_ns.store(-1, std::memory_order_relaxed);
      s.cpu_marked_ns = marked ? cpu_ns(w) : -1; // before the worker can read its own
      s.watched.store(marked, std::memory_order_seq_cst);
    }
  }
  // The stragglers in `mask` whose threads ran at least kRanShare of the time from `since` (the
  // wait suspected) to when each finished its items: slow, not displaced by another process. The
  // CPU time is the one the worker read itself as it finished. Where it finished before it saw
  // the mark, the caller's reading at `now` stands in, less the caller's delay in noticing the
  // end (the most the worker can have run since).
  std::uint64_t kept_running(std::uint64_t mask, clock::time_point since,
                             clock::time_point now) const {
    std::uint64_t out = 0;
    for (int w = 1; w < size_; ++w) {
      if (!(mask >> w & 1) || slots_[w].cpu_marked_ns < 0)
        continue;
      const clock::time_point done{
          clock::duration(slots_[w].done_at_ns.load(std::memory_order_relaxed))};
      const double wait_ns = static_cast<double>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(done - since).count());
      if (wait_ns <= 0)
        continue;
      const std::int64_t own = slots_[w].cpu_done_ns.load(std::memory_order_relaxed);
      const std::int64_t cpu = own >= 0 ? own : cpu_ns(w);
      const double after_ns =
          own >= 0
              ? 0.0
              : static_cast<double>(std::max<std::int64_t>(
                    0, std::chrono::duration_cast<std::chrono::nanoseconds>(now - done).count()));
      if (cpu >= 0 &&
          static_cast<double>(cpu - slots_[w].cpu_marked_ns) - after_ns >= kRanShare * wait_ns)
        out |= std::uint64_t{1} << w;
    }
    return out;
  }
  // The stragglers of a dispatch whose caller waited `waited` after its own items that are to be
  // left out: all of them after a long wait, else those whose short waits within the current
  // window reach the budget (each is charged the wait).
  std::uint64_t long_stallers(std::uint64_t stragglers, clock::duration waited,
                              clock::time_point now) {
    if (waited >= kLongStall)
      return stragglers;
    short_stalls_.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t out = 0;
    for (int w = 1; w < size_; ++w) {
      if (!(stragglers >> w & 1))
        continue;
      if (slots_[w].short_waits.charge(now, waited, kStallWindow, kStallBudget))
        out |= std::uint64_t{1} << w;
    }
    return out;
  }
  // Leaves the stragglers out for a while, longer each time they stall again soon after being
  // invited back.
  void leave_out(std::uint64_t stragglers, clock::time_point now) {
    stalls_.fetch_add(1, std::memory_order_relaxed);
    for (int w = 1; w < size_; ++w) {
      if (!(stragglers >> w & 1))
        continue;
      Slot& s = slots_[w];
      const bool soon = now - s.invited_since < 10 * s.backoff;
      s.backoff = soon ? std::min(kBackoffMax, 2 * s.backoff) : kBackoff0;
      s.left_out_until = now + s.backoff;
      s.invited_since = s.left_out_until;
    }
  }
  // A dispatch without stall: workers back from a leave-out long enough get the short backoff.
  void settle(std::uint64_t invited, clock::time_point now) {
    for (int w = 1; w < size_; ++w) {
      Slot& s = slots_[w];
      if ((invited >> w & 1) && now - s.invited_since > std::chrono::milliseconds(500))
        s.backoff = kBackoff0;
    }
  }

  void work(int w) {
    Inside in;
    // The epoch the pool was made with (0), not a later one: a thread that starts late still sees
    // every dispatch and the destructor's stop.
    std::uint32_t seen = 0;
    for (;;) {
      // Wait for the next dispatch: spin, then sleep.
      const auto t0 = clock::now();
      for (std::uint32_t spins = 0; epoch_.load(std::memory_order_acquire) == seen && !stop_.load();
           ++spins) {
        pause();
        if ((spins & 63) == 63 && clock::now() - t0 > kSpin) {
          std::unique_lock<std::mutex> lock(sleep_lock_);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          wake_.wait(
              lock, [&] { return epoch_.load(std::memory_order_seq_cst) != seen || stop_.load(); });
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        }
      }
      seen = epoch_.load(std::memory_order_acquire);
      if (stop_.load())
        return;
      // Join the open dispatch if invited; a closed one is left alone.
      std::uint64_t s = state_.load(std::memory_order_acquire);
      bool joined = false;
      while (!(s & kClosed)) {
        if (!(job_.invited.load(std::memory_order_relaxed) >> w & 1))
          break;
        if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
          joined = true;
          break;
        }
      }
      if (!joined)
        continue;
      Slot& slot = slots_[w];
      slot.busy.store(true, std::memory_order_release);
      run_items(w);
      if (slot.watched.load(std::memory_order_seq_cst))
        slot.cpu_done_ns.store(clock_ns(CLOCK_THREAD_CPUTIME_ID), std::memory_order_relaxed);
      slot.done_at_ns.store(clock::now().time_since_epoch().count(), std::memory_order_relaxed);
      slot.busy.store(false, std::memory_order_release);
      job_.done.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  const int size_;
  std::unique_ptr<Slot[]> slots_;
  std::vector<std::thread> workers_;
  std::mutex dispatch_;
  Job job_;
  std::int64_t own_items_ = 0;
  std::uint64_t sequence_ = 0; // dispatches so far (the caller's, under dispatch_)
  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<std::uint64_t> state_{kClosed};
  std::atomic<int> sleepers_{0};
  std::mutex sleep_lock_;
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> stalls_{0}, short_stalls_{0};
};

/// The pool kernels dispatch to on this thread: the one a ScopedPool installed (an Executor's
/// while it runs a program), else a process-wide pool of usable_cores() threads made on first use.
WorkerPool& current_pool();

namespace detail {
inline WorkerPool*& installed_pool() {
  thread_local WorkerPool* p = nullptr;
  return p;
}
} // namespace detail

inline WorkerPool& current_pool() {
  if (WorkerPool* p = detail::installed_pool())
    return *p;
  static WorkerPool fallback(usable_cores());
  return fallback;
}

/// Installs `pool` as this thread's current_pool() for its lifetime (restores the previous one).
class ScopedPool {
public:
  /// Makes `pool` current on this thread.
  explicit ScopedPool(WorkerPool& pool) : prev_(detail::installed_pool()) {
    detail::installed_pool() = &pool;
  }
  ~ScopedPool() { detail::installed_pool() = prev_; }
  ScopedPool(const ScopedPool&) = delete;
  ScopedPool& operator=(const ScopedPool&) = delete;

private:
  WorkerPool* prev_;
};

} // namespace tpullm::kernels
