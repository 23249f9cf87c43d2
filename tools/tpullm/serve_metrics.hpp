#pragma once
// The counters `tpullm serve` exposes at GET /metrics, in Prometheus' text format. Updated by
// the HTTP threads (requests by route and status) and the scheduler (tokens, times, slots).
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tpullm::cli::serve {

/// See the file comment. Thread-safe.
class Metrics {
public:
  /// One HTTP request answered on `route` with `status`.
  void count_request(const std::string& route, int status);
  /// One generation finished: its prompt (fed and reused), its tokens, its time to first token
  /// and the seconds its later tokens took.
  void count_generation(std::int64_t prompt_tokens, std::int64_t cached_tokens,
                        std::int64_t completion_tokens, double ttft_seconds, double decode_seconds);
  /// One batched decode call that stepped `rows` generating slots together.
  void count_decode_batch(std::int64_t rows);
  /// Speculative decoding's verify calls, the draft tokens they checked and those kept.
  void count_speculation(std::int64_t verify_calls, std::int64_t drafted, std::int64_t accepted);
  /// A pipelined round (serve --parallel pipeline): its micro-batch decode steps and their rows.
  void count_pipeline_round(std::int64_t steps, std::int64_t rows);
  /// Rank 0's side of the pipeline so far (runtime::PipelineStats): calls collected, seconds in
  /// submit and collect, the most calls in flight. The pipeline's metrics appear once set.
  void set_pipeline(std::int64_t round_trips, double seconds, std::int64_t most_in_flight);
  /// Requests waiting for a slot, slots generating, slots in all (set by the scheduler).
  void set_load(std::int64_t queued, std::int64_t busy, std::int64_t slots);
  /// The Prometheus text exposition of everything above.
  std::string text() const;

private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, std::int64_t> requests_;
  std::int64_t generations_ = 0, prompt_ = 0, cached_ = 0, completion_ = 0, decoded_ = 0;
  double ttft_sum_ = 0, decode_seconds_ = 0, last_tps_ = 0;
  std::int64_t queued_ = 0, busy_ = 0, slots_ = 0;
  std::int64_t batch_calls_ = 0, batch_rows_ = 0;
  std::int64_t verify_calls_ = 0, drafted_ = 0, accepted_ = 0;
  bool pipeline_ = false;
  std::int64_t pipe_steps_ = 0, pipe_rows_ = 0, pipe_trips_ = 0, pipe_in_flight_ = 0;
  double pipe_seconds_ = 0;
};

} // namespace tpullm::cli::serve
