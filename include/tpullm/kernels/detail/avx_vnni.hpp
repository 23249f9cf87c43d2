#pragma once
/// AVX-VNNI (VEX-encoded 256-bit VPDPBUSD, cpu_features().avx_vnni) pieces shared by the
/// AVX2-level integer kernels: the W8A8 tiles (int8_linear_avx2.hpp) and the int8-activation
/// GEMV of weight-only formats (matmul_gemv_int8_avx2.hpp).

#include "tpullm/kernels/isa_target.hpp"

#if TPULLM_X86
#include <immintrin.h>

#ifndef TPULLM_TARGET_AVX_VNNI
/// Function attribute: the AVX2 level plus AVX-VNNI.
#define TPULLM_TARGET_AVX_VNNI __attribute__((target("avx2,fma,f16c,bmi2,avxvnni")))
#endif

namespace tpullm::kernels::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

/// acc += VPDPBUSD(u8 a, s8 b) on ymm (VEX encoding), in place: each int32 lane adds the four
/// products of its bytes (no saturation).
TPULLM_TARGET_AVX_VNNI inline __attribute__((always_inline)) void dpbusd_vex(__m256i& acc,
                                                                             __m256i a, __m256i b) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
}

#pragma GCC diagnostic pop

} // namespace tpullm::kernels::detail
#endif
