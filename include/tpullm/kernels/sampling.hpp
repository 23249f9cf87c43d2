#pragma once
/// Token selection over one logits row [V]: argmax (first max on ties), top-k, and the uniform
/// draw the runtime's sampler uses (u = (rng() >> 11) * 2^-53 from a std::mt19937_64's raw
/// output, identical across standard libraries). The sampler itself (HF's processors in HF's
/// order) is runtime::Sampler (runtime/sampler.hpp). NaN logits are never selected by argmax
/// (comparisons with NaN are false).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

namespace detail {

inline std::int64_t argmax_portable(const float* x, std::int64_t n) {
  std::int64_t best = 0;
  float bv = x[0];
  for (std::int64_t i = 1; i < n; ++i)
    if (x[i] > bv || (bv != bv && x[i] == x[i])) {
      bv = x[i];
      best = i;
    }
  return best;
}

#if TPULLM_X86
TPULLM_AVX512_BEGIN
TPULLM_TARGET_AVX512 inline std::int64_t argmax_avx512(const float* x, std::int64_t n) {
  if (n < 64 || n > std::numeric_limits<std::int32_t>::max())
    return argmax_portable(x, n);
  // per-lane running max and the (first) index where it was seen; strict > keeps the first
  __m512 bv = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512i bi = _mm512_set1_epi32(-1);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __mmask16 gt = _mm512_cmp_ps_mask(v, bv, _CMP_GT_OQ);
    bv = _mm512_mask_blend_ps(gt, bv, v);
    bi = _mm512_mask_blend_epi32(gt, bi, idx);
    idx = _mm512_add_epi32(idx, step);
  }
  alignas(64) float vals[16];
  alignas(64) std::int32_t ids[16];
  _mm512_store_ps(vals, bv);
  _mm512_store_epi32(ids, bi);
  std::int64_t best = -1;
  float bestv = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < 16; ++l)
    if (ids[l] >= 0 && (best < 0 || vals[l] > bestv || (vals[l] == bestv && ids[l] < best))) {
      bestv = vals[l];
      best = ids[l];
    }
  for (; i < n; ++i)
    if (x[i] > bestv) {
      bestv = x[i];
      best = i;
    }
  // nothing above -inf (all -inf or NaN): the portable scan gives the same answer as always
  return best < 0 ? argmax_portable(x, n) : best;
}
TPULLM_AVX512_END
#endif

inline void require_nonempty(std::span<const float> x, const char* what) {
  if (x.empty())
    throw_error(ErrorKind::internal, "", std::string(what) + ": empty logits row");
}

} // namespace detail

/// Index of the largest logit (first one on ties). logits: [V], V >= 1.
inline std::int64_t argmax(std::span<const float> logits) {
  detail::require_nonempty(logits, "argmax");
  const auto n = static_cast<std::int64_t>(logits.size());
  switch (active_isa()) {
#if TPULLM_X86
  case Isa::amx:
  case Isa::avx512:
    return detail::argmax_avx512(logits.data(), n);
#else
  case Isa::amx:
  case Isa::avx512:
#endif
  case Isa::avx2:
  case Isa::portable:
    return detail::argmax_portable(logits.data(), n);
  }
  return 0;
}

/// The k largest logits, sorted descending (ties by ascending index).
struct TopK {
  std::vector<float> values;         ///< [k]
  std::vector<std::int32_t> indices; ///< [k]
};

/// Top-k of logits: [V]; 1 <= k <= V. Returns values and indices sorted descending.
inline TopK top_k(std::span<const float> logits, std::int64_t k) {
  detail::require_nonempty(logits, "top_k");
  const auto n = static_cast<std::int64_t>(logits.size());
  if (k < 1 || k > n)
    throw_error(ErrorKind::internal, "",
                "top_k: k = " + std::to_string(k) + " outside [1, V=" + std::to_string(n) + "]");
  auto better = [&](std::int32_t a, std::int32_t b) {
    const float va = logits[static_cast<std::size_t>(a)], vb = logits[static_cast<std::size_t>(b)];
    return va > vb || (va == vb && a < b);
  };
  // bounded min-heap of the best k seen so far: O(V log k), no V-sized scratch
  std::vector<std::int32_t> heap;
  heap.reserve(static_cast<std::size_t>(k));
  for (std::int32_t i = 0; i < n; ++i) {
    if (static_cast<std::int64_t>(heap.size()) < k) {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(i, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = i;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  TopK r;
  r.indices = std::move(heap);
  r.values.reserve(r.indices.size());
  for (std::int32_t i : r.indices)
    r.values.push_back(logits[static_cast<std::size_t>(i)]);
  return r;
}

/// Uniform double in [0, 1) from the raw generator output (library independent).
inline double uniform_01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

} // namespace tpullm::kernels
