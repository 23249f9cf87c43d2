// Slots, queue and the scheduler thread of `tpullm serve` (serve_scheduler.hpp).
#include "serve_scheduler.hpp"

#include <algorithm>

#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/engine.hpp"
#include "tpullm/runtime/prompt_cache.hpp"
#include "tpullm/runtime/session.hpp"

namespace tpullm::cli::serve {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

} // namespace

bool Job::wait(std::string& text, std::chrono::milliseconds timeout) {
  std::unique_lock lock(m_);
  cv_.wait_for(lock, timeout, [&] { return done_ || !pending_.empty(); });
  text += pending_;
  pending_.clear();
  return done_;
}

void Job::emit(const std::string& text) {
  if (text.empty())
    return;
  {
    std::lock_guard lock(m_);
    pending_ += text;
  }
  cv_.notify_all();
}

void Job::finish(JobOutcome o) {
  {
    std::lock_guard lock(m_);
    outcome_ = std::move(o);
    done_ = true;
  }
  cv_.notify_all();
}

/// One conversation: its KV slot of the shared executor, the session over it, the prompt cache
/// that remembers the ids its KV cache holds, and the job it is generating (with that job's
/// progress).
struct Scheduler::Slot {
  std::int32_t index = 0; ///< its KV slot in the shared executor
  std::unique_ptr<runtime::CompiledStages> stages;
  std::unique_ptr<runtime::Session> session;
  std::unique_ptr<runtime::PromptCache> cache; ///< the ids in the KV cache; what a prompt reuses
  std::uint64_t last_used = 0;

  std::shared_ptr<Job> job;
  std::optional<runtime::Generation> gen; ///< the answer: sampler, stop rules, text
  std::size_t fed = 0;                    ///< prompt tokens in the cache
  std::int64_t cached = 0;                ///< prompt tokens found there at the start
  std::int32_t last = 0;                  ///< the last sampled token (fed at the next decode step)
  clock_type::time_point t0, t_first;
  bool started = false;

  /// Generating tokens after its prompt (its next step is a decode of `last`).
  bool decoding() const { return job && started && fed >= job->spec().prompt.size(); }
};

std::int64_t Scheduler::slot_bytes(const bundle::Bundle& b, std::int64_t) {
  return b.kv().slot_bytes(); // the executor's arena and scratch are shared by every slot
}

std::int64_t Scheduler::shared_bytes(const bundle::Bundle& b, std::int64_t cores) {
  const std::int64_t n = cores > 0 ? cores : b.target().cores;
  return b.max_arena() + std::max(b.target().local_memory, b.max_local()) * n;
}

Scheduler::Scheduler(std::shared_ptr<const bundle::Bundle> bundle, const runtime::TextSide& text,
                     SchedulerOptions options, Metrics& metrics)
    : bundle_(std::move(bundle)), text_(text), options_(options), metrics_(metrics) {
  check(options_.slots >= 1, ErrorKind::invalid_input, "--slots", "must be >= 1");
  const auto dims = runtime::Engine::dims_of(bundle_->model());
  // One executor: its KV cache holds every slot's conversation, so one decode call can step
  // them all (batched decode) and the activation arena is shared.
  exec_ = bundle_->make_executor(options_.cores, options_.slots);
  decoder_.emplace(*exec_, dims, bundle_->model().params);
  for (int i = 0; i < options_.slots; ++i) {
    auto s = std::make_unique<Slot>();
    s->index = i;
    s->stages = std::make_unique<runtime::CompiledStages>(*exec_, i);
    s->session = std::make_unique<runtime::Session>(*s->stages, dims, bundle_->model().params);
    s->cache = std::make_unique<runtime::PromptCache>(*s->session);
    slots_.push_back(std::move(s));
  }
  metrics_.set_load(0, 0, slots());
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  stop();
}

