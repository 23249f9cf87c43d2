#pragma once
/// Helpers shared by the kernel tests (tests/kernels/test_*.cpp): the ISA paths to run, random
/// fills, NaN poisoning, f32 -> storage-type conversion, the relative error against a double
/// reference, and the random packed weights of the linear / MLP tests (defined in
/// test_matmul.cpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "error_kind.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/packed_weights.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm_test {

using tpullm::bf16_t;
using tpullm::f16_t;
using tpullm::kernels::cpu_features;
using tpullm::kernels::Isa;
using tpullm::kernels::vector_isa;

/// ISA paths to run on this machine: the best, portable when it is not the best, and avx2 when
/// the best is avx512 (each path once).
inline std::vector<Isa> isas_to_test() {
  std::vector<Isa> v{cpu_features().best()};
  if (cpu_features().best() != Isa::portable)
    v.push_back(Isa::portable);
  if (vector_isa(cpu_features().best()) == Isa::avx512)
    v.push_back(Isa::avx2);
  return v;
}

/// ISA paths of the linear / MLP tests: the best, portable, and avx2 when the best is avx512
/// (portable runs twice when it is the best, as those tests always did).
inline std::vector<Isa> test_isas() {
  std::vector<Isa> v{cpu_features().best(), Isa::portable};
  if (vector_isa(cpu_features().best()) == Isa::avx512)
    v.push_back(Isa::avx2);
  return v;
}

/// n values drawn from N(0, sd^2) by an mt19937 seeded with `seed`.
inline std::vector<float> normal_vec(std::size_t n, float sd, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sd);
  std::vector<float> v(n);
  for (auto& e : v)
    e = nd(rng);
  return v;
}

/// n values drawn uniformly from [lo, hi) by an mt19937 seeded with `seed`.
inline std::vector<float> random_vec(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                     float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v)
    e = u(rng);
  return v;
}

/// Quiet NaN, the poison of inputs that must not be read and outputs that must be written.
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// n NaNs: an output buffer whose every element the kernel must overwrite.
inline std::vector<float> nan_vec(std::size_t n) {
  return std::vector<float>(n, kNaN);
}

/// x in storage type T (float, bf16_t or f16_t), rounded to nearest even.
template <class T>
T from_f32(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, bf16_t>)
    return bf16_t{tpullm::f32_to_bf16(x)};
  else
    return f16_t{tpullm::f32_to_f16(x)};
}

/// |got - ref| / max(1, |ref|).
inline double rel_err(double got, double ref) {
  return std::abs(got - ref) / std::max(1.0, std::abs(ref));
}

/// A random weight in one format plus what the reference needs.
struct TestWeights {
  tpullm::kernels::PackedWeights packed;
  std::vector<float> deq;  ///< [K, N] dequantized, original row order
  std::vector<float> absw; ///< [K, N] the A[k][n] of the error bound
};

/// Random W: [K, N] in `f` with `group` rows per group (ignored by float formats). When
/// `act_order` is set (int4 only) rows are stored in a random group-sorted permutation.
TestWeights make_weights(tpullm::kernels::WeightFormat f, std::int64_t K, std::int64_t N,
                         std::int64_t group, std::uint32_t seed, bool act_order = false);

/// Relative tolerance of a linear over K inputs (docs/kernels.md).
inline double matmul_tol(std::int64_t K) {
  return 3e-6 * std::sqrt(double(K)) + 1e-6;
}

/// Per-output bound of an AMX linear y = x W without bias (docs/kernels.md), x: [M, K] in the
/// original row order (act-order weights group it in packed order):
///   bf16: (2^-8 + 1.01 tol(K)) sum_k |x_k| |w_kn|
///   int:  sum_k (max|x| of k's group / (127 * 256)) |w_kn| + tol(K) sum_k |x_k| A_kn
inline std::vector<double> amx_linear_bound(const TestWeights& tw, const std::vector<double>& x,
                                            std::int64_t M, std::int64_t K, std::int64_t N) {
  const double tol = matmul_tol(K);
  const bool bf = tw.packed.format == tpullm::kernels::WeightFormat::bf16;
  const std::int64_t gr = tw.packed.group_rows();
  auto orig = [&](std::int64_t j) {
    return tw.packed.k_perm.empty() ? j
                                    : std::int64_t{tw.packed.k_perm[static_cast<std::size_t>(j)]};
  };
  std::vector<double> b(static_cast<std::size_t>(M * N));
  for (std::int64_t m = 0; m < M; ++m) {
    std::vector<double> gmax(static_cast<std::size_t>(K / gr + 2), 0.0);
    for (std::int64_t j = 0; j < K; ++j) {
      auto& g = gmax[static_cast<std::size_t>(j / gr)];
      g = std::max(g, std::abs(x[static_cast<std::size_t>(m * K + orig(j))]));
    }
    for (std::int64_t n = 0; n < N; ++n) {
      double sxw = 0, sxa = 0, sdig = 0;
      for (std::int64_t j = 0; j < K; ++j) {
        const auto k = static_cast<std::size_t>(orig(j));
        const double xv = std::abs(x[static_cast<std::size_t>(m * K) + k]);
        const double wv =
            std::abs(tw.deq[k * static_cast<std::size_t>(N) + static_cast<std::size_t>(n)]);
        sxw += xv * wv;
        sxa += xv * tw.absw[k * static_cast<std::size_t>(N) + static_cast<std::size_t>(n)];
        sdig += 1.5 * gmax[static_cast<std::size_t>(j / gr)] / (127.0 * 65536.0) * wv;
      }
      b[static_cast<std::size_t>(m * N + n)] =
          bf ? (std::ldexp(1.0, -8) + 1.01 * tol) * sxw : sdig + tol * sxa;
    }
  }
  return b;
}

} // namespace tpullm_test
