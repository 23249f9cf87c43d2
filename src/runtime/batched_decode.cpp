// Out-of-line definitions of tpullm/runtime/batched_decode.hpp (compiled once into tpullm_core).
#include "tpullm/runtime/batched_decode.hpp"

namespace tpullm::runtime {

BatchedDecoder::BatchedDecoder(Executor& exec, SessionDims dims, frontend::StageParams params)
    : exec_(exec), dims_(dims), params_(std::move(params)) {
  batches_.push_back(1);
  const std::int64_t S = params_.seq_length;
  for (std::int64_t b = 2; b <= frontend::StageParams::kMaxDecodeBatch; ++b)
    if (exec_.has_program(frontend::StageNames::block_cache(0, S, b)) &&
        exec_.has_program(frontend::StageNames::lm_head(b)))
      batches_.push_back(b);
}

auto BatchedDecoder::batch_for(std::int64_t n) const -> std::int64_t {
  for (auto b : batches_)
    if (b >= n)
      return b;
  return batches_.back();
}

auto BatchedDecoder::decode(std::span<const DecodeRow> rows) -> std::vector<float> {
  std::vector<float> logits;
  logits.reserve(rows.size() * static_cast<std::size_t>(dims_.vocab));
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      check(rows[i].slot != rows[j].slot, ErrorKind::invalid_input, "batched decode", "rows ", j,
            " and ", i, " both feed KV slot ", rows[i].slot);
  const auto max_b = static_cast<std::size_t>(batches_.back());
  for (std::size_t at = 0; at < rows.size(); at += max_b)
    step(rows.subspan(at, std::min(max_b, rows.size() - at)), logits);
  return logits;
}

auto BatchedDecoder::step(std::span<const DecodeRow> rows, std::vector<float>& logits) -> void {
  const auto n = static_cast<std::int64_t>(rows.size());
  const std::int64_t B = batch_for(n);
  if (B == 1) {
    for (const auto& r : rows) {
      auto l = r.session->decode(r.token);
      logits.insert(logits.end(), l.begin(), l.end());
    }
    return;
  }
  const std::int64_t H = dims_.hidden, V = dims_.vocab;
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
  const std::int64_t S = Session::decode_length_for(params_.decode_lengths(), longest);
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
  const std::span<const std::int32_t> slots(slots_);
  for (std::int64_t layer = 0; layer < dims_.layers; ++layer) {
    const ConstBytes in[4] = {cbytes(hidden_[cur].data(), B * H), cbytes(pos_.data(), B), {}, {}};
    const MutBytes out[3] = {mbytes(hidden_[cur ^ 1].data(), B * H), {}, {}};
    exec_.run(fns[static_cast<std::size_t>(layer)], in, out, slots);
    cur ^= 1;
  }
  head_.resize(static_cast<std::size_t>(B * V));
  const ConstBytes hin[] = {cbytes(hidden_[cur].data(), B * H)};
  const MutBytes hout[] = {mbytes(head_.data(), B * V)};
  exec_.run(fns.back(), hin, hout);
  logits.insert(logits.end(), head_.begin(), head_.begin() + n * V);
  for (const auto& r : rows)
    r.session->extend_one();
}

auto BatchedDecoder::functions(std::int64_t B, std::int64_t S) -> const std::vector<std::int64_t>& {
  auto [it, fresh] = fns_.try_emplace({B, S});
  if (fresh) {
    for (std::int64_t layer = 0; layer < dims_.layers; ++layer)
      it->second.push_back(exec_.program_id(frontend::StageNames::block_cache(layer, S, B)));
    it->second.push_back(exec_.program_id(frontend::StageNames::lm_head(B)));
  }
  return it->second;
}

} // namespace tpullm::runtime