std::shared_ptr<Job> Scheduler::submit(JobSpec spec) {
  auto job = std::make_shared<Job>(std::move(spec));
  {
    std::lock_guard lock(m_);
    if (stopping_)
      throw ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"};
    std::size_t busy = 0;
    for (const auto& s : slots_)
      busy += s->job != nullptr;
    // A job waits only when every slot is taken; the queue holds at most max_queue of them.
    if (queue_.size() + busy >= slots_.size() + options_.max_queue)
      throw ApiError{503,
                     "the server is busy: every slot is generating and " +
                         std::to_string(options_.max_queue) +
                         " requests are already waiting; retry later",
                     "server_error", "", "queue_full"};
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

void Scheduler::stop() {
  std::lock_guard once(stop_m_); // the signal's stopper and the main thread may both call it
  {
    std::lock_guard lock(m_);
    if (stopping_ && !thread_.joinable())
      return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void Scheduler::assign_locked() {
  while (!queue_.empty()) {
    auto& job = queue_.front();
    Slot* best = nullptr;
    std::size_t best_reuse = 0;
    for (auto& s : slots_) {
      if (s->job)
        continue;
      const auto r = static_cast<std::size_t>(s->cache->reusable(job->spec().prompt));
      if (!best || r > best_reuse || (r == best_reuse && s->last_used < best->last_used)) {
        best = s.get();
        best_reuse = r;
      }
    }
    if (!best)
      return;
    best->job = std::move(job);
    best->started = false;
    queue_.pop_front();
  }
}

void Scheduler::loop() {
  for (;;) {
    std::vector<Slot*> busy;
    std::deque<std::shared_ptr<Job>> dropped;
    bool stopping = false;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] {
        if (stopping_ || !queue_.empty())
          return true;
        return std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->job; });
      });
      stopping = stopping_;
      if (stopping)
        dropped.swap(queue_);
      else
        assign_locked();
      for (auto& s : slots_)
        if (s->job)
          busy.push_back(s.get());
      metrics_.set_load(static_cast<std::int64_t>(queue_.size()),
                        static_cast<std::int64_t>(busy.size()), slots());
    }
    if (stopping) { // end() takes the lock itself
      const ApiError down{503, "the server is shutting down", "server_error", "", "shutting_down"};
      for (auto& j : dropped)
        j->finish(JobOutcome{"", {}, 0, 0, down});
      for (Slot* s : busy)
        end(*s, JobOutcome{"", {}, 0, 0, down});
      return;
    }
    // Every busy slot takes one step, then the queue is looked at again: slots still in their
    // prompt take one prefill segment each (or their first token), and the slots generating
    // decode their next token together, in one batched decode call when the bundle has one
    // (continuous batching: a slot joins or leaves between steps).
    std::vector<Slot*> decoding;
    for (Slot* s : busy)
      if (s->decoding() && !s->job->cancelled_ && decoder_->batched())
        decoding.push_back(s);
      else
        step(*s);
    if (decoding.size() == 1)
      step(*decoding[0]);
    else if (!decoding.empty())
      decode_together(decoding);
  }
}

void Scheduler::decode_together(const std::vector<Slot*>& slots) {
  std::vector<runtime::DecodeRow> rows;
  for (Slot* s : slots)
    rows.push_back({s->session.get(), s->index, s->last});
  std::vector<float> logits;
  try {
    logits = decoder_->decode(rows);
  } catch (const std::exception& e) {
    for (Slot* s : slots)
      fail(*s, e);
    return;
  }
  metrics_.count_decode_batch(static_cast<std::int64_t>(slots.size()));
  const auto V = static_cast<std::size_t>(bundle_->model().vocab);
  for (std::size_t r = 0; r < slots.size(); ++r) {
    Slot& s = *slots[r];
    try {
      s.cache->record(std::span<const std::int32_t>(&s.last, 1));
      consume(s, std::span<const float>(logits.data() + r * V, V));
    } catch (const std::exception& e) {
      fail(s, e);
    }
  }
}

