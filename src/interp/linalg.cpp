// Out-of-line definitions of tpullm/interp/linalg.hpp (compiled once into tpullm_core).
#include "tpullm/interp/linalg.hpp"

namespace tpullm::interp::linalg {

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void matmul(const double* a, const double* b, const double* bias, double* out, std::int64_t M,
            std::int64_t K, std::int64_t N, bool b_transposed) {
  if (M == 0 || N == 0)
    return;
  const int threads =
      threads_for(static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K), N);
  const auto block = [&](std::int64_t n0, std::int64_t n1) {
    const std::int64_t w = n1 - n0;
    StridedMap o(out + n0, M, w, Eigen::OuterStride<>(N));
    const ConstStridedMap x(a, M, K, Eigen::OuterStride<>(K));
    if (b_transposed)
      o.noalias() = x * ConstStridedMap(b + n0 * K, w, K, Eigen::OuterStride<>(K)).transpose();
    else
      o.noalias() = x * ConstStridedMap(b + n0, K, w, Eigen::OuterStride<>(N));
    if (bias)
      o.rowwise() += Eigen::Map<const Eigen::RowVectorXd>(bias + n0, w);
  };
  if (threads <= 1) {
    block(0, N);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
#ifdef _OPENMP
    const std::int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
#else
    const std::int64_t t = 0, T = 1;
#endif
    block(N * t / T, N * (t + 1) / T);
  }
}

void scaled_scores(const double* q, std::int64_t q_stride, const double* k, std::int64_t k_stride,
                   double* scores, std::int64_t L, std::int64_t S, std::int64_t d, double scale) {
  StridedMap s(scores, L, S, Eigen::OuterStride<>(S));
  s.noalias() = ConstStridedMap(q, L, d, Eigen::OuterStride<>(q_stride)) *
                ConstStridedMap(k, S, d, Eigen::OuterStride<>(k_stride)).transpose();
  s *= scale;
}

} // namespace tpullm::interp::linalg
