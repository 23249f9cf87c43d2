#pragma once
// The interpreter's f64 products (interp/linalg.hpp), compiled once per x86 vector level: the
// same Eigen expressions in three translation units, linalg_generic.cpp (the build's baseline,
// SSE2 on x86-64), linalg_avx2.cpp (AVX2 + FMA) and linalg_avx512.cpp (AVX-512 F/DQ/BW/VL),
// picked at run time by linalg.cpp from kernels::active_isa(). Private to src/interp: no Eigen
// type crosses this boundary, so each unit may compile Eigen under its own namespace.

#include <cstdint>

namespace tpullm::interp::linalg::detail {

/// One vector level's products; the arguments mean what linalg.hpp says.
struct Products {
  /// The level's name: "baseline", "avx2" or "avx512".
  const char* name;
  /// out[:, n0:n1) = a [M, K] x b[.., n0:n1) (+ bias[n0:n1)), out row stride N.
  void (*matmul_cols)(const double* a, const double* b, const double* bias, double* out,
                      std::int64_t M, std::int64_t K, std::int64_t N, std::int64_t n0,
                      std::int64_t n1, bool b_transposed);
  /// scores [L, S] = scale * (q [L, d] x k [S, d]^T), q and k strided.
  void (*scaled_scores)(const double* q, std::int64_t q_stride, const double* k,
                        std::int64_t k_stride, double* scores, std::int64_t L, std::int64_t S,
                        std::int64_t d, double scale);
  /// out [L, d] (strided) = p [L, S] x v [S, d] (strided).
  void (*weighted_values)(const double* p, const double* v, std::int64_t v_stride, double* out,
                          std::int64_t out_stride, std::int64_t L, std::int64_t S, std::int64_t d);
};

/// The baseline build's products (any CPU).
extern const Products generic_products;
#if defined(__x86_64__) && !defined(TPULLM_PORTABLE_ONLY)
/// AVX2 + FMA products (kernels::Isa::avx2).
extern const Products avx2_products;
/// AVX-512 F/DQ/BW/VL products (kernels::Isa::avx512 and amx).
extern const Products avx512_products;
#endif

} // namespace tpullm::interp::linalg::detail
