#pragma once
/// The three-stage generation loop of the paper (section 4.5) over any StageExecutor:
/// prompts go through `embedding` + block_i (first segment) or block_kv_i (later segments,
/// with the cached history) + lm_head; single tokens go through `embedding_cache` + the
/// smallest block_cache_i_S whose S holds the history + lm_head. The KV cache is one
/// [seq_length, kv_heads, head_dim] f32 buffer per layer and stage outputs are written into
/// it at the tokens' slots (slot = position).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/runtime/host_tensor.hpp"

namespace tpullm::runtime {

/// Model dimensions the loop needs.
struct SessionDims {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t vocab = 0;
};

/// One conversation's state: KV cache and its length, over an executor.
class Session {
public:
  Session(StageExecutor& exec, SessionDims dims, frontend::StageParams params)
      : exec_(exec), dims_(dims), params_(std::move(params)) {
    const auto n = static_cast<std::size_t>(params_.seq_length * dims_.kv_heads * dims_.head_dim);
    k_cache_.assign(static_cast<std::size_t>(dims_.layers), std::vector<float>(n, 0.0f));
    v_cache_ = k_cache_;
  }

  /// Tokens held in the KV cache (= position of the next token).
  std::int64_t length() const { return length_; }
  const frontend::StageParams& params() const { return params_; }
  /// Forgets the conversation (the cache contents become don't-care).
  void reset() { length_ = 0; }

  /// Feeds `tokens` at positions length().. in segments of max_input_length (1 prefill or
  /// prefill_kv per segment) and returns the logits [rows, vocab] of every prompt position
  /// when `all_rows`, else of the last one only. A tail too close to the end of the cache for a
  /// padded segment goes through the decode stage token by token. Throws Error(invalid_input)
  /// when the prompt does not fit the compiled sequence length.
  std::vector<float> prefill(const std::vector<std::int32_t>& tokens, bool all_rows,
                             const std::function<void(std::int64_t, std::int64_t)>& progress = {}) {
    const std::int64_t n = static_cast<std::int64_t>(tokens.size());
    check(n > 0, ErrorKind::invalid_input, "prompt", "is empty");
    const std::int64_t L = params_.max_input_length;
    check(length_ + n <= params_.seq_length, ErrorKind::invalid_input, "prompt", "prompt of ", n,
          " tokens after ", length_,
          " cached tokens exceeds the compiled "
          "sequence length ",
          params_.seq_length);
    std::vector<float> logits;
    for (std::int64_t start = 0; start < n; start += L) {
      const std::int64_t valid = std::min(L, n - start);
      const std::int64_t pos0 = length_;
      check(pos0 == 0 || params_.with_history, ErrorKind::unsupported, "prompt",
            "continuing a conversation needs prefill_kv modules (compiled without history)");
      if (pos0 + L > params_.seq_length) {
        // A padded segment would run past the cache: feed the tail token by token through the
        // decode stage instead (same results, no padding).
        for (std::int64_t r = start; r < n; ++r) {
          auto row = decode(tokens[static_cast<std::size_t>(r)]);
          if (all_rows || r == n - 1)
            logits.insert(logits.end(), row.begin(), row.end());
        }
        if (progress)
          progress(n, n);
        break;
      }
      std::vector<std::int32_t> ids(static_cast<std::size_t>(L), 0), pos(ids.size());
      for (std::int64_t r = 0; r < L; ++r) {
        ids[r] = r < valid ? tokens[static_cast<std::size_t>(start + r)] : 0;
        pos[r] = static_cast<std::int32_t>(pos0 + r); // padded rows keep later positions
      }
      HostTensor hidden = embed("embedding", ids, L);
      const HostTensor position = HostTensor::ids({1, L}, pos);
      for (std::int64_t layer = 0; layer < dims_.layers; ++layer) {
        std::vector<HostTensor> in{std::move(hidden), position};
        std::string fn = frontend::StageNames::block(layer);
        if (pos0 > 0) {
          const std::int64_t hist = params_.prefill_kv_history();
          in.push_back(history(k_cache_[layer], hist));
          in.push_back(history(v_cache_[layer], hist));
          fn = frontend::StageNames::block_kv(layer);
        }
        auto out = call(fn, in, 3);
        store_kv(layer, out[1], out[2], pos0, valid);
        hidden = std::move(out[0]);
      }
      length_ += valid;
      for (std::int64_t r = 0; r < valid; ++r)
        if (all_rows || start + r == n - 1)
          append_logits(logits, hidden, r);
      if (progress)
        progress(start + valid, n);
    }
    return logits;
  }

