// Slots, queue and the scheduler thread of `tpullm serve` (serve_scheduler.hpp).
#include "serve_scheduler.hpp"

#include <algorithm>

#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/kv_region.hpp"

namespace tpullm::cli::serve {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

} // namespace

bool Job::wait(std::string& text, std::chrono::milliseconds timeout,
               std::vector<runtime::TokenLogprobs>* logprobs) {
  std::unique_lock lock(m_);
  cv_.wait_for(lock, timeout,
               [&] { return done_ || !pending_.empty() || !pending_logprobs_.empty(); });
  text += pending_;
  pending_.clear();
  if (logprobs)
    logprobs->insert(logprobs->end(), pending_logprobs_.begin(), pending_logprobs_.end());
  pending_logprobs_.clear();
  return done_;
}

void Job::emit(const std::string& text, const std::optional<runtime::TokenLogprobs>& logprobs) {
  if (text.empty() && !logprobs)
    return;
  {
    std::lock_guard lock(m_);
    pending_ += text;
    if (logprobs)
      pending_logprobs_.push_back(*logprobs);
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

std::int64_t Scheduler::slot_bytes(const bundle::Bundle& b, std::int64_t) {
  // A sliding-window layer's cache is its ring (runtime/kv_region.hpp). The executor's arena
  // and scratch are shared by every slot.
  return runtime::kv_rings_of(b.programs(), b.kv()).slot_bytes(b.kv());
}

std::int64_t Scheduler::shared_bytes(const bundle::Bundle& b, std::int64_t cores) {
  const std::int64_t n = cores > 0 ? cores : b.target().cores;
  return b.max_arena() + std::max(b.target().local_memory, b.max_local()) * n;
}

Scheduler::Scheduler(std::shared_ptr<const bundle::Bundle> bundle, const runtime::TextSide& text,
                     SchedulerOptions options, Metrics& metrics)
    : bundle_(std::move(bundle)), text_(text), options_(options), metrics_(metrics) {
  check(options_.slots >= 1, ErrorKind::invalid_input, "--slots", "must be >= 1");
  // One executor: its KV cache holds every slot's conversation, so one decode call can step
  // them all (batched decode) and the activation arena is shared.
  if (options_.executor) {
    exec_ = options_.executor;
    check(exec_->kv_geometry().slots == options_.slots, ErrorKind::internal, "scheduler",
          "an executor of ", exec_->kv_geometry().slots, " KV slots for ", options_.slots,
          " slots");
  } else {
    own_exec_ = runtime::make_executor(*bundle_, options_.cores, options_.slots);
    exec_ = own_exec_.get();
  }
  pool_ = std::make_unique<runtime::SlotPool>(*exec_, runtime::session_dims(bundle_->model()),
                                              bundle_->model().params, &text_.tokenizer);
  if (options_.remote)
    pool_->set_remote_layers(options_.remote, options_.micro_batches, options_.pipeline_steps);
  jobs_.resize(static_cast<std::size_t>(options_.slots));
  t_first_.resize(jobs_.size());
  metrics_.set_load(0, 0, slots());
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  stop();
}

std::int64_t Scheduler::busy_locked() const {
  return std::count_if(jobs_.begin(), jobs_.end(), [](const auto& j) { return j != nullptr; });
}

std::shared_ptr<Job> Scheduler::submit(JobSpec spec) {
  auto job = std::make_shared<Job>(std::move(spec));
  {
    std::lock_guard lock(m_);
    if (stopping_)
      throw ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"};
    // A job waits only when every slot is taken; the queue holds at most max_queue of them.
    if (queue_.size() + static_cast<std::size_t>(busy_locked()) >=
        jobs_.size() + options_.max_queue)
      throw runtime::BusyError("", "the server is busy: every slot is generating and " +
                                       std::to_string(options_.max_queue) +
                                       " requests are already waiting; retry later");
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
    auto job = queue_.front();
    const auto slot = pool_->pick(job->spec().prompt);
    if (!slot)
      return;
    queue_.pop_front();
    runtime::SlotRequest request;
    request.prompt = job->spec().prompt;
    request.options.sampling = job->spec().sampling;
    request.options.stop = {text_.stop_ids, job->spec().max_tokens, job->spec().stop};
    request.options.logprobs = job->spec().logprobs;
    request.options.grammar = job->spec().grammar;
    request.options.speculation = options_.speculation;
    try {
      pool_->start(*slot, request);
    } catch (const std::exception& e) { // checked before submit(): a bug if it happens
      job->finish(JobOutcome{"", {}, 0, 0, api_error(e)});
      continue;
    }
    jobs_[static_cast<std::size_t>(*slot)] = std::move(job);
  }
}

void Scheduler::loop() {
  for (;;) {
    std::deque<std::shared_ptr<Job>> dropped;
    bool stopping = false;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || busy_locked() > 0; });
      stopping = stopping_;
      if (stopping)
        dropped.swap(queue_);
      else
        assign_locked();
      metrics_.set_load(static_cast<std::int64_t>(queue_.size()), busy_locked(), slots());
    }
    if (stopping) { // end() takes the lock itself
      const ApiError down{503, "the server is shutting down", "server_error", "", "shutting_down"};
      for (auto& j : dropped)
        j->finish(JobOutcome{"", {}, 0, 0, down});
      for (int i = 0; i < slots(); ++i)
        if (jobs_[static_cast<std::size_t>(i)]) {
          pool_->cancel(i);
          end(i, JobOutcome{"", {}, 0, 0, down});
        }
      return;
    }
    // A client that went away frees its slot before the round.
    for (int i = 0; i < slots(); ++i) {
      const auto& job = jobs_[static_cast<std::size_t>(i)];
      if (job && job->cancelled_) {
        pool_->cancel(i);
        end(i, JobOutcome{"",
                          {},
                          0,
                          0,
                          ApiError{499, "the client closed the connection", "invalid_request_error",
                                   "", "client_closed"}});
      }
    }
    // One round of the pool (runtime/slot_pool.hpp), then the queue is looked at again.
    const runtime::SlotRound round = pool_->step();
    if (round.micro_batches > 0) // a pipelined round: its steps, not one call of every row
      metrics_.count_pipeline_round(round.micro_batches, round.decode_batch);
    else if (round.decode_batch > 1)
      metrics_.count_decode_batch(round.decode_batch);
    if (const auto* st = options_.pipeline_stats)
      metrics_.set_pipeline(st->round_trips, st->seconds, st->most_in_flight);
    if (round.speculation.verify_calls > 0)
      metrics_.count_speculation(round.speculation.verify_calls, round.speculation.drafted,
                                 round.speculation.accepted);
    for (const auto& e : round.events)
      deliver(e);
  }
}

