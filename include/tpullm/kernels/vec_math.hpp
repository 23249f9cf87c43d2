#pragma once
/// Small vectorizable math shared by the non-matmul kernels: target attributes for the per-ISA
/// clones, a branch-free exp/exp2 that GCC auto-vectorizes, AVX-512 exp2, row conversion of
/// f32/bf16/f16 to f32, and the L2-derived default local-memory budget.
///
/// Pattern: a kernel's body is an `always_inline` template over plain loops; thin wrappers
/// marked TPULLM_TARGET_AVX512 / TPULLM_TARGET_AVX2 inline it, so the same source is compiled
/// once per ISA and picked at run time from `active_isa()` (portable = the unattributed call).

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <unistd.h>

#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/isa_target.hpp"

#if TPULLM_X86
#include <immintrin.h>
#endif
#include "tpullm/kernels/kv8.hpp"
#include "tpullm/support/float16.hpp"

#ifndef TPULLM_ALWAYS_INLINE
/// Forces a generic body into its per-ISA caller so it is compiled for that caller's target.
#define TPULLM_ALWAYS_INLINE inline __attribute__((always_inline))
#endif

/// GCC 12 reports `_mm512_undefined_ps()` inside inlined AVX-512 intrinsics as an uninitialized
/// use (a false positive that -Werror turns fatal); AVX-512 sections are wrapped in these.
#define TPULLM_AVX512_BEGIN                                                                        \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")             \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define TPULLM_AVX512_END _Pragma("GCC diagnostic pop")

namespace tpullm::kernels {

/// Element types a kernel may read from weights or activations: f32, bf16, f16.
template <class T>
inline constexpr bool is_float_storage_v =
    std::is_same_v<T, float> || std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>;

/// Printable dtype name of a storage type ("f32", "bf16", "f16", "int8" for a kv8_t cache).
template <class T>
constexpr const char* storage_name() {
  if constexpr (std::is_same_v<T, kv8_t>)
    return "int8";
  else if constexpr (std::is_same_v<T, float>)
    return "f32";
  else if constexpr (std::is_same_v<T, bf16_t>)
    return "bf16";
  else
    return "f16";
}

/// Default local-memory budget (bytes) of one core: its L2 size, 1 MiB if unknown.
inline std::size_t default_local_memory_bytes() {
  static const std::size_t bytes = [] {
    long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? static_cast<std::size_t>(l2) : std::size_t{1} << 20;
  }();
  return bytes;
}

TPULLM_AVX512_BEGIN
namespace detail {

/// One storage element -> f32 (scalar, exact).
template <class T>
TPULLM_ALWAYS_INLINE float to_f32(T v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else if constexpr (std::is_same_v<T, bf16_t>)
    return std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16);
  else
    return f16_to_f32(v.bits);
}

/// exp2(x), branch-free (vectorizes); relative error < 2e-7 for x in [-126, 126]; inputs are
/// clamped to [-160, 126], results below 2^-126 flush to 0 (so -inf gives 0). NaN inputs are not
/// supported (callers never pass them on purpose).
TPULLM_ALWAYS_INLINE float exp2_approx(float x) {
  x = x < -160.f ? -160.f : x;
  x = x > 126.f ? 126.f : x;
  // round to nearest via truncation of a positive value (no libm call)
  const int n = static_cast<int>(x + 256.5f) - 256;
  const float f = x - static_cast<float>(n); // [-0.5, 0.5]
  // 2^f on [-0.5,0.5]: degree-7 Taylor polynomial of e^(f ln2), truncation error ~1e-9.
  float p = 1.525273380405984e-05f;
  p = p * f + 1.5403530393381606e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  const int e = std::max(n, -127) + 127; // 0 -> the scale is +0 (flush)
  return p * std::bit_cast<float>(static_cast<std::uint32_t>(e) << 23);
}

/// exp(x) via exp2_approx; relative error < 3e-7 for |x| < 80.
TPULLM_ALWAYS_INLINE float exp_approx(float x) {
  return exp2_approx(x * 1.4426950408889634f);
}

#if TPULLM_X86
/// AVX-512 exp2 for x <= 0 (scores minus running max): 2^x with rel err ~2e-7, -inf -> 0.
TPULLM_TARGET_AVX512 inline __m512 exp2_avx512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-200.f));
  const __m512 fl = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, fl);
  __m512 p = _mm512_set1_ps(1.525273380405984e-05f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381606e-4f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, fl);
}
#endif

/// Converts n storage elements to f32 (generic body, vectorizes for f32/bf16).
template <class T>
TPULLM_ALWAYS_INLINE void convert_generic(const T* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    dst[i] = to_f32(src[i]);
}

#if TPULLM_X86
/// f16 -> f32 with F16C (AVX2 level).
TPULLM_TARGET_AVX2 inline void convert_f16_avx2(const f16_t* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i)
    dst[i] = f16_to_f32(src[i].bits);
}

/// f16 -> f32 with AVX-512F.
TPULLM_TARGET_AVX512 inline void convert_f16_avx512(const f16_t* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(
        dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < n; ++i)
    dst[i] = f16_to_f32(src[i].bits);
}
#endif

template <class T>
TPULLM_TARGET_AVX512 void convert_avx512(const T* src, float* dst, std::int64_t n) {
  convert_generic(src, dst, n);
}
template <class T>
TPULLM_TARGET_AVX2 void convert_avx2(const T* src, float* dst, std::int64_t n) {
  convert_generic(src, dst, n);
}

/// Converts one row of n storage elements to f32 on the path `isa` selects.
/// For kv8_t, src is one head row of n codes and its scale (kv8.hpp).
template <class T>
void convert_row(const T* src, float* dst, std::int64_t n, Isa isa) {
  if constexpr (std::is_same_v<T, kv8_t>) {
    (void)isa;
    kv8_dequantize_row(src, dst, n);
  } else if constexpr (std::is_same_v<T, float>) {
    (void)isa;
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
  } else if constexpr (std::is_same_v<T, f16_t>) {
    switch (isa) {
#if TPULLM_X86
    case Isa::amx:
    case Isa::avx512:
      convert_f16_avx512(src, dst, n);
      return;
    case Isa::avx2:
      convert_f16_avx2(src, dst, n);
      return;
#else
    case Isa::amx:
    case Isa::avx512:
    case Isa::avx2:
#endif
    case Isa::portable:
      convert_generic(src, dst, n);
      return;
    }
  } else {
    switch (isa) {
    case Isa::amx:
    case Isa::avx512:
      convert_avx512(src, dst, n);
      return;
    case Isa::avx2:
      convert_avx2(src, dst, n);
      return;
    case Isa::portable:
      convert_generic(src, dst, n);
      return;
    }
  }
}

} // namespace detail
TPULLM_AVX512_END
} // namespace tpullm::kernels
