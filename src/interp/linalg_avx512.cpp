// The interpreter's f64 products for AVX-512 CPUs (kernels::Isa::avx512 and amx): Eigen compiled
// for that level under the namespace tpullm_eigen_avx512 (linalg_products.hpp says why).
#if defined(__x86_64__) && !defined(TPULLM_PORTABLE_ONLY)
#include "linalg_x86_prelude.hpp"

#include "linalg_products.hpp"

#pragma GCC push_options
// GCC 12 reports its own intrinsics' _mm*_undefined_* operands as maybe-uninitialized once
// they are inlined into Eigen's packet code (the kernels silence the same false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target(                                                                                \
    "sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl")
// GCC does not define the level's macros for a C++ `#pragma GCC target`; Eigen reads them to
// pick its packet types.
#ifndef __SSE3__
#define __SSE3__ 1
#endif
#ifndef __SSSE3__
#define __SSSE3__ 1
#endif
#ifndef __SSE4_1__
#define __SSE4_1__ 1
#endif
#ifndef __SSE4_2__
#define __SSE4_2__ 1
#endif
#ifndef __AVX__
#define __AVX__ 1
#endif
#ifndef __AVX2__
#define __AVX2__ 1
#endif
#ifndef __FMA__
#define __FMA__ 1
#endif
#ifndef __F16C__
#define __F16C__ 1
#endif
#ifndef __AVX512F__
#define __AVX512F__ 1
#endif
#ifndef __AVX512DQ__
#define __AVX512DQ__ 1
#endif
#ifndef __AVX512BW__
#define __AVX512BW__ 1
#endif
#ifndef __AVX512VL__
#define __AVX512VL__ 1
#endif
#include "linalg_eigen_config.hpp"
#define Eigen tpullm_eigen_avx512
#include <Eigen/Core>

#define TPULLM_LINALG_PRODUCTS avx512_products
#include "linalg_products.inc"
#undef Eigen
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif
