#pragma once
// The compute side of `tpullm serve`: the library's slot pool (runtime/slot_pool.hpp: N slots on
// one executor's KV cache, prompt reuse, one prefill segment or decode row per busy slot per
// round, batched decode), a bounded queue of jobs waiting for a slot, and one scheduler thread
// that owns all compute: it assigns queued jobs to the slot the pool picks (the longest reusable
// prefix, else the least recently used), frees the slots of clients that went away, runs a round
// and hands each slot's text and end to its job. HTTP threads only submit jobs and wait for their
// text; library errors become HTTP errors in serve_api.hpp api_error.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "serve_api.hpp"
#include "serve_metrics.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/runtime/slot_pool.hpp"
#include "tpullm/runtime/text_side.hpp"

namespace tpullm::cli::serve {

/// What one generation needs.
struct JobSpec {
  std::vector<std::int32_t> prompt;  ///< the whole prompt (every token of the conversation)
  runtime::SamplingOptions sampling; ///< validated
  int max_tokens = 1;                ///< >= 1; the end of the compiled sequence also stops
  std::vector<std::string> stop;     ///< stop strings (the answer ends before the first one)
  int logprobs = -1; ///< -1: none; 0..20: each answer token's logprob and this many alternatives
  std::shared_ptr<const grammar::Grammar> grammar; ///< the answer's language (null: free text)
};

/// How a job ended.
struct JobOutcome {
  std::string finish_reason;     ///< "stop" (eos token or stop string) or "length"
  Usage usage;                   ///< prompt, cached and generated tokens
  double ttft_seconds = 0;       ///< from its arrival (queue wait included) to its first token
  double decode_seconds = 0;     ///< the tokens after the first
  std::optional<ApiError> error; ///< set when the job was cancelled or failed
};

/// One generation in flight, shared by its HTTP thread and the scheduler.
class Job {
public:
  explicit Job(JobSpec spec)
      : spec_(std::move(spec)), submitted_(std::chrono::steady_clock::now()) {}
  /// Waits up to `timeout` for answer text or the end; appends the new text to `text` and (when
  /// `logprobs` is not null) the log probabilities of the tokens generated since the last call
  /// (JobSpec::logprobs >= 0; an eos token has none). Returns true once the job has ended
  /// (outcome() is then final and every piece has been returned).
  bool wait(std::string& text, std::chrono::milliseconds timeout,
            std::vector<runtime::TokenLogprobs>* logprobs = nullptr);
  /// The client went away: the scheduler drops the job at its next step.
  void cancel() { cancelled_ = true; }
  /// Valid once wait() returned true.
  const JobOutcome& outcome() const { return outcome_; }
  const JobSpec& spec() const { return spec_; }

private:
  friend class Scheduler;
  void emit(const std::string& text, const std::optional<runtime::TokenLogprobs>& logprobs);
  void finish(JobOutcome o);

  JobSpec spec_;
  std::chrono::steady_clock::time_point submitted_; ///< when it arrived (TTFT counts from here)
  std::mutex m_;
  std::condition_variable cv_;
  std::string pending_;
  std::vector<runtime::TokenLogprobs> pending_logprobs_;
  bool done_ = false;
  JobOutcome outcome_;
  std::atomic<bool> cancelled_{false};
};

/// Sizes of the scheduler.
struct SchedulerOptions {
  int slots = 1;             ///< conversations with their own KV cache (>= 1)
  std::int64_t cores = 0;    ///< cores of the executor (0: the bundle target's)
  std::size_t max_queue = 8; ///< jobs waiting for a slot beyond which submit() refuses
  /// Speculative decoding for every request (--draft; draft_max 0: off). Its draft source, if
  /// any, must outlive the scheduler; it is called on the scheduler thread only.
  runtime::SpeculationOptions speculation;
  /// The executor of the slots (null: the scheduler makes one of `slots` KV slots); it must
  /// have `slots` KV slots and outlive the scheduler.
  runtime::Executor* executor = nullptr;
  /// A pipeline's other ranks, which run the later layers (null: every layer here); see
  /// runtime::SlotPool::set_remote_layers.
  runtime::RemoteLayers* remote = nullptr;
  int micro_batches = 2;  ///< with `remote`: decode micro-batches in flight together
  int pipeline_steps = 1; ///< with `remote`: decode steps per micro-batch per round
  /// With `remote`: its traffic, read after each round into the metrics (null: none).
  const runtime::PipelineStats* pipeline_stats = nullptr;
};

/// See the file comment.
class Scheduler {
public:
  /// Builds one executor of `options.slots` KV slots over `bundle` (throws Error when memory
  /// does not allow), the library's slot pool over it, and starts the scheduler thread. `text`
  /// must outlive the scheduler.
  Scheduler(std::shared_ptr<const bundle::Bundle> bundle, const runtime::TextSide& text,
            SchedulerOptions options, Metrics& metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Queues a job. Throws runtime::BusyError when every slot is taken and the queue is full (503
  /// queue_full through api_error), ApiError 503 when the server is stopping.
  std::shared_ptr<Job> submit(JobSpec spec);
  /// Ends every queued and running job (with a 503 "shutting down" error) and joins the thread.
  void stop();
  /// Number of slots.
  int slots() const { return static_cast<int>(jobs_.size()); }
  /// Bytes one slot adds (its KV cache).
  static std::int64_t slot_bytes(const bundle::Bundle& b, std::int64_t cores);
  /// The executor of the slots (a draft model shares its worker threads: share_draft_workers).
  runtime::Executor& executor() { return *exec_; }
  /// Bytes the executor allocates once for every slot (activation arena + local scratch).
  static std::int64_t shared_bytes(const bundle::Bundle& b, std::int64_t cores);
  /// Largest compiled batched decode (1: none).
  std::int64_t max_decode_batch() const { return pool_->max_decode_batch(); }

private:
  void loop();
  void assign_locked();
  std::int64_t busy_locked() const;
  void deliver(const runtime::SlotEvent& e);
  void end(int slot, JobOutcome o);

  std::shared_ptr<const bundle::Bundle> bundle_;
  const runtime::TextSide& text_;
  SchedulerOptions options_;
  Metrics& metrics_;
  std::unique_ptr<runtime::Executor> own_exec_; ///< when options_.executor is null
  runtime::Executor* exec_ = nullptr;
  std::unique_ptr<runtime::SlotPool> pool_; ///< touched by the scheduler thread only
  std::vector<std::shared_ptr<Job>> jobs_;  ///< per slot, under m_ (null: idle)
  std::vector<std::chrono::steady_clock::time_point> t_first_; ///< per slot: its first token
  std::mutex m_;
  std::mutex stop_m_; ///< serializes stop()
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace tpullm::cli::serve
