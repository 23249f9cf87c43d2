#pragma once
/// Function attributes that compile one function for an ISA level of cpu_features.hpp, so every
/// path lives in the same binary (no global -march) and is picked at run time.

#ifndef TPULLM_TARGET_AVX512
/// Function attribute: compile for the AVX-512 level `Isa::avx512` checks (F/BW/DQ/VL + FMA/F16C).
#define TPULLM_TARGET_AVX512                                                                       \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi2,"                   \
                        "prefer-vector-width=512")))
#endif
#ifndef TPULLM_TARGET_AVX2
/// Function attribute: compile for the AVX2 level `Isa::avx2` checks (AVX2 + FMA + F16C).
#define TPULLM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi2")))
#endif
