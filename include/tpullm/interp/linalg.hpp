#pragma once
/// The interpreter's f64 products on Eigen: `Eigen::Map`s over interpreter tensor storage
/// (row-major, never owning), split over output columns across OpenMP threads. Only the Top
/// interpreter includes this header; nothing here knows the IR.

#include <algorithm>
#include <cstdint>

#include <Eigen/Core>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tpullm::interp::linalg {

/// A dynamic row-major f64 matrix.
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// A read-only row-major view with a row stride (elements between row starts).
using ConstStridedMap = Eigen::Map<const RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;
/// A writable row-major view with a row stride.
using StridedMap = Eigen::Map<RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;

/// OpenMP threads available to one product (1 without OpenMP).
int max_threads();

/// Threads worth using for `macs` multiply-adds over `n` output columns: one below about
/// 2^18 multiply-adds (the fork costs more than it saves), and at least 16 columns per thread.
inline int threads_for(double macs, std::int64_t n) {
  if (macs < static_cast<double>(1 << 18))
    return 1;
  return static_cast<int>(std::clamp<std::int64_t>(n / 16, 1, max_threads()));
}

/// out [M, N] = a [M, K] x b + bias, with b [K, N] or, when `b_transposed`, b [N, K] (the
/// HuggingFace Linear layout, read in place: nothing is transposed); bias [N] or null. All
/// row-major and contiguous; `out` must not alias the inputs. Columns are split into one
/// contiguous block per thread, each an Eigen product (GEMV when M = 1) on its own.
void matmul(const double* a, const double* b, const double* bias, double* out, std::int64_t M,
            std::int64_t K, std::int64_t N, bool b_transposed);

/// scores [L, S] (contiguous) = scale * (q [L, d] x k [S, d]^T); q and k are strided views
/// (row strides q_stride and k_stride) into [.., heads, d] activations.
void scaled_scores(const double* q, std::int64_t q_stride, const double* k, std::int64_t k_stride,
                   double* scores, std::int64_t L, std::int64_t S, std::int64_t d, double scale);

/// out [L, d] (row stride out_stride) = p [L, S] (contiguous) x v [S, d] (row stride v_stride).
inline void weighted_values(const double* p, const double* v, std::int64_t v_stride, double* out,
                            std::int64_t out_stride, std::int64_t L, std::int64_t S,
                            std::int64_t d) {
  StridedMap(out, L, d, Eigen::OuterStride<>(out_stride)).noalias() =
      ConstStridedMap(p, L, S, Eigen::OuterStride<>(S)) *
      ConstStridedMap(v, S, d, Eigen::OuterStride<>(v_stride));
}

} // namespace tpullm::interp::linalg
