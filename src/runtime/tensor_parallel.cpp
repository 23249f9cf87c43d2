// Out-of-line definitions of tpullm/runtime/tensor_parallel.hpp (compiled once into tpullm_core).
#include "tpullm/runtime/tensor_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "hop_message.hpp"
#include "tpullm/frontend/tensor_parallel.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

namespace {

using clock = std::chrono::steady_clock;

double since(clock::time_point t0) {
  return std::chrono::duration<double>(clock::now() - t0).count();
}

} // namespace

/// One rank's halves of every layer: the handles, resolved once per call shape, and the
/// all-reduce buffer.
class TensorParallelWorker {
public:
  TensorParallelWorker(PipelineLink& link, Stages& stages, SessionDims dims,
                       frontend::StageParams params)
      : link_(link), stages_(stages), layers_(dims.layers), hidden_(dims.hidden),
        params_(std::move(params)), vocab_rows_(frontend::tp_vocab_rows(dims.vocab, link.ranks())) {
    check(stages_.owns_kv_cache(), ErrorKind::invalid_input, "tensor parallel",
          "a rank needs stages that keep their own KV cache (compiled stages)");
    check(link_.ranks() >= 2, ErrorKind::invalid_input, "tensor parallel",
          "needs 2 ranks or more, not ", link_.ranks());
    check(layers_ > 0 && hidden_ > 0, ErrorKind::invalid_input, "tensor parallel", "layers ",
          layers_, " and hidden ", hidden_, " must be positive");
  }

  /// Runs every layer of a call of `rows` rows on `hidden` [rows, hidden] (in place) with the
  /// other ranks. Returns the ranks that failed, each the all-reduce's flag slot after the
  /// values (empty: the call ran through), every rank stopping at the same all-reduce; this
  /// rank's own error, if any, in `mine`.
  std::vector<int> run(BlockKind kind, std::int64_t variant, std::int64_t rows, float* hidden,
                       const std::int32_t* pos, std::span<const std::int32_t> slots,
                       std::optional<Error>& mine) {
    const auto t_call = clock::now();
    const std::int64_t n = rows * hidden_;
    const auto flags_at = static_cast<std::size_t>(n);
    partial_.resize(flags_at + static_cast<std::size_t>(link_.ranks()));
    const std::int64_t S = hop::history_of(kind, variant, params_);
    std::vector<int> failed;
    for (std::int64_t layer = 0; layer < layers_ && failed.empty(); ++layer) {
      for (int half = 0; half < 2 && failed.empty(); ++half) {
        if (!mine) {
          try {
            const MutBytes out[3] = {mbytes(partial_.data(), n), {}, {}};
            if (half == 0) {
              const ConstBytes in[4] = {cbytes(hidden, n), cbytes(pos, rows), {}, {}};
              stages_.run_on(attention(kind, variant, rows)[static_cast<std::size_t>(layer)],
                             std::span<const ConstBytes>(in, S > 0 ? 4 : 2), out, slots);
            } else {
              const ConstBytes in[1] = {cbytes(hidden, n)};
              stages_.run(mlp(rows)[static_cast<std::size_t>(layer)], in,
                          std::span<const MutBytes>(out, 1));
            }
          } catch (const Error& e) {
            mine = e;
          }
        }
        // After the values, a slot per rank: 1 where that rank failed (its values 0).
        std::fill(partial_.begin() + static_cast<std::ptrdiff_t>(mine ? 0 : flags_at),
                  partial_.end(), 0.0f);
        if (mine)
          partial_[flags_at + static_cast<std::size_t>(link_.rank())] = 1.0f;
        const auto t0 = clock::now();
        link_.all_reduce_sum(partial_);
        stats_.reduce_seconds += since(t0);
        stats_.all_reduces += 1;
        stats_.reduced_bytes += static_cast<std::int64_t>(partial_.size() * sizeof(float));
        for (int r = 0; r < link_.ranks(); ++r)
          if (partial_[flags_at + static_cast<std::size_t>(r)] != 0.0f)
            failed.push_back(r);
        if (failed.empty())
          for (std::int64_t i = 0; i < n; ++i)
            hidden[i] += partial_[static_cast<std::size_t>(i)];
      }
    }
    stats_.calls += 1;
    stats_.seconds += since(t_call);
    return failed;
  }

  /// This rank's logits [batch, its slice of the vocabulary] of `hidden` [batch, hidden].
  void head(std::int64_t batch, const float* hidden, std::vector<float>& logits) {
    const auto t0 = clock::now();
    auto [it, fresh] = head_.try_emplace(batch);
    if (fresh) {
      try {
        it->second = stages_.resolve(frontend::StageNames::tp_head(link_.rank(), batch));
      } catch (...) {
        head_.erase(it);
        throw;
      }
    }
    logits.resize(static_cast<std::size_t>(batch * slice(link_.rank())));
    const ConstBytes in[1] = {cbytes(hidden, batch * hidden_)};
    const MutBytes out[1] = {mbytes(logits.data(), static_cast<std::int64_t>(logits.size()))};
    stages_.run(it->second, in, out);
    stats_.head_calls += 1;
    stats_.seconds += since(t0);
  }

