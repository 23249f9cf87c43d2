// The token sampler (runtime/sampler.hpp).
#include "tpullm/runtime/sampler.hpp"

#include <algorithm>
#include <bit>
#include <functional>
#include <cmath>
#include <limits>

#include "tpullm/kernels/sampling.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

namespace {

constexpr std::string_view kOptionsWhere = "sampling options";
constexpr std::string_view kSampleWhere = "sampler";
constexpr float kInf = std::numeric_limits<float>::infinity();
/// Candidates sorted first when top-p runs without top-k; doubled until the nucleus is found.
constexpr std::size_t kNucleusChunk = 64;

/// A candidate as one integer whose descending order is the candidates' total order: larger
/// logit first, lower id first on ties. High half: the logit's bits mapped to an unsigned that
/// sorts like the float (-0 taken as +0); low half: UINT32_MAX - id.
using Key = std::uint64_t;

Key key_of(float v, std::int32_t id) {
  std::uint32_t b = std::bit_cast<std::uint32_t>(v + 0.0f);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<Key>(b) << 32) | (0xFFFFFFFFu - static_cast<std::uint32_t>(id));
}

std::int32_t id_of(Key k) {
  return static_cast<std::int32_t>(0xFFFFFFFFu - static_cast<std::uint32_t>(k));
}

/// Throws for a NaN or +inf logit, naming the first one.
void check_logits(std::span<const float> logits) {
  check(!logits.empty(), ErrorKind::invalid_input, kSampleWhere, "empty logits row");
  check(logits.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
        ErrorKind::invalid_input, kSampleWhere, "logits row of ", logits.size(),
        " entries exceeds the int32 token id range");
  bool bad = false; // branch-free so the scan vectorizes; the culprit is found only on failure
  for (float v : logits)
    bad |= !(v < kInf);
  if (!bad) [[likely]]
    return;
  for (std::size_t i = 0; i < logits.size(); ++i)
    check(logits[i] < kInf, ErrorKind::invalid_input, kSampleWhere, "logit of token ", i, " is ",
          std::isnan(logits[i]) ? "NaN" : "+inf", " (logits must be finite or -inf)");
}

} // namespace

void SamplingOptions::validate() const {
  check(std::isfinite(temperature) && temperature >= 0.0f, ErrorKind::invalid_input, kOptionsWhere,
        "temperature ", temperature, " must be finite and >= 0 (0 = greedy)");
  check(top_k >= 0, ErrorKind::invalid_input, kOptionsWhere, "top_k ", top_k,
        " must be >= 0 (0 = off)");
  check(top_p > 0.0f && top_p <= 1.0f, ErrorKind::invalid_input, kOptionsWhere, "top_p ", top_p,
        " must be in (0, 1] (1 = off)");
  check(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f, ErrorKind::invalid_input,
        kOptionsWhere, "repetition_penalty ", repetition_penalty,
        " must be finite and > 0 (1 = off)");
}

Sampler::Sampler(SamplingOptions options) : options_(options) {
  options_.validate();
  rng_.seed(options_.seed);
}

void Sampler::reseed(std::uint64_t seed) {
  options_.seed = seed;
  rng_.seed(seed);
}

std::span<const float> Sampler::penalized(std::span<const float> logits,
                                          std::span<const std::int32_t> context) {
  const auto V = static_cast<std::int64_t>(logits.size());
  for (std::int32_t t : context)
    check(t >= 0 && t < V, ErrorKind::invalid_input, kSampleWhere, "context token id ", t,
          " is outside the vocabulary [0, ", V, ")");
  const float p = options_.repetition_penalty;
  if (p == 1.0f || context.empty())
    return logits;
  penalized_.assign(logits.begin(), logits.end());
  distinct_.assign(context.begin(), context.end()); // each distinct token is penalized once
  std::sort(distinct_.begin(), distinct_.end());
  distinct_.erase(std::unique(distinct_.begin(), distinct_.end()), distinct_.end());
  constexpr float kMax = std::numeric_limits<float>::max();
  for (std::int32_t t : distinct_) {
    float& v = penalized_[static_cast<std::size_t>(t)];
    v = v > 0.0f ? std::min(v / p, kMax) : v * p; // a penalty < 1 must not make +inf
  }
  return penalized_;
}

void Sampler::top_k_keys(std::span<const float> y, std::size_t k) {
  // Bounded min-heap (under std::greater) of the best k keys so far: most tokens are rejected
  // by one float compare with the worst kept logit (ties lose: their ids are larger).
  keys_.clear();
  for (std::size_t i = 0; i < k; ++i)
    keys_.push_back(key_of(y[i], static_cast<std::int32_t>(i)));
  const std::greater<Key> after;
  std::make_heap(keys_.begin(), keys_.end(), after);
  float worst = y[static_cast<std::size_t>(id_of(keys_.front()))];
  for (std::size_t i = k; i < y.size(); ++i) {
    if (!(y[i] > worst))
      continue;
    std::pop_heap(keys_.begin(), keys_.end(), after);
    keys_.back() = key_of(y[i], static_cast<std::int32_t>(i));
    std::push_heap(keys_.begin(), keys_.end(), after);
    worst = y[static_cast<std::size_t>(id_of(keys_.front()))];
  }
  std::sort(keys_.begin(), keys_.end(), after);
}

