#pragma once
/// Helpers shared by the tests that compile a small model and run it (tests/backend, runtime,
/// frontend): the stage parameters of those compiles and the logits distance they check.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <span>
#include <vector>

#include "test_data_dir.hpp"
#include "tpullm/frontend/stage_params.hpp"

namespace tpullm_test {

/// Stage parameters of a small compile: `seq_length` positions, prefill calls of
/// `max_input_length` tokens, the explicit decode variants `decode_chunks` (below seq_length)
/// and the batched-decode sizes `decode_batches` (empty: none).
inline tpullm::frontend::StageParams small_params(std::int64_t seq_length,
                                                  std::int64_t max_input_length,
                                                  std::vector<std::int64_t> decode_chunks,
                                                  std::vector<std::int64_t> decode_batches = {}) {
  tpullm::frontend::StageParams p;
  p.seq_length = seq_length;
  p.max_input_length = max_input_length;
  p.decode_chunks = std::move(decode_chunks);
  p.decode_batches = std::move(decode_batches);
  return p;
}

/// tests/data/models/<name>: a shared test checkpoint.
inline std::filesystem::path model_dir(const std::string& name) {
  return std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / name;
}

/// Stage parameters with the halving decode variants: seq_length, seq_length / 2, ... down to
/// `decode_chunk` (0: seq_length only).
inline tpullm::frontend::StageParams
halving_params(std::int64_t seq_length, std::int64_t max_input_length, std::int64_t decode_chunk) {
  tpullm::frontend::StageParams p;
  p.seq_length = seq_length;
  p.max_input_length = max_input_length;
  p.decode_chunk = decode_chunk;
  return p;
}

/// max |a - b| / max |b| over one row of logits (a.size() == b.size(); 0 / 0 gives NaN, which
/// fails every bound).
inline double row_rel_err(std::span<const float> a, std::span<const float> b) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return a.size() == b.size() ? worst / scale : INFINITY;
}

/// `n` token ids below 500 (every test model's vocabulary), a different sequence per `seed`:
/// id i = (i * mul + seed * step + add) % 500.
inline std::vector<std::int32_t> test_ids(std::size_t n, std::size_t seed, std::size_t mul = 37,
                                          std::size_t step = 101, std::size_t add = 5) {
  std::vector<std::int32_t> p(n);
  for (std::size_t i = 0; i < n; ++i)
    p[i] = static_cast<std::int32_t>((i * mul + seed * step + add) % 500);
  return p;
}

} // namespace tpullm_test