  /// Tokens of rank `r`'s slice of the vocabulary, and where it starts.
  std::int64_t slice(int r) const {
    return vocab_rows_[static_cast<std::size_t>(r) + 1] - vocab_rows_[static_cast<std::size_t>(r)];
  }
  std::int64_t slice_start(int r) const { return vocab_rows_[static_cast<std::size_t>(r)]; }
  std::int64_t vocab() const { return vocab_rows_.back(); }

  TensorParallelStats stats_;

private:
  /// Rank `rank()`'s attention halves of every layer for a call shape (resolved on first use:
  /// a token's call builds no names and looks nothing up by name).
  const std::vector<StageHandle>& attention(BlockKind kind, std::int64_t variant,
                                            std::int64_t rows) {
    const std::int64_t batch = kind == BlockKind::decode_batch ? rows : 0;
    auto [it, fresh] = attention_.try_emplace({static_cast<std::uint32_t>(kind), variant, batch});
    if (fresh) {
      try {
        for (std::int64_t layer = 0; layer < layers_; ++layer)
          it->second.push_back(stages_.resolve(frontend::StageNames::tp_attention(
              link_.rank(), hop::block_function(kind, layer, variant, rows, params_))));
      } catch (...) {
        attention_.erase(it);
        throw;
      }
    }
    return it->second;
  }

  /// This rank's MLP halves of every layer for `rows` rows.
  const std::vector<StageHandle>& mlp(std::int64_t rows) {
    auto [it, fresh] = mlp_.try_emplace(rows);
    if (fresh) {
      try {
        for (std::int64_t layer = 0; layer < layers_; ++layer)
          it->second.push_back(
              stages_.resolve(frontend::StageNames::tp_mlp(link_.rank(), layer, rows)));
      } catch (...) {
        mlp_.erase(it);
        throw;
      }
    }
    return it->second;
  }

  PipelineLink& link_;
  Stages& stages_;
  std::int64_t layers_, hidden_;
  frontend::StageParams params_;
  std::vector<float> partial_; ///< [rows * hidden] values, then a failure slot per rank
  std::map<std::tuple<std::uint32_t, std::int64_t, std::int64_t>, std::vector<StageHandle>>
      attention_;
  std::map<std::int64_t, std::vector<StageHandle>> mlp_;
  std::vector<std::int64_t> vocab_rows_;     ///< frontend::tp_vocab_rows
  std::map<std::int64_t, StageHandle> head_; ///< this rank's lm_head slices by batch
};

namespace {

/// A rank's reply to a head call: its logits [batch, slice] after the header.
std::size_t head_reply(std::vector<std::byte>& msg, std::int64_t batch,
                       const std::vector<float>& logits) {
  hop::Header h;
  h.kind = hop::kHead;
  h.rows = batch;
  msg.resize(std::max(msg.size(), sizeof h + logits.size() * sizeof(float)));
  std::memcpy(msg.data(), &h, sizeof h);
  std::memcpy(msg.data() + sizeof h, logits.data(), logits.size() * sizeof(float));
  return sizeof h + logits.size() * sizeof(float);
}

} // namespace

TensorParallelLayers::TensorParallelLayers(PipelineLink& link, Stages& stages, SessionDims dims,
                                           frontend::StageParams params)
    : link_(link), hidden_(dims.hidden), max_rows_(pipeline_max_rows(params)) {
  check(link_.rank() == 0, ErrorKind::invalid_input, "tensor parallel",
        "the Session's side runs on rank 0, not on rank ", link_.rank());
  worker_ = std::make_unique<TensorParallelWorker>(link, stages, dims, std::move(params));
  buffer_.resize(hop::buffer_bytes(max_rows_, hidden_));
  const std::int64_t most = std::min(max_rows_, frontend::StageParams::kMaxDecodeBatch);
  for (std::int64_t b = 1; b <= most; ++b)
    if (stages.has_function(frontend::StageNames::tp_head(0, b)))
      head_batches_.push_back(b);
  check(!head_batches_.empty(), ErrorKind::invalid_input, "tensor parallel",
        "the bundle has no lm_head slices (tp0_lm_head): recompile it with --tensor-parallel");
}

