// The interpreter's f64 products for AVX2 + FMA CPUs (kernels::Isa::avx2): Eigen compiled for
// that level under the namespace tpullm_eigen_avx2 (linalg_products.hpp says why).
#if defined(__x86_64__) && !defined(TPULLM_PORTABLE_ONLY)
#define TPULLM_LINALG_TARGET "sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,fma,f16c"
#define TPULLM_LINALG_AVX512 0
#define TPULLM_LINALG_EIGEN tpullm_eigen_avx2
#define TPULLM_LINALG_PRODUCTS avx2_products
#define TPULLM_LINALG_NAME "avx2"
#include "linalg_x86_level.inc"
#endif
