// Out-of-line definitions of tpullm/runtime/batched_decode.hpp (compiled once into tpullm_core).
#include "tpullm/runtime/batched_decode.hpp"

namespace tpullm::runtime {

BatchedDecoder::BatchedDecoder(Executor& exec, SessionDims dims, frontend::StageParams params)
    : exec_(exec), dims_(dims), params_(std::move(params)) {
  batches_.push_back(1);
  const std::int64_t S = params_.seq_length;
  using N = frontend::StageNames;
  for (std::int64_t b = 2; b <= frontend::StageParams::kMaxDecodeBatch; ++b)
    if ((exec_.has_program(N::block_cache(0, S, b)) ||
         exec_.has_program(N::tp_attention(0, N::block_cache(0, S, b)))) && // tensor parallel
        exec_.has_program(N::lm_head(b)))
      batches_.push_back(b);
}

auto BatchedDecoder::batch_for(std::int64_t n) const -> std::int64_t {
  for (auto b : batches_)
    if (b >= n)
      return b;
  return batches_.back();
}

auto BatchedDecoder::decode(std::span<const DecodeRow> rows) -> std::vector<float> {
  check(begun_.empty(), ErrorKind::internal, "batched decode", "decode() with ", begun_.size(),
        " steps begun");
  std::vector<float> logits;
  logits.reserve(rows.size() * static_cast<std::size_t>(dims_.vocab));
  const auto max_b = static_cast<std::size_t>(batches_.back());
  for (std::size_t at = 0; at < rows.size(); at += max_b) {
    begin(rows.subspan(at, std::min(max_b, rows.size() - at)));
    const auto l = finish();
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

void BatchedDecoder::set_remote_layers(RemoteLayers* remote) {
  check(begun_.empty(), ErrorKind::internal, "batched decode",
        "the remote layers changed with steps begun");
  check(!remote || (remote->local_layers() >= 0 && remote->local_layers() < dims_.layers),
        ErrorKind::invalid_input, "pipeline", "rank 0 must run 0 to ", dims_.layers - 1, " of the ",
        dims_.layers, " layers, not ", remote ? remote->local_layers() : 0);
  remote_ = remote;
  fns_.clear(); // they hold the local layers' functions only
}

auto BatchedDecoder::prepare(std::span<const DecodeRow> rows, std::int64_t B) -> std::int64_t {
  const auto n = static_cast<std::int64_t>(rows.size());
  const std::int64_t V = dims_.vocab;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < i; ++j)
      check(rows[static_cast<std::size_t>(i)].slot != rows[static_cast<std::size_t>(j)].slot,
            ErrorKind::invalid_input, "batched decode", "rows ", j, " and ", i,
            " both feed KV slot ", rows[static_cast<std::size_t>(i)].slot);
  for (const Begun& b : begun_)
    for (const DecodeRow& r : b.rows)
      for (const DecodeRow& x : rows)
        check(r.slot != x.slot, ErrorKind::invalid_input, "batched decode", "KV slot ", x.slot,
              " is in a step begun and not finished");
  ids_.resize(static_cast<std::size_t>(B));
  pos_.resize(static_cast<std::size_t>(B));
  slots_.resize(static_cast<std::size_t>(B));
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    const DecodeRow& r = rows[static_cast<std::size_t>(std::min(b, n - 1))];
    check(r.session != nullptr, ErrorKind::invalid_input, "batched decode", "row ", b,
          " has no session");
    r.session->check_room();
    const std::int64_t p = r.session->length();
    check(r.token >= 0 && r.token < V, ErrorKind::invalid_input, "prompt", "token id ", r.token,
          " is outside the vocabulary [0, ", V, ")");
    check(r.slot >= 0 && r.slot < exec_.kv_geometry().slots, ErrorKind::invalid_input,
          "batched decode", "KV slot ", r.slot, " is outside [0, ", exec_.kv_geometry().slots, ")");
    ids_[static_cast<std::size_t>(b)] = r.token;
    pos_[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(p);
    slots_[static_cast<std::size_t>(b)] = r.slot;
    longest = std::max(longest, p);
  }
  return Session::decode_length_for(params_.decode_lengths(), longest);
}

auto BatchedDecoder::run_layers(std::int64_t B, std::int64_t S, std::int64_t end) -> int {
  const std::int64_t H = dims_.hidden;
  const std::vector<std::int64_t>& fns = functions(B, S);
  hidden_[0].resize(static_cast<std::size_t>(B * H));
  hidden_[1].resize(hidden_[0].size());
  // Embedding: one gather per row, into row b of the batch's hidden states.
  if (embed_id_ < 0)
    embed_id_ = exec_.program_id("embedding_cache");
  for (std::int64_t b = 0; b < B; ++b) {
    const ConstBytes in[] = {cbytes(ids_.data() + b, 1)};
    const MutBytes out[] = {mbytes(hidden_[0].data() + b * H, H)};
    exec_.run(embed_id_, in, out);
  }
  int cur = 0;
  // One slot per row of a batch; the single-row functions take one slot.
  const std::span<const std::int32_t> slots(slots_.data(), static_cast<std::size_t>(B));
  for (std::int64_t layer = 0; layer < end; ++layer) {
    const ConstBytes in[4] = {cbytes(hidden_[cur].data(), B * H), cbytes(pos_.data(), B), {}, {}};
    const MutBytes out[3] = {mbytes(hidden_[cur ^ 1].data(), B * H), {}, {}};
    exec_.run(fns[static_cast<std::size_t>(layer)], in, out, slots);
    cur ^= 1;
  }
  return cur;
}

void BatchedDecoder::begin(std::span<const DecodeRow> rows) {
  const auto n = static_cast<std::int64_t>(rows.size());
  check(n >= 1 && n <= batches_.back(), ErrorKind::internal, "batched decode", "a step of ", n,
        " rows (1 to ", batches_.back(), ")");
  const std::int64_t B = batch_for(n);
  const std::int64_t S = prepare(rows, B);
  Begun step{std::vector<DecodeRow>(rows.begin(), rows.end()), B, S, {}};
  if (remote_) {
    const int cur = run_layers(B, S, remote_->local_layers());
    const std::int64_t H = dims_.hidden;
    const BlockCall call{B == 1 ? BlockKind::decode : BlockKind::decode_batch, B, S, pos_[0],
                         slots_[0]};
    remote_->submit(call,
                    std::span<const float>(hidden_[cur]).first(static_cast<std::size_t>(B * H)),
                    std::span<const std::int32_t>(pos_).first(static_cast<std::size_t>(B)),
                    std::span<const std::int32_t>(slots_).first(static_cast<std::size_t>(B)));
  } else if (B > 1) { // every layer here, now (one row: the session's own decode, at finish())
    step.logits = head(B, S, run_layers(B, S, dims_.layers), n);
  }
  begun_.push_back(std::move(step));
}

auto BatchedDecoder::head(std::int64_t B, std::int64_t S, int cur, std::int64_t n)
    -> std::vector<float> {
  const std::int64_t H = dims_.hidden, V = dims_.vocab;
  if (remote_ && remote_->runs_head()) { // tensor parallel: the n rows, every rank its slice
    head_.resize(static_cast<std::size_t>(n * V));
    remote_->head(std::span<const float>(hidden_[cur]).first(static_cast<std::size_t>(n * H)),
                  head_);
    return head_;
  }
  head_.resize(static_cast<std::size_t>(B * V));
  const ConstBytes hin[] = {cbytes(hidden_[cur].data(), B * H)};
  const MutBytes hout[] = {mbytes(head_.data(), B * V)};
  exec_.run(functions(B, S).back(), hin, hout);
  return std::vector<float>(head_.begin(), head_.begin() + n * V);
}

auto BatchedDecoder::finish() -> std::vector<float> {
  check(!begun_.empty(), ErrorKind::internal, "batched decode", "finish() with no step begun");
  Begun step = std::move(begun_.front());
  begun_.pop_front();
  const auto n = static_cast<std::int64_t>(step.rows.size());
  if (!remote_ && step.B == 1) // one row: the conversation's own decode stage
    return step.rows[0].session->decode(step.rows[0].token);
  if (remote_) {
    const auto size = static_cast<std::size_t>(step.B * dims_.hidden);
    hidden_[0].resize(size);
    remote_->collect(std::span<float>(hidden_[0]).first(size));
    step.logits = head(step.B, step.S, 0, n);
  }
  for (const auto& r : step.rows)
    r.session->extend_one();
  return std::move(step.logits);
}

auto BatchedDecoder::functions(std::int64_t B, std::int64_t S) -> const std::vector<std::int64_t>& {
  auto [it, fresh] = fns_.try_emplace({B, S});
  if (fresh) {
    const std::int64_t local = remote_ ? remote_->local_layers() : dims_.layers;
    for (std::int64_t layer = 0; layer < local; ++layer)
      it->second.push_back(exec_.program_id(frontend::StageNames::block_cache(layer, S, B)));
    it->second.push_back(exec_.program_id(frontend::StageNames::lm_head(B)));
  }
  return it->second;
}

} // namespace tpullm::runtime