void Scheduler::fail(Slot& s, const std::exception& e) {
  // What the cache holds after a failed step is not known: forget it.
  s.cache->reset();
  const auto* err = dynamic_cast<const Error*>(&e);
  const bool bad_input = err && err->kind() == ErrorKind::invalid_input;
  end(s, JobOutcome{"",
                    {},
                    0,
                    0,
                    ApiError{bad_input ? 400 : 500, e.what(),
                             bad_input ? "invalid_request_error" : "server_error", "", ""}});
}

void Scheduler::end(Slot& s, JobOutcome o) {
  if (!o.error)
    metrics_.count_generation(o.usage.prompt_tokens, o.usage.cached_tokens,
                              o.usage.completion_tokens, o.ttft_seconds, o.decode_seconds);
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(m_); // submit() counts busy slots under the lock
    job = std::move(s.job);
    s.job.reset();
    s.last_used = ++clock_;
    std::int64_t busy = 0;
    for (const auto& slot : slots_)
      busy += slot->job != nullptr;
    metrics_.set_load(static_cast<std::int64_t>(queue_.size()), busy, slots());
  }
  s.gen.reset();
  job->finish(std::move(o));
}

void Scheduler::step(Slot& s) {
  Job& job = *s.job;
  const JobSpec& spec = job.spec();
  if (job.cancelled_) { // the client went away: the slot is free for the next job
    end(s, JobOutcome{"",
                      {},
                      0,
                      0,
                      ApiError{499, "the client closed the connection", "invalid_request_error", "",
                               "client_closed"}});
    return;
  }
  runtime::Session& session = *s.session;
  try {
    if (!s.started) {
      s.started = true;
      s.t0 = clock_type::now();
      s.cached = s.cache->keep_prefix(spec.prompt);
      s.fed = static_cast<std::size_t>(s.cached);
      runtime::GenerateOptions options;
      options.sampling = spec.sampling;
      options.stop = {text_.stop_ids, spec.max_tokens, spec.stop};
      s.gen.emplace(options, &text_.tokenizer, spec.prompt);
    }
    std::vector<float> logits;
    if (s.fed < spec.prompt.size()) {
      // One prefill segment per step (max_input_length tokens), so other slots go on between.
      const std::size_t n = std::min<std::size_t>(
          spec.prompt.size() - s.fed, static_cast<std::size_t>(session.params().max_input_length));
      const std::vector<std::int32_t> seg(spec.prompt.begin() + static_cast<std::ptrdiff_t>(s.fed),
                                          spec.prompt.begin() +
                                              static_cast<std::ptrdiff_t>(s.fed + n));
      logits = session.prefill(seg, false);
      s.cache->record(seg);
      s.fed += n;
      if (s.fed < spec.prompt.size())
        return;
    } else {
      logits = session.decode(s.last);
      s.cache->record(std::span<const std::int32_t>(&s.last, 1));
    }
    consume(s, logits);
  } catch (const std::exception& e) { // e.g. out of memory: this job fails, the server goes on
    fail(s, e);
  }
}

void Scheduler::consume(Slot& s, std::span<const float> logits) {
  Job& job = *s.job;
  runtime::Session& session = *s.session;
  const runtime::GenerationStep step =
      s.gen->step(logits, session.length(), session.params().seq_length);
  s.last = step.token;
  if (s.gen->generated() == 1)
    s.t_first = clock_type::now();
  job.emit(step.text);
  if (!step.stop)
    return;
  JobOutcome o;
  o.finish_reason = std::string(runtime::finish_reason(*step.stop));
  o.usage = {static_cast<std::int64_t>(job.spec().prompt.size()), s.gen->generated(), s.cached};
  // Time to first token as the client sees it: queue wait included.
  o.ttft_seconds = std::chrono::duration<double>(s.t_first - job.submitted_).count();
  o.decode_seconds = s.gen->generated() > 1 ? seconds_since(s.t_first) : 0.0;
  end(s, std::move(o));
}

} // namespace tpullm::cli::serve
