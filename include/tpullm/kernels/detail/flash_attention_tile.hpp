#pragma once
/// Per-q-tile state (FaTile), one key tile (FaKeys) and the thread-local scratch of the
/// attention kernels.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"

namespace tpullm::kernels::detail {

/// Per-q-tile state and scratch (all f32, 64-byte aligned pieces of one thread-local buffer).
struct FaTile {
  std::int64_t br = 0, bc = 0, d = 0;
  std::int64_t nrows = 0;      ///< valid rows in this tile (<= br)
  float* qt = nullptr;         ///< [d, br] Q^T, pre-scaled by scale * log2(e), pad rows 0
  float* o = nullptr;          ///< [br, d] unnormalized output accumulator
  float* s = nullptr;          ///< [bc, br] scores, then probabilities
  float* m = nullptr;          ///< [br] running max (log2 domain)
  float* l = nullptr;          ///< [br] running denominator
  float* alpha = nullptr;      ///< [br] rescale factor of the current key tile
  std::int32_t* pos = nullptr; ///< [br] query positions (INT32_MAX for pad rows)
  std::int32_t* lo = nullptr;  ///< [br] first visible key (sliding window; 0 without one)
  float* kbuf = nullptr;       ///< [bc, d] f32 copy of a 16-bit K tile
  float* vbuf = nullptr;       ///< [bc, d] f32 copy of a 16-bit V tile
};

/// One key tile: keys [j0, j0 + ncols), rows at k/v with `stride` floats between keys.
struct FaKeys {
  const float* k = nullptr;
  const float* v = nullptr;
  std::int64_t stride = 0;
  std::int64_t j0 = 0;
  std::int64_t ncols = 0;
  bool masked = false; ///< some key may be invisible to some row: apply lo[i] <= j <= pos[i]
};

/// Thread-local scratch, grown on demand and reused across calls (no allocation in decode).
inline float* fa_scratch(std::size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats + 16)
    buf.resize(floats + 16);
  auto addr = reinterpret_cast<std::uintptr_t>(buf.data());
  return reinterpret_cast<float*>((addr + 63) & ~std::uintptr_t{63});
}

} // namespace tpullm::kernels::detail
