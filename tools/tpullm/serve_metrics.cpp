// Prometheus counters of `tpullm serve` (serve_metrics.hpp).
#include "serve_metrics.hpp"

#include <sstream>

namespace tpullm::cli::serve {

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard lock(m_);
  ++requests_[{route, status}];
}

void Metrics::count_generation(std::int64_t prompt_tokens, std::int64_t cached_tokens,
                               std::int64_t completion_tokens, double ttft_seconds,
                               double decode_seconds) {
  std::lock_guard lock(m_);
  ++generations_;
  prompt_ += prompt_tokens;
  cached_ += cached_tokens;
  completion_ += completion_tokens;
  ttft_sum_ += ttft_seconds;
  if (completion_tokens > 1 && decode_seconds > 0) {
    decoded_ += completion_tokens - 1;
    decode_seconds_ += decode_seconds;
    last_tps_ = static_cast<double>(completion_tokens - 1) / decode_seconds;
  }
}

void Metrics::count_decode_batch(std::int64_t rows) {
  std::lock_guard lock(m_);
  ++batch_calls_;
  batch_rows_ += rows;
}

void Metrics::count_pipeline_round(std::int64_t steps, std::int64_t rows) {
  std::lock_guard lock(m_);
  pipe_steps_ += steps;
  pipe_rows_ += rows;
}

void Metrics::set_pipeline(std::int64_t round_trips, double seconds, std::int64_t most_in_flight) {
  std::lock_guard lock(m_);
  pipeline_ = true;
  pipe_trips_ = round_trips;
  pipe_seconds_ = seconds;
  pipe_in_flight_ = most_in_flight;
}

void Metrics::count_speculation(std::int64_t verify_calls, std::int64_t drafted,
                                std::int64_t accepted) {
  std::lock_guard lock(m_);
  verify_calls_ += verify_calls;
  drafted_ += drafted;
  accepted_ += accepted;
}

void Metrics::set_load(std::int64_t queued, std::int64_t busy, std::int64_t slots) {
  std::lock_guard lock(m_);
  queued_ = queued;
  busy_ = busy;
  slots_ = slots;
}

std::string Metrics::text() const {
  std::lock_guard lock(m_);
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  // A metric of one value: its help, its type and the value, the name written once.
  auto one = [&](const char* name, const char* type, const char* help, auto value) {
    metric(name, type, help);
    o << name << " " << value << "\n";
  };
  metric("tpullm_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, n] : requests_)
    o << "tpullm_requests_total{route=\"" << key.first << "\",status=\"" << key.second << "\"} "
      << n << "\n";
  one("tpullm_generations_total", "counter", "Generations finished.", generations_);
  one("tpullm_prompt_tokens_total", "counter", "Prompt tokens of finished generations.", prompt_);
  one("tpullm_cached_prompt_tokens_total", "counter",
      "Prompt tokens found in a slot's KV cache (not prefilled again).", cached_);
  one("tpullm_completion_tokens_total", "counter", "Generated tokens.", completion_);
  metric("tpullm_time_to_first_token_seconds", "summary",
         "From a request's arrival (queue wait included) to its first token.");
  o << "tpullm_time_to_first_token_seconds_sum " << ttft_sum_ << "\n"
    << "tpullm_time_to_first_token_seconds_count " << generations_ << "\n";
  one("tpullm_decode_seconds_total", "counter", "Seconds spent producing tokens after the first.",
      decode_seconds_);
  one("tpullm_decode_tokens_total", "counter", "Tokens produced after each first token.", decoded_);
  one("tpullm_decode_tokens_per_second", "gauge",
      "Decode speed of the last finished generation (tokens after the first / their seconds).",
      last_tps_);
  one("tpullm_batched_decode_calls_total", "counter",
      "Batched decode calls (several generating slots stepped in one call).", batch_calls_);
  one("tpullm_batched_decode_rows_total", "counter",
      "Slot steps done inside batched decode calls (rows / calls = mean batch).", batch_rows_);
  one("tpullm_speculation_verify_calls_total", "counter",
      "Verify calls of speculative decoding (--draft): one per drafted segment.", verify_calls_);
  one("tpullm_speculation_drafted_tokens_total", "counter", "Draft tokens checked.", drafted_);
  one("tpullm_speculation_accepted_tokens_total", "counter",
      "Draft tokens kept (accepted / drafted = acceptance rate).", accepted_);
  if (pipeline_) {
    one("tpullm_pipeline_decode_steps_total", "counter",
        "Micro-batch decode steps sent down the pipeline (--parallel pipeline).", pipe_steps_);
    one("tpullm_pipeline_decode_rows_total", "counter",
        "Slot steps inside them (rows / steps = mean micro-batch).", pipe_rows_);
    one("tpullm_pipeline_round_trips_total", "counter",
        "Calls rank 0 sent down the ranks and took back (segments, tokens, steps).", pipe_trips_);
    one("tpullm_pipeline_wait_seconds_total", "counter",
        "Seconds rank 0 spent sending calls and waiting for the other ranks' layers.",
        pipe_seconds_);
    one("tpullm_pipeline_calls_in_flight_max", "gauge", "The most calls in flight at once.",
        pipe_in_flight_);
  }
  one("tpullm_queue_depth", "gauge", "Requests waiting for a slot.", queued_);
  one("tpullm_slots_busy", "gauge", "Slots generating.", busy_);
  one("tpullm_slots", "gauge", "Slots (conversations with their own KV cache).", slots_);
  return o.str();
}

} // namespace tpullm::cli::serve