void TensorParallelLayers::head(std::span<const float> hidden, std::span<float> logits) {
  check(!stopped_, ErrorKind::internal, "tensor parallel", "a call after stop");
  const auto H = static_cast<std::size_t>(hidden_);
  const std::int64_t V = worker_->vocab(), n = static_cast<std::int64_t>(hidden.size() / H);
  check(n >= 1 && hidden.size() == static_cast<std::size_t>(n) * H &&
            logits.size() == static_cast<std::size_t>(n * V),
        ErrorKind::internal, "tensor parallel", "a head call of ", hidden.size(),
        " hidden values into ", logits.size(), " logits");
  for (std::int64_t at = 0; at < n; at += head_batches_.back()) {
    const std::int64_t m = std::min(head_batches_.back(), n - at);
    const std::int64_t B = *std::lower_bound(head_batches_.begin(), head_batches_.end(), m);
    rows_.resize(static_cast<std::size_t>(B) * H);
    for (std::int64_t r = 0; r < B; ++r) // padding rows repeat the last one
      std::copy_n(hidden.data() + (at + std::min(r, m - 1)) * hidden_, H,
                  rows_.data() + r * hidden_);
    hop::Header h;
    h.kind = hop::kHead;
    h.rows = B;
    h.variant = m;
    std::memcpy(buffer_.data(), &h, sizeof h);
    std::memcpy(buffer_.data() + sizeof h, rows_.data(), rows_.size() * sizeof(float));
    const std::size_t bytes = sizeof h + rows_.size() * sizeof(float);
    for (int r = 1; r < link_.ranks(); ++r)
      link_.send(r, std::span<const std::byte>(buffer_.data(), bytes));
    worker_->stats_.bytes_sent += static_cast<std::int64_t>(bytes) * (link_.ranks() - 1);
    // Every rank's slice, rank 0's first; an error is thrown once every reply is in.
    std::optional<Error> failed;
    for (int r = 0; r < link_.ranks(); ++r) {
      const std::int64_t width = worker_->slice(r), v0 = worker_->slice_start(r);
      const float* got = nullptr;
      try {
        if (r == 0) {
          worker_->head(B, rows_.data(), mine_);
          got = mine_.data();
        } else {
          const std::size_t want = sizeof h + static_cast<std::size_t>(B * width) * sizeof(float);
          if (reply_.size() < std::max(want, sizeof h + hop::kMaxErrorText))
            reply_.resize(std::max(want, sizeof h + hop::kMaxErrorText)); // once: no fill a token
          const std::size_t size = link_.recv(r, reply_);
          const hop::Header e = hop::read_header(reply_, size, r);
          if (e.kind == hop::kError)
            throw hop::error_of(e, reply_, size, "tensor parallel");
          check(e.kind == hop::kHead && e.rows == B && size == want, ErrorKind::io,
                "tensor parallel", "rank ", r, " answered a head call of ", B, " rows with ", size,
                " bytes");
          got = reinterpret_cast<const float*>(reply_.data() + sizeof e);
        }
      } catch (const Error& e) {
        if (!failed)
          failed = r == 0 ? Error(e.kind(), "tensor parallel rank 0", e.what()) : e;
        continue;
      }
      for (std::int64_t i = 0; i < m; ++i)
        std::copy_n(got + i * width, width, logits.data() + (at + i) * V + v0);
    }
    if (failed)
      throw *failed;
  }
}

TensorParallelLayers::~TensorParallelLayers() {
  try {
    stop();
  } catch (...) { // a link that failed already: the other ranks learn it from the transport
  }
}

const TensorParallelStats& TensorParallelLayers::stats() const {
  return worker_->stats_;
}

void TensorParallelLayers::stop() {
  if (stopped_)
    return;
  stopped_ = true;
  hop::Header h;
  h.kind = hop::kStop;
  for (int r = 1; r < link_.ranks(); ++r)
    link_.send(r, std::as_bytes(std::span<const hop::Header>(&h, 1)));
}

