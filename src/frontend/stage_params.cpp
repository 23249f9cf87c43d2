// Out-of-line definitions of tpullm/frontend/stage_params.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/stage_params.hpp"

namespace tpullm::frontend {

auto StageParams::decode_batch_sizes() const -> std::vector<std::int64_t> {
  std::vector<std::int64_t> out;
  for (auto b : decode_batches)
    if (b > 1)
      out.push_back(b);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

auto StageParams::prefill_lengths() const -> std::vector<std::int64_t> {
  std::vector<std::int64_t> out{max_input_length};
  std::vector<std::int64_t> c = prefill_chunks;
  c.insert(c.end(), verify_lengths.begin(), verify_lengths.end());
  if (prefill_auto)
    c.insert(c.end(), std::begin(kAutoPrefillChunks), std::end(kAutoPrefillChunks));
  std::sort(c.begin(), c.end(), std::greater<>());
  for (auto n : c)
    if (n > 0 && n < out.back())
      out.push_back(n);
  return out;
}

auto StageParams::prefill_length_for(std::int64_t n) const -> std::int64_t {
  std::int64_t best = max_input_length;
  for (auto p : prefill_lengths())
    if (p >= n && p < best)
      best = p;
  return best;
}

auto StageParams::decode_lengths() const -> std::vector<std::int64_t> {
  std::vector<std::int64_t> out{seq_length};
  if (!decode_chunks.empty()) {
    std::vector<std::int64_t> c = decode_chunks;
    std::sort(c.begin(), c.end(), std::greater<>());
    for (auto n : c)
      if (n < out.back())
        out.push_back(n);
    return out;
  }
  if (decode_chunk > 0)
    for (std::int64_t n = seq_length / 2; n >= decode_chunk && n * 2 == out.back(); n /= 2)
      out.push_back(n);
  return out;
}

auto StageParams::validate(std::int64_t max_position) const -> void {
  check(seq_length > 0, ErrorKind::invalid_input, "seq_length", "must be > 0, got ", seq_length);
  check(max_input_length > 0 && max_input_length <= seq_length, ErrorKind::invalid_input,
        "max_input_length", "must be in [1, seq_length = ", seq_length, "], got ",
        max_input_length);
  check(max_position <= 0 || seq_length <= max_position, ErrorKind::invalid_input, "seq_length",
        seq_length, " exceeds the model's max_position_embeddings ", max_position);
  check(!decode_chunks.empty() || (decode_chunk >= 0 && decode_chunk <= seq_length),
        ErrorKind::invalid_input, "decode_chunk", "must be in [0, seq_length = ", seq_length,
        "], got ", decode_chunk);
  for (auto n : decode_chunks)
    check(n > 0 && n <= seq_length, ErrorKind::invalid_input, "decode_chunks",
          "every decode variant must be in [1, seq_length = ", seq_length, "], got ", n);
  for (auto n : prefill_chunks)
    check(n > 0 && n <= max_input_length, ErrorKind::invalid_input, "prefill_chunks",
          "every prefill variant must be in [1, max_input_length = ", max_input_length, "], got ",
          n);
  for (auto n : verify_lengths)
    check(n >= 2 && n <= std::min(kMaxVerifyLength, max_input_length), ErrorKind::invalid_input,
          "verify_lengths",
          "every verify segment (the last token and k >= 1 drafts) must be in [2, ",
          std::min(kMaxVerifyLength, max_input_length), "] (at most ", kMaxVerifyLength,
          " and max_input_length = ", max_input_length, "), got ", n);
  check(verify_lengths.empty() || with_history, ErrorKind::invalid_input, "verify_lengths",
        "a verify segment runs through prefill_kv, which a bundle without history (--no-history) "
        "does not have; drop one of the two");
  for (auto b : decode_batches)
    check(b >= 1 && b <= kMaxDecodeBatch, ErrorKind::invalid_input, "decode_batches",
          "every decode batch must be in [1, ", kMaxDecodeBatch, "], got ", b);
  check(!with_history || max_input_length < seq_length, ErrorKind::invalid_input,
        "max_input_length", "prefill_kv needs history room: max_input_length (", max_input_length,
        ") must be < seq_length (", seq_length, ")");
}

} // namespace tpullm::frontend
