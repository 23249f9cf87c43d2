// The interpreter's f64 products for AVX-512 CPUs (kernels::Isa::avx512 and amx): Eigen compiled
// for that level under the namespace tpullm_eigen_avx512 (linalg_products.hpp says why).
#if defined(__x86_64__) && !defined(TPULLM_PORTABLE_ONLY)
#define TPULLM_LINALG_TARGET                                                                       \
  "sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl"
#define TPULLM_LINALG_AVX512 1
#define TPULLM_LINALG_EIGEN tpullm_eigen_avx512
#define TPULLM_LINALG_PRODUCTS avx512_products
#define TPULLM_LINALG_NAME "avx512"
#include "linalg_x86_level.inc"
#endif
