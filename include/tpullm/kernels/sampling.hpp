#pragma once
/// Token selection over one logits row [V]: argmax (first max on ties), top-k, and the sampling
/// primitives with HF semantics, applied in HF's order by `sample`:
///   repetition penalty -> (greedy if temperature == 0) -> temperature -> top-k -> top-p -> draw.
/// Filters write -inf into removed logits. The draw takes an explicit std::mt19937_64 and uses
/// its raw 64-bit output (u = (rng() >> 11) * 2^-53), so results are identical across standard
/// libraries. NaN logits are never selected by argmax (comparisons with NaN are false).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"

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
    throw std::invalid_argument(std::string(what) + ": empty logits row");
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
    throw std::invalid_argument("top_k: k = " + std::to_string(k) +
                                " outside [1, V=" + std::to_string(n) + "]");
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

/// HF repetition penalty, in place: for each distinct token in `previous`, a positive logit is
/// divided by `penalty`, a negative one multiplied. logits: [V]; penalty > 0. Throws
/// std::out_of_range for a token outside [0, V).
inline void apply_repetition_penalty(std::span<float> logits,
                                     std::span<const std::int32_t> previous, float penalty) {
  if (!(penalty > 0.f))
    throw std::invalid_argument("repetition penalty " + std::to_string(penalty) + " must be > 0");
  std::vector<std::int32_t> toks(previous.begin(), previous.end());
  std::sort(toks.begin(), toks.end());
  toks.erase(std::unique(toks.begin(), toks.end()), toks.end());
  for (std::int32_t t : toks) {
    if (t < 0 || static_cast<std::size_t>(t) >= logits.size())
      throw std::out_of_range("repetition penalty: token " + std::to_string(t) +
                              " outside [0, V=" + std::to_string(logits.size()) + ")");
    float& v = logits[static_cast<std::size_t>(t)];
    v = v < 0.f ? v * penalty : v / penalty;
  }
}

/// logits /= temperature, in place; temperature > 0.
inline void apply_temperature(std::span<float> logits, float temperature) {
  if (!(temperature > 0.f))
    throw std::invalid_argument("temperature " + std::to_string(temperature) +
                                " must be > 0 (use greedy for 0)");
  const float inv = 1.0f / temperature;
  for (float& v : logits)
    v *= inv;
}

/// HF top-k filter, in place: logits strictly below the k-th largest become -inf (ties with the
/// k-th are kept). k <= 0 or k >= V leaves logits unchanged.
inline void top_k_filter(std::span<float> logits, std::int64_t k) {
  if (k <= 0 || k >= static_cast<std::int64_t>(logits.size()))
    return;
  const float kth = top_k(logits, k).values.back();
  for (float& v : logits)
    if (v < kth)
      v = -std::numeric_limits<float>::infinity();
}

/// HF top-p (nucleus) filter, in place: sort ascending, remove tokens whose cumulative
/// probability is <= 1 - top_p, always keep the most likely one. top_p >= 1 is a no-op;
/// top_p must be > 0.
inline void top_p_filter(std::span<float> logits, float top_p) {
  if (!(top_p > 0.f))
    throw std::invalid_argument("top_p " + std::to_string(top_p) + " must be > 0");
  if (top_p >= 1.f || logits.empty())
    return;
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<std::int32_t> cand;
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (logits[i] != ninf)
      cand.push_back(static_cast<std::int32_t>(i));
  if (cand.empty())
    return;
  std::stable_sort(cand.begin(), cand.end(), [&](std::int32_t a, std::int32_t b) {
    return logits[static_cast<std::size_t>(a)] < logits[static_cast<std::size_t>(b)];
  });
  const double mx = logits[static_cast<std::size_t>(cand.back())];
  double total = 0;
  for (std::int32_t i : cand)
    total += std::exp(static_cast<double>(logits[static_cast<std::size_t>(i)]) - mx);
  double cum = 0;
  const double cut = 1.0 - static_cast<double>(top_p);
  for (std::size_t j = 0; j + 1 < cand.size(); ++j) { // the last (largest) is always kept
    const auto i = static_cast<std::size_t>(cand[j]);
    cum += std::exp(static_cast<double>(logits[i]) - mx) / total;
    if (cum <= cut)
      logits[i] = ninf;
    else
      break;
  }
}

/// Sampling parameters (HF generation_config names).
struct SamplingParams {
  float temperature = 1.0f;        ///< 0 = greedy (argmax after the repetition penalty)
  std::int64_t top_k = 0;          ///< 0 = disabled
  float top_p = 1.0f;              ///< 1 = disabled
  float repetition_penalty = 1.0f; ///< 1 = disabled
};

/// Uniform double in [0, 1) from the raw generator output (library independent).
inline double uniform_01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

/// Draws one token from softmax(logits) (-inf entries have probability 0). logits: [V].
inline std::int32_t sample_from_logits(std::span<const float> logits, std::mt19937_64& rng) {
  detail::require_nonempty(logits, "sample");
  const double mx = logits[static_cast<std::size_t>(argmax(logits))];
  if (!std::isfinite(mx))
    throw std::invalid_argument("sample: no finite logit to sample from");
  double total = 0;
  for (float v : logits)
    total += std::exp(static_cast<double>(v) - mx);
  const double u = uniform_01(rng) * total;
  double cum = 0;
  std::int32_t last = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double p = std::exp(static_cast<double>(logits[i]) - mx);
    if (p <= 0)
      continue;
    cum += p;
    last = static_cast<std::int32_t>(i);
    if (u < cum)
      return last;
  }
  return last; // rounding: u landed at the very end
}

/// Full HF-order sampling of one token. logits: [V] (not modified); previous: tokens seen so
/// far (for the repetition penalty). Greedy when temperature == 0.
inline std::int32_t sample(std::span<const float> logits, const SamplingParams& p,
                           std::mt19937_64& rng, std::span<const std::int32_t> previous = {}) {
  detail::require_nonempty(logits, "sample");
  if (p.temperature < 0.f)
    throw std::invalid_argument("sample: temperature " + std::to_string(p.temperature) +
                                " must be >= 0");
  std::vector<float> x(logits.begin(), logits.end());
  if (p.repetition_penalty != 1.0f)
    apply_repetition_penalty(x, previous, p.repetition_penalty);
  if (p.temperature == 0.f)
    return static_cast<std::int32_t>(argmax(x));
  if (p.temperature != 1.0f)
    apply_temperature(x, p.temperature);
  top_k_filter(x, p.top_k);
  top_p_filter(x, p.top_p);
  return sample_from_logits(x, rng);
}

} // namespace tpullm::kernels