void TensorParallelLayers::submit(const BlockCall& call, std::span<const float> hidden,
                                  std::span<const std::int32_t> positions,
                                  std::span<const std::int32_t> slots) {
  check(!stopped_, ErrorKind::internal, "tensor parallel", "a call after stop");
  hop::check_call(call, hidden, positions, slots, max_rows_, hidden_, "tensor parallel");
  const std::size_t n = hop::write_call(buffer_, call, hidden, positions, slots);
  for (int r = 1; r < link_.ranks(); ++r)
    link_.send(r, std::span<const std::byte>(buffer_.data(), n)); // the link copies
  worker_->stats_.bytes_sent += static_cast<std::int64_t>(n) * (link_.ranks() - 1);
  std::vector<float> out; // a collected call's buffer when there is one: no allocation a token
  if (!spare_.empty()) {
    out = std::move(spare_.back());
    spare_.pop_back();
  }
  out.assign(hidden.begin(), hidden.end());
  // One slot for a conversation's call, one per row for a batched step.
  const auto* slot = reinterpret_cast<const std::int32_t*>(buffer_.data() + n) - call.rows;
  const std::span<const std::int32_t> call_slots(
      slot, static_cast<std::size_t>(call.kind == BlockKind::decode_batch ? call.rows : 1));
  std::optional<Error> mine;
  const std::vector<int> failed = worker_->run(call.kind, call.variant, call.rows, out.data(),
                                               positions.data(), call_slots, mine);
  if (!failed.empty()) {
    spare_.push_back(std::move(out));
    // Every failed rank r > 0 sends its error, and each is taken; the lowest rank's is thrown.
    std::optional<Error> first;
    if (mine)
      first = Error(mine->kind(), "tensor parallel rank 0", mine->what());
    for (const int r : failed) {
      if (r == 0)
        continue;
      const std::size_t got = link_.recv(r, buffer_);
      const hop::Header e = hop::read_header(buffer_, got, r);
      check(e.kind == hop::kError, ErrorKind::io, "tensor parallel", "rank ", r,
            " failed and sent no error");
      if (!first)
        first = hop::error_of(e, buffer_, got, "tensor parallel");
    }
    throw *first; // a failed rank's, rank 0's or another's
  }
  done_.push_back(std::move(out));
}

void TensorParallelLayers::collect(std::span<float> hidden) {
  check(!done_.empty(), ErrorKind::internal, "tensor parallel", "collect with no call in flight");
  check(hidden.size() == done_.front().size(), ErrorKind::internal, "tensor parallel",
        "collecting a call of ", done_.front().size(), " values into ", hidden.size());
  std::copy(done_.front().begin(), done_.front().end(), hidden.begin());
  spare_.push_back(std::move(done_.front()));
  done_.pop_front();
}

TensorParallelStats serve_tensor_rank(PipelineLink& link, Stages& stages, SessionDims dims,
                                      const frontend::StageParams& params) {
  const auto t_start = clock::now();
  const int rank = link.rank();
  check(rank > 0 && rank < link.ranks(), ErrorKind::invalid_input, "tensor parallel",
        "a serving rank is one of 1..", link.ranks() - 1, ", not ", rank);
  TensorParallelWorker worker(link, stages, dims, params);
  const std::int64_t max_rows = pipeline_max_rows(params), hidden = dims.hidden;
  std::vector<std::byte> msg(hop::buffer_bytes(max_rows, hidden)), reply;
  std::vector<float> state(static_cast<std::size_t>(max_rows * hidden)), logits;
  while (true) {
    const std::size_t got = link.recv(0, msg);
    const hop::Header h = hop::read_header(msg, got, 0);
    if (h.kind == hop::kStop)
      break;
    if (h.kind == hop::kHead) { // this rank's slice of the logits, to rank 0
      check(h.rows > 0 && h.rows <= max_rows &&
                got == sizeof h + static_cast<std::size_t>(h.rows * hidden) * sizeof(float),
            ErrorKind::io, "tensor parallel", "a head call of ", h.rows, " rows in ", got,
            " bytes from rank 0");
      std::memcpy(state.data(), msg.data() + sizeof h,
                  static_cast<std::size_t>(h.rows * hidden) * sizeof(float));
      std::size_t size = 0;
      try {
        worker.head(h.rows, state.data(), logits);
        size = head_reply(reply, h.rows, logits);
      } catch (const Error& e) {
        reply.resize(std::max(reply.size(), sizeof h + hop::kMaxErrorText));
        size = hop::write_error(reply, rank, e);
      }
      link.send(0, std::span<const std::byte>(reply.data(), size));
      continue;
    }
    check(hop::is_call(h.kind) && h.rows > 0 && h.rows <= max_rows &&
              got == sizeof h + hop::payload_bytes(h.rows, hidden),
          ErrorKind::io, "tensor parallel", "a message of kind ", h.kind, " with ", h.rows,
          " rows in ", got, " bytes from rank 0");
    const auto kind = static_cast<BlockKind>(h.kind);
    const auto n = static_cast<std::size_t>(h.rows * hidden);
    std::memcpy(state.data(), msg.data() + sizeof h, n * sizeof(float));
    const auto* pos = reinterpret_cast<const std::int32_t*>(msg.data() + sizeof h) +
                      static_cast<std::ptrdiff_t>(n);
    const std::span<const std::int32_t> slots(
        pos + h.rows, static_cast<std::size_t>(kind == BlockKind::decode_batch ? h.rows : 1));
    std::optional<Error> mine;
    (void)worker.run(kind, h.variant, h.rows, state.data(), pos, slots, mine);
    if (mine)
      link.send(0, std::span<const std::byte>(msg.data(), hop::write_error(msg, rank, *mine)));
  }
  TensorParallelStats st = worker.stats_;
  st.total_seconds = since(t_start);
  return st;
}

} // namespace tpullm::runtime
