// Out-of-line definitions of tpullm/runtime/layer_pipeline.hpp (compiled once into tpullm_core).
#include "tpullm/runtime/layer_pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <tuple>

#include "hop_message.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

void PipelineLink::all_reduce_sum(std::span<float> values) {
  if (ranks() == 1)
    return;
  const auto bytes = std::as_writable_bytes(values);
  if (rank() != 0) {
    send(0, bytes);
    check(recv(0, bytes) == bytes.size(), ErrorKind::io, "all-reduce", "rank 0 sent a sum of ",
          "another size");
    return;
  }
  std::vector<float> other(values.size());
  const auto into = std::as_writable_bytes(std::span<float>(other));
  for (int r = 1; r < ranks(); ++r) {
    check(recv(r, into) == into.size(), ErrorKind::io, "all-reduce", "rank ", r,
          " sent values of another size");
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] += other[i];
  }
  for (int r = 1; r < ranks(); ++r)
    send(r, bytes);
}

LayerPipeline::LayerPipeline(PipelineLink& link, std::vector<LayerRange> ranges,
                             std::int64_t hidden, std::int64_t max_rows)
    : link_(link), ranges_(std::move(ranges)), hidden_(hidden), max_rows_(max_rows) {
  check(link_.rank() == 0, ErrorKind::invalid_input, "pipeline",
        "the Session's side runs on rank 0, not on rank ", link_.rank());
  check(static_cast<int>(ranges_.size()) == link_.ranks() && link_.ranks() >= 2,
        ErrorKind::invalid_input, "pipeline", ranges_.size(), " layer ranges for ", link_.ranks(),
        " ranks (a pipeline needs 2 ranks or more)");
  for (std::size_t r = 0; r < ranges_.size(); ++r)
    check(ranges_[r].size() > 0 && ranges_[r].begin == (r ? ranges_[r - 1].end : 0),
          ErrorKind::invalid_input, "pipeline", "rank ", r, "'s layers [", ranges_[r].begin, ", ",
          ranges_[r].end, ") do not follow the previous rank's");
  check(hidden_ > 0 && max_rows_ > 0, ErrorKind::invalid_input, "pipeline", "hidden ", hidden_,
        " and rows ", max_rows_, " must be positive");
  buffer_.resize(hop::buffer_bytes(max_rows_, hidden_));
}

LayerPipeline::~LayerPipeline() {
  try {
    stop();
  } catch (...) { // a link that failed already: the other ranks learn it from the transport
  }
}

void LayerPipeline::stop() {
  if (stopped_)
    return;
  stopped_ = true;
  hop::Header h;
  h.kind = hop::kStop;
  link_.send(1, std::as_bytes(std::span<const hop::Header>(&h, 1)));
}