void Scheduler::deliver(const runtime::SlotEvent& e) {
  const auto i = static_cast<std::size_t>(e.slot);
  Job& job = *jobs_[i];
  if (e.error) {
    try {
      std::rethrow_exception(e.error);
    } catch (const std::exception& x) {
      end(e.slot, JobOutcome{"", {}, 0, 0, api_error(x)});
    } catch (...) {
      end(e.slot, JobOutcome{"", {}, 0, 0, ApiError{500, "unknown error", "server_error", "", ""}});
    }
    return;
  }
  if (e.first_token)
    t_first_[i] = clock_type::now();
  // The eos token is not part of the answer: neither is its log probability.
  const bool eos = e.stop && *e.stop == runtime::StopReason::eos;
  job.emit(e.text, eos ? std::nullopt : e.logprobs);
  if (!e.stop)
    return;
  JobOutcome o;
  o.finish_reason = std::string(runtime::finish_reason(*e.stop));
  o.usage = {e.prompt_tokens, e.generated, e.cached_tokens};
  // Time to first token as the client sees it: queue wait included.
  o.ttft_seconds = std::chrono::duration<double>(t_first_[i] - job.submitted_).count();
  o.decode_seconds = e.generated > 1 ? seconds_since(t_first_[i]) : 0.0;
  end(e.slot, std::move(o));
}

void Scheduler::end(int slot, JobOutcome o) {
  if (!o.error)
    metrics_.count_generation(o.usage.prompt_tokens, o.usage.cached_tokens,
                              o.usage.completion_tokens, o.ttft_seconds, o.decode_seconds);
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(m_); // submit() counts busy slots under the lock
    job = std::move(jobs_[static_cast<std::size_t>(slot)]);
    jobs_[static_cast<std::size_t>(slot)].reset();
    metrics_.set_load(static_cast<std::int64_t>(queue_.size()), busy_locked(), slots());
  }
  job->finish(std::move(o));
}

} // namespace tpullm::cli::serve
