// The interpreter's f64 products for AVX2 + FMA CPUs (kernels::Isa::avx2): Eigen compiled for
// that level under the namespace tpullm_eigen_avx2 (linalg_products.hpp says why).
#if defined(__x86_64__) && !defined(TPULLM_PORTABLE_ONLY)
#include "linalg_x86_prelude.hpp"

#include "linalg_products.hpp"

#pragma GCC push_options
// GCC 12 reports its own intrinsics' _mm*_undefined_* operands as maybe-uninitialized once
// they are inlined into Eigen's packet code (the kernels silence the same false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,fma,f16c")
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
#include "linalg_eigen_config.hpp"
#define Eigen tpullm_eigen_avx2
#include <Eigen/Core>

#define TPULLM_LINALG_PRODUCTS avx2_products
#include "linalg_products.inc"
#undef Eigen
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif
