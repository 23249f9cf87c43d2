#pragma once
/// The stage shapes the pipeline tests compile their checkpoints with, in-process
/// (test_layer_pipeline.cpp, threads as ranks) and between MPI processes
/// (tests/mpi/pipeline_exactness.cpp, tensor_exactness.cpp), and the helpers they share: two
/// prompt segments fit, one through the 8-row prefill
/// variant, and verify rows go through the batched lm_head of 4.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tpullm/frontend/stage_params.hpp"

namespace tpullm_test {

/// `n` token ids from `seed` in [3, vocab): the prompts these tests share.
inline std::vector<std::int32_t> test_ids(std::int32_t n, std::int32_t seed, std::int64_t vocab) {
  std::vector<std::int32_t> v;
  for (std::int32_t i = 0; i < n; ++i)
    v.push_back(static_cast<std::int32_t>((seed * 37 + i * 101) % (vocab - 3) + 3));
  return v;
}

/// Largest |a - b| over max|b| (0 when identical, infinity for another size).
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return INFINITY;
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

/// seq_length 64, max_input_length 16, decode variant 32, prefill variant 8, batch 4.
inline tpullm::frontend::StageParams pipeline_test_params() {
  tpullm::frontend::StageParams p;
  p.seq_length = 64;
  p.max_input_length = 16;
  p.decode_chunks = {32};
  p.prefill_chunks = {8};
  p.decode_batches = {4};
  return p;
}

} // namespace tpullm_test
