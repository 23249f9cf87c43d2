#pragma once
/// Function attributes that compile one function for an ISA level of cpu_features.hpp, so every
/// path lives in the same binary (no global -march) and is picked at run time.
///
/// `TPULLM_X86` is 1 when the x86 paths (intrinsics, CPUID, target attributes) are compiled in:
/// on x86-64 unless `TPULLM_PORTABLE_ONLY` is defined. Elsewhere (or with that define) only the
/// portable path exists, the target macros expand to nothing and no x86 header is included, so
/// the library builds on any architecture.

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(TPULLM_PORTABLE_ONLY)
#define TPULLM_X86 1
#else
#define TPULLM_X86 0
#endif

#if TPULLM_X86
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
#ifndef TPULLM_TARGET_AMX
/// Function attribute: the AMX tile instructions only (no AVX-512), so a tile-loop template
/// instantiated with the scalar tile emulator still runs on any x86-64 CPU.
#define TPULLM_TARGET_AMX __attribute__((target("amx-tile,amx-bf16,amx-int8")))
#endif
#ifndef TPULLM_TARGET_AMX_AVX512
/// Function attribute: the tile instructions and the AVX-512 around them (with VNNI and BF16,
/// which every CPU with AMX has), for the kernels that stage tiles in vector code.
#define TPULLM_TARGET_AMX_AVX512                                                                   \
  __attribute__((                                                                                  \
      target("amx-tile,amx-int8,amx-bf16,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,"           \
             "avx512bf16,avx2,fma,f16c,bmi2,prefer-vector-width=512")))
#endif
#else
#define TPULLM_TARGET_AVX512
#define TPULLM_TARGET_AVX2
#define TPULLM_TARGET_AMX
#define TPULLM_TARGET_AMX_AVX512
#endif
