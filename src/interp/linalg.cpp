// Out-of-line definitions of tpullm/interp/linalg.hpp (compiled once into tpullm_core): the
// column split and the run-time choice of the products' vector level (linalg_products.hpp).
#include "tpullm/interp/linalg.hpp"

#include "linalg_products.hpp"
#include "tpullm/kernels/cpu_features.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tpullm::interp::linalg {

namespace {

/// The products of the kernels' active vector ISA (never one the CPU lacks: active_isa() is
/// capped at what cpu_features() reports).
const detail::Products& products() {
#if defined(__x86_64__) && !defined(TPULLM_PORTABLE_ONLY)
  switch (kernels::vector_isa(kernels::active_isa())) {
  case kernels::Isa::avx512:
  case kernels::Isa::amx:
    return detail::avx512_products;
  case kernels::Isa::avx2:
    return detail::avx2_products;
  case kernels::Isa::portable:
    break;
  }
#endif
  return detail::generic_products;
}

} // namespace

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

const char* products_level() {
  return products().name;
}

void matmul(const double* a, const double* b, const double* bias, double* out, std::int64_t M,
            std::int64_t K, std::int64_t N, bool b_transposed) {
  if (M == 0 || N == 0)
    return;
  const detail::Products& f = products();
  const int threads =
      threads_for(static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K), N);
  if (threads <= 1) {
    f.matmul_cols(a, b, bias, out, M, K, N, 0, N, b_transposed);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
#ifdef _OPENMP
    const std::int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
#else
    const std::int64_t t = 0, T = 1;
#endif
    f.matmul_cols(a, b, bias, out, M, K, N, N * t / T, N * (t + 1) / T, b_transposed);
  }
}

void scaled_scores(const double* q, std::int64_t q_stride, const double* k, std::int64_t k_stride,
                   double* scores, std::int64_t L, std::int64_t S, std::int64_t d, double scale) {
  products().scaled_scores(q, q_stride, k, k_stride, scores, L, S, d, scale);
}

void weighted_values(const double* p, const double* v, std::int64_t v_stride, double* out,
                     std::int64_t out_stride, std::int64_t L, std::int64_t S, std::int64_t d) {
  products().weighted_values(p, v, v_stride, out, out_stride, L, S, d);
}

} // namespace tpullm::interp::linalg
