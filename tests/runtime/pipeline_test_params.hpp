#pragma once
/// The stage shapes the pipeline tests compile their checkpoints with, in-process
/// (test_layer_pipeline.cpp, threads as ranks) and between MPI processes
/// (tests/mpi/pipeline_exactness.cpp): two prompt segments fit, one through the 8-row prefill
/// variant, and verify rows go through the batched lm_head of 4.

#include "tpullm/frontend/stage_params.hpp"

namespace tpullm_test {

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
