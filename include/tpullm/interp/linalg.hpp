#pragma once
/// The interpreter's f64 products: Eigen products over interpreter tensor storage (row-major,
/// never owning), split over output columns across OpenMP threads. Eigen is compiled once per
/// x86 vector level (baseline, AVX2 + FMA, AVX-512) in src/interp/linalg_*.cpp and the level is
/// picked at each call from kernels::active_isa(), so `TPULLM_ISA=portable` also runs the
/// baseline products. Only the Top interpreter includes this header; nothing here knows the IR,
/// and no Eigen type appears in it.

#include <algorithm>
#include <cstdint>

namespace tpullm::interp::linalg {

/// OpenMP threads available to one product (1 without OpenMP).
int max_threads();

/// Threads worth using for `macs` multiply-adds over `n` output columns: one below about
/// 2^22 multiply-adds (the fork, join and spin cost more than they save), and at least 16 columns
/// per thread.
inline int threads_for(double macs, std::int64_t n) {
  if (macs < static_cast<double>(1 << 22))
    return 1;
  return static_cast<int>(std::clamp<std::int64_t>(n / 16, 1, max_threads()));
}

/// The vector level the products run at now: "baseline", "avx2" or "avx512".
const char* products_level();

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
void weighted_values(const double* p, const double* v, std::int64_t v_stride, double* out,
                     std::int64_t out_stride, std::int64_t L, std::int64_t S, std::int64_t d);

} // namespace tpullm::interp::linalg