  /// Feeds one token at position length() and returns its logits [vocab].
  std::vector<float> decode(std::int32_t token) {
    const std::int64_t p = length_;
    check(p < params_.seq_length, ErrorKind::invalid_input, "decode", "the KV cache is full (",
          params_.seq_length, " tokens = the compiled sequence length)");
    const std::int64_t S = decode_length_for(p);
    HostTensor hidden = embed("embedding_cache", {token}, 1);
    const HostTensor position = HostTensor::ids({1, 1}, {static_cast<std::int32_t>(p)});
    for (std::int64_t layer = 0; layer < dims_.layers; ++layer) {
      auto out = call(
          frontend::StageNames::block_cache(layer, S),
          {std::move(hidden), position, history(k_cache_[layer], S), history(v_cache_[layer], S)},
          3);
      store_kv(layer, out[1], out[2], p, 1);
      hidden = std::move(out[0]);
    }
    length_ += 1;
    std::vector<float> logits;
    append_logits(logits, hidden, 0);
    return logits;
  }

  /// The decode variant used at position p: the smallest compiled S >= p.
  std::int64_t decode_length_for(std::int64_t p) const {
    std::int64_t best = -1;
    for (auto s : params_.decode_lengths())
      if (s >= p && (best < 0 || s < best))
        best = s;
    check(best >= 0, ErrorKind::invalid_input, "decode", "no decode variant holds ", p,
          " history tokens");
    return best;
  }

private:
  std::vector<HostTensor> call(const std::string& fn, const std::vector<HostTensor>& in,
                               std::size_t n_out) {
    auto out = exec_.run(fn, in);
    check(out.size() == n_out, ErrorKind::internal, fn, "returned ", out.size(),
          " results, expected ", n_out);
    return out;
  }

  HostTensor embed(const std::string& fn, const std::vector<std::int32_t>& ids, std::int64_t L) {
    for (auto id : ids)
      check(id >= 0 && id < dims_.vocab, ErrorKind::invalid_input, "prompt", "token id ", id,
            " is outside the vocabulary [0, ", dims_.vocab, ")");
    return call(fn, {HostTensor::ids({1, L}, ids)}, 1)[0];
  }

  /// The first `slots` rows of a layer cache as a [1, slots, kv_heads, d] input.
  HostTensor history(const std::vector<float>& cache, std::int64_t slots) const {
    HostTensor t{ir::DType::f32, {1, slots, dims_.kv_heads, dims_.head_dim}, {}, {}};
    t.f.assign(cache.begin(), cache.begin() + slots * dims_.kv_heads * dims_.head_dim);
    return t;
  }

  /// Writes rows [0, count) of k/v [1, L, kv_heads, d] to cache slots [slot0, slot0 + count).
  void store_kv(std::int64_t layer, const HostTensor& k, const HostTensor& v, std::int64_t slot0,
                std::int64_t count) {
    const std::int64_t row = dims_.kv_heads * dims_.head_dim;
    check(k.f.size() >= static_cast<std::size_t>(count * row) && k.f.size() == v.f.size(),
          ErrorKind::internal, "store_kv", "k/v outputs are too small");
    check(slot0 + count <= params_.seq_length, ErrorKind::internal, "store_kv",
          "slot out of the cache");
    std::copy_n(k.f.begin(), count * row, k_cache_[layer].begin() + slot0 * row);
    std::copy_n(v.f.begin(), count * row, v_cache_[layer].begin() + slot0 * row);
  }

  /// Runs lm_head on row r of hidden [1, L, H] and appends the logits.
  void append_logits(std::vector<float>& logits, const HostTensor& hidden, std::int64_t r) {
    HostTensor row{ir::DType::f32, {1, 1, dims_.hidden}, {}, {}};
    row.f.assign(hidden.f.begin() + r * dims_.hidden, hidden.f.begin() + (r + 1) * dims_.hidden);
    auto out = call("lm_head", {row}, 1);
    logits.insert(logits.end(), out[0].f.begin(), out[0].f.end());
  }

  StageExecutor& exec_;
  SessionDims dims_;
  frontend::StageParams params_;
  std::vector<std::vector<float>> k_cache_, v_cache_;
  std::int64_t length_ = 0;
};

} // namespace tpullm::runtime