void LayerPipeline::submit(const BlockCall& call, std::span<const float> hidden,
                           std::span<const std::int32_t> positions,
                           std::span<const std::int32_t> slots) {
  check(!stopped_, ErrorKind::internal, "pipeline", "a call after stop");
  hop::check_call(call, hidden, positions, slots, max_rows_, hidden_, "pipeline");
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t n = hop::write_call(buffer_, call, hidden, positions, slots);
  link_.send(1, std::span<const std::byte>(buffer_.data(), n)); // the link copies what it keeps
  pending_.push_back(call);
  stats_.bytes_sent += static_cast<std::int64_t>(n);
  stats_.most_in_flight = std::max(stats_.most_in_flight, in_flight());
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void LayerPipeline::collect(std::span<float> hidden) {
  check(!pending_.empty(), ErrorKind::internal, "pipeline", "collect with no call in flight");
  const BlockCall call = pending_.front();
  pending_.pop_front();
  check(hidden.size() == static_cast<std::size_t>(call.rows * hidden_), ErrorKind::internal,
        "pipeline", "collecting a call of ", call.rows, " rows into ", hidden.size(), " values");
  const auto t0 = std::chrono::steady_clock::now();
  const int last = link_.ranks() - 1;
  const std::size_t got = link_.recv(last, buffer_);
  const std::byte* p = buffer_.data();
  const hop::Header r = hop::read_header(buffer_, got, last);
  if (r.kind == hop::kError)
    throw hop::error_of(r, buffer_, got, "pipeline");
  check(r.kind == static_cast<std::uint32_t>(call.kind) && r.rows == call.rows &&
            r.pos0 == call.pos0 && got == sizeof r + hop::payload_bytes(r.rows, hidden_),
        ErrorKind::internal, "pipeline", "rank ", last, " answered a call of ", call.rows,
        " rows at position ", call.pos0, " with another");
  std::memcpy(hidden.data(), p + sizeof r, hidden.size_bytes());
  stats_.round_trips += 1;
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

PipelineRankStats serve_pipeline_rank(PipelineLink& link, Stages& stages, LayerRange range,
                                      std::int64_t hidden, const frontend::StageParams& params) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  const int rank = link.rank(), ranks = link.ranks();
  check(rank > 0 && rank < ranks, ErrorKind::invalid_input, "pipeline",
        "a layer rank is one of 1..", ranks - 1, ", not ", rank);
  check(stages.owns_kv_cache(), ErrorKind::invalid_input, "pipeline",
        "a layer rank needs stages that keep their own KV cache (compiled stages)");
  check(range.size() > 0, ErrorKind::invalid_input, "pipeline", "rank ", rank, " has no layers");
  const int prev = rank - 1, next = rank + 1 == ranks ? 0 : rank + 1;
  const std::int64_t max_rows = pipeline_max_rows(params);
  std::vector<std::byte> msg(hop::buffer_bytes(max_rows, hidden));
  std::vector<float> other(static_cast<std::size_t>(max_rows * hidden));
  // The handles of this rank's layers per (kind, variant), resolved on first use: a token's
  // call builds no names and looks nothing up by name.
  // (A batched decode's handles also depend on its batch, its rows.)
  std::map<std::tuple<std::uint32_t, std::int64_t, std::int64_t>, std::vector<StageHandle>> handles;
  auto layer_handles = [&](BlockKind kind, std::int64_t variant,
                           std::int64_t rows) -> const std::vector<StageHandle>& {
    if (kind != BlockKind::decode_batch)
      rows = 0;
    auto [it, fresh] = handles.try_emplace({static_cast<std::uint32_t>(kind), variant, rows});
    if (fresh)
      for (std::int64_t layer = range.begin; layer < range.end; ++layer)
        it->second.push_back(
            stages.resolve(hop::block_function(kind, layer, variant, rows, params)));
    return it->second;
  };
  PipelineRankStats stats;
  while (true) {
    const std::size_t got = link.recv(prev, msg);
    const hop::Header h = hop::read_header(msg, got, prev);
    if (h.kind == hop::kStop) {
      if (next != 0)
        link.send(next, std::span<const std::byte>(msg.data(), got));
      break;
    }
    if (h.kind == hop::kError) { // an earlier rank's failure goes on to rank 0
      link.send(next, std::span<const std::byte>(msg.data(), got));
      continue;
    }
    check(hop::is_call(h.kind), ErrorKind::io, "pipeline", "a message of kind ", h.kind,
          " from rank ", prev);
    std::size_t reply = got;
    const auto t0 = clock::now();
    try {
      check(h.rows > 0 && h.rows <= max_rows &&
                got == sizeof h + hop::payload_bytes(h.rows, hidden),
            ErrorKind::internal, "pipeline", "a call of ", h.rows, " rows in ", got, " bytes");
      const auto kind = static_cast<BlockKind>(h.kind);
      const std::int64_t L = h.rows;
      const std::int64_t S = hop::history_of(kind, h.variant, params);
      float* cur = reinterpret_cast<float*>(msg.data() + sizeof h);
      const auto* pos = reinterpret_cast<const std::int32_t*>(cur + L * hidden);
      const auto* slot = pos + L;
      // One slot for a conversation's call (every row the same), one per row for a batch.
      const bool batch = kind == BlockKind::decode_batch;
      if (!batch)
        check(std::all_of(slot, slot + L, [&](std::int32_t x) { return x == slot[0]; }),
              ErrorKind::internal, "pipeline", "a call of one conversation names several slots");
      const std::span<const std::int32_t> slots(slot, static_cast<std::size_t>(batch ? L : 1));
      // The positions stay where they are; the hidden state moves between the message and
      // `other`, and ends in the message for the send.
      float* bufs[2] = {cur, other.data()};
      int c = 0;
      const auto& fns = layer_handles(kind, h.variant, L);
      for (const StageHandle fn : fns) {
        const ConstBytes in[4] = {cbytes(bufs[c], L * hidden), cbytes(pos, L), {}, {}};
        const MutBytes out[3] = {mbytes(bufs[c ^ 1], L * hidden), {}, {}};
        stages.run_on(fn, std::span<const ConstBytes>(in, S > 0 ? 4 : 2), out, slots);
        c ^= 1;
      }
      if (c == 1)
        std::memcpy(cur, other.data(), static_cast<std::size_t>(L * hidden) * sizeof(float));
    } catch (const Error& e) {
      reply = hop::write_error(msg, rank, e);
    }
    stats.busy_seconds += std::chrono::duration<double>(clock::now() - t0).count();
    stats.calls += 1;
    link.send(next, std::span<const std::byte>(msg.data(), reply));
  }
  stats.total_seconds = std::chrono::duration<double>(clock::now() - t_start).count();
  return stats;
}

} // namespace tpullm::runtime