std::size_t Sampler::nucleus(double target, std::size_t sorted) {
  const std::greater<Key> after;
  const auto at = [&](std::size_t i) { return keys_.begin() + static_cast<std::ptrdiff_t>(i); };
  const auto mass_of = [&](std::size_t lo, std::size_t hi) {
    double m = 0;
    for (std::size_t i = lo; i < hi; ++i)
      m += weight_[static_cast<std::size_t>(id_of(keys_[i]))];
    return m;
  };
  std::size_t lo = 0, hi = keys_.size();
  double before = 0; // mass of keys_[0, lo), always < target
  if (sorted < hi) {
    // Usually the nucleus is small: the best kNucleusChunk in order first.
    const std::size_t c = std::min(hi, kNucleusChunk);
    if (c < hi)
      std::nth_element(at(0), at(c), at(hi), after);
    std::sort(at(0), at(c), after);
    const double m = mass_of(0, c);
    if (m < target) {
      // Bisect the rest by mass: keys_[lo, hi) holds the crossing token, unordered.
      before = m;
      lo = c;
      while (hi - lo > kNucleusChunk) {
        const std::size_t mid = lo + (hi - lo) / 2;
        std::nth_element(at(lo), at(mid), at(hi), after);
        const double half = mass_of(lo, mid);
        if (before + half >= target) {
          hi = mid;
        } else {
          before += half;
          lo = mid;
        }
      }
      std::sort(at(lo), at(hi), after);
    } else {
      hi = c;
    }
  }
  std::size_t j = lo;
  while (j < hi && before < target)
    before += weight_[static_cast<std::size_t>(id_of(keys_[j++]))];
  return j;
}

std::int32_t Sampler::sample(std::span<const float> logits, std::span<const std::int32_t> context) {
  check_logits(logits);
  const std::span<const float> y = penalized(logits, context);
  const std::size_t V = y.size();
  const auto best = static_cast<std::size_t>(kernels::argmax(y)); // first max: ties -> low id
  const float ymax = y[best];
  check(ymax > -kInf, ErrorKind::invalid_input, kSampleWhere,
        "every logit is -inf: no token can be chosen");
  if (options_.greedy())
    return static_cast<std::int32_t>(best);

  // The one softmax pass, unnormalized: w = exp((y - max) / T) (y - max <= 0 first, so a small
  // temperature cannot overflow; -inf gives 0), summed in double. With top-k only over the k
  // survivors (in order in keys_), else densely over the row (vectorized).
  weight_.resize(V);
  // (a subnormal temperature must not make 1/T infinite: 0 * inf would be NaN)
  const float inv_t = std::min(1.0f / options_.temperature, std::numeric_limits<float>::max());
  const auto k = static_cast<std::size_t>(options_.top_k);
  const bool use_k = k > 0 && k < V;
  double total = 0;
  if (use_k) {
    top_k_keys(y, k);
    for (Key c : keys_) {
      const auto i = static_cast<std::size_t>(id_of(c));
      total += weight_[i] = kernels::detail::exp_approx((y[i] - ymax) * inv_t);
    }
  } else {
    float* w = weight_.data();
    const float* yy = y.data();
    for (std::size_t i = 0; i < V; ++i)
      w[i] = kernels::detail::exp_approx((yy[i] - ymax) * inv_t);
    for (std::size_t i = 0; i < V; ++i)
      total += static_cast<double>(w[i]);
  }

  // Top-p: the smallest prefix of the order whose mass reaches top_p * total.
  std::size_t kept = use_k ? keys_.size() : 0;
  bool dense = !use_k;       // draw over the whole row in id order, members only
  bool nucleus_only = false; // with dense: members are the tokens whose key >= least
  Key least = 0;
  if (options_.top_p < 1.0f) {
    if (!use_k) {
      keys_.clear();
      for (std::size_t i = 0; i < V; ++i)
        if (weight_[i] > 0.0f)
          keys_.push_back(key_of(y[i], static_cast<std::int32_t>(i)));
    }
    kept = nucleus(static_cast<double>(options_.top_p) * total, use_k ? keys_.size() : 0);
    // An ordered nucleus is drawn from in order; a large one (the tail of its keys unordered,
    // library-dependent) is drawn from in id order.
    dense = !use_k && kept > kNucleusChunk;
    nucleus_only = true;
    least = keys_[kept - 1]; // the smallest kept key (it lies in a sorted stretch)
  }

  // The draw: u uniform in [0, mass of the kept tokens), walked in a fixed order.
  const double u_01 = kernels::uniform_01(rng_);
  std::int32_t last = static_cast<std::int32_t>(best);
  double cum = 0;
  if (dense) {
    double mass = nucleus_only ? 0.0 : total;
    if (nucleus_only)
      for (std::size_t i = 0; i < V; ++i)
        if (key_of(y[i], static_cast<std::int32_t>(i)) >= least)
          mass += static_cast<double>(weight_[i]);
    const double u = u_01 * mass;
    for (std::size_t i = 0; i < V; ++i) {
      const double w = static_cast<double>(weight_[i]);
      if (w <= 0.0 || (nucleus_only && key_of(y[i], static_cast<std::int32_t>(i)) < least))
        continue;
      cum += w;
      last = static_cast<std::int32_t>(i);
      if (u < cum)
        return last;
    }
    return last; // rounding: u landed at the very end of the mass
  }
  double mass = 0;
  for (std::size_t j = 0; j < kept; ++j)
    mass += static_cast<double>(weight_[static_cast<std::size_t>(id_of(keys_[j]))]);
  const double u = u_01 * mass;
  for (std::size_t j = 0; j < kept; ++j) {
    const std::int32_t id = id_of(keys_[j]);
    const double w = static_cast<double>(weight_[static_cast<std::size_t>(id)]);
    if (w <= 0.0)
      continue;
    cum += w;
    last = id;
    if (u < cum)
      return last;
  }
  return last;
}

} // namespace tpullm::runtime
