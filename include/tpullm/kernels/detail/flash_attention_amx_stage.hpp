#pragma once
/// How the resident-O prefill item (flash_attention_amx_resident.hpp) stages the keys and values
/// of each cache type into bf16 B tiles, without changing a value the cache holds:
///  - bf16: as stored;
///  - int8 (kv8.hpp): the codes, exact in bf16 (|code| <= 127 < 2^8), with each position's row
///    scale kept in f32 beside the tiles (the item multiplies a key's scores by its key scale and
///    a key's P by its value scale);
///  - f16: two bf16 terms, hi = bf16(x) and lo = bf16(x - hi), whose sum is x exactly (an f16
///    significand has 11 bits: x - hi has at most 4 and lies in bf16's range), so the item runs
///    each product on hi and on lo.
/// Layouts are those of flash_attention_amx.hpp: K^T as [dq / 32][2][16][16] dwords (a dword two
/// adjacent elements of d), V as [dq / 16][16][16] dwords (a dword two adjacent keys).

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tpullm/kernels/isa_target.hpp"
#include "tpullm/kernels/kv8.hpp"
#include "tpullm/kernels/detail/flash_attention_amx_hw.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::kernels::detail {

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// Whether the resident item stages this cache type as two bf16 terms (f16).
template <class KV>
inline constexpr bool kFaResSplit = std::is_same_v<KV, f16_t>;
/// Whether the resident item carries Q in three bf16 terms and P in two, with the accurate exp2,
/// so that its results keep the vector kernels' bound (the f16 and int8 caches: their values are
/// exact in the staged terms, and a model that keeps them is not rounded to the bf16 cache's
/// precision).
template <class KV>
inline constexpr bool kFaResExact = std::is_same_v<KV, f16_t> || std::is_same_v<KV, kv8_t>;
/// Whether the resident item applies per-position row scales (an int8 cache).
template <class KV>
inline constexpr bool kFaResScaled = std::is_same_v<KV, kv8_t>;

/// 16 bf16 (as the low halves of 16 dwords' worth of 16-bit lanes) widened to f32.
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE __m512 fa_st_bf16_f32(__m256i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

/// 32 elements [32 sl, 32 sl + 32) of a head row (zero past d) as 16 dwords of bf16 pairs: hi,
/// and for f16 the exact remainder lo.
template <class KV>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void
fa_st_k_pairs(const KV* row, std::int64_t sl, std::int64_t d, __m512i& hi, __m512i& lo) {
  const std::int64_t left = std::clamp<std::int64_t>(d - 32 * sl, 0, 32);
  const __mmask32 m = left == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1u);
  if constexpr (std::is_same_v<KV, bf16_t>) {
    hi = _mm512_maskz_loadu_epi16(m, row + 32 * sl);
  } else if constexpr (std::is_same_v<KV, kv8_t>) {
    const __m256i c = _mm256_maskz_loadu_epi8(m, row + 32 * sl);
    const __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(c)));
    const __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(c, 1)));
    hi = (__m512i)_mm512_cvtne2ps_pbh(b, a);
  } else {
    static_assert(std::is_same_v<KV, f16_t>, "bf16, f16 or int8 caches");
    const __m512i x = _mm512_maskz_loadu_epi16(m, row + 32 * sl);
    const __m512 a = _mm512_cvtph_ps(_mm512_castsi512_si256(x));
    const __m512 b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
    hi = (__m512i)_mm512_cvtne2ps_pbh(b, a);
    const __m512 ha = fa_st_bf16_f32(_mm512_castsi512_si256(hi));
    const __m512 hb = fa_st_bf16_f32(_mm512_extracti64x4_epi64(hi, 1));
    lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha));
  }
}

/// 16 elements [16 c, 16 c + 16) of a head row (zero past d) as 16 bf16: hi, and for f16 lo.
template <class KV>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void
fa_st_v_half(const KV* row, std::int64_t c, std::int64_t d, __m256i& hi, __m256i& lo) {
  const std::int64_t left = std::clamp<std::int64_t>(d - 16 * c, 0, 16);
  const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
  if constexpr (std::is_same_v<KV, bf16_t>) {
    hi = _mm256_maskz_loadu_epi16(m, row + 16 * c);
  } else if constexpr (std::is_same_v<KV, kv8_t>) {
    const __m128i x = _mm_maskz_loadu_epi8(m, row + 16 * c);
    hi = (__m256i)_mm512_cvtneps_pbh(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x)));
  } else {
    const __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 16 * c));
    hi = (__m256i)_mm512_cvtneps_pbh(x);
    lo = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(x, fa_st_bf16_f32(hi)));
  }
}

/// Stages keys [j0, j0 + nk) (nk <= 32) of one kv head (k, v: its first head row; kvs: elements
/// between consecutive positions' rows): K^T tiles kt and V tiles vt (for f16 also the lo terms
/// kt_lo / vt_lo), and for int8 the keys' scales ks / vs [32] (0 past nk). Zero past the keys
/// and past d (d even).
template <class KV>
TPULLM_TARGET_AMX_AVX512 inline void
fa_st_stage_kv(const KV* k, const KV* v, std::int64_t kvs, std::int64_t d, std::int64_t dq,
               std::int64_t j0, std::int64_t nk, std::uint32_t* kt, std::uint32_t* vt,
               std::uint32_t* kt_lo, std::uint32_t* vt_lo, float* ks, float* vs) {
  constexpr bool split = kFaResSplit<KV>;
  for (std::int64_t sl = 0; sl < dq / 32; ++sl)
    for (std::int64_t kh = 0; kh < 2; ++kh) {
      __m512i r[16], rl[16];
      for (std::int64_t n = 0; n < 16; ++n) {
        const std::int64_t key = 16 * kh + n;
        r[n] = rl[n] = _mm512_setzero_si512();
        if (key < nk)
          fa_st_k_pairs<KV>(k + (j0 + key) * kvs, sl, d, r[n], rl[n]);
      }
      fa_hw_transpose16(r);
      for (int i = 0; i < 16; ++i)
        _mm512_storeu_si512(kt + sl * 512 + kh * 256 + 16 * i, r[i]);
      if constexpr (split) {
        fa_hw_transpose16(rl);
        for (int i = 0; i < 16; ++i)
          _mm512_storeu_si512(kt_lo + sl * 512 + kh * 256 + 16 * i, rl[i]);
      }
    }
  for (std::int64_t c = 0; c < dq / 16; ++c)
    for (std::int64_t p = 0; p < 16; ++p) {
      const std::int64_t n = 2 * p;
      __m256i a = _mm256_setzero_si256(), al = a, b = a, bl = a;
      if (n < nk)
        fa_st_v_half<KV>(v + (j0 + n) * kvs, c, d, a, al);
      if (n + 1 < nk)
        fa_st_v_half<KV>(v + (j0 + n + 1) * kvs, c, d, b, bl);
      _mm512_storeu_si512(vt + c * 256 + p * 16,
                          _mm512_or_si512(_mm512_cvtepu16_epi32(a),
                                          _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
      if constexpr (split)
        _mm512_storeu_si512(vt_lo + c * 256 + p * 16,
                            _mm512_or_si512(_mm512_cvtepu16_epi32(al),
                                            _mm512_slli_epi32(_mm512_cvtepu16_epi32(bl), 16)));
    }
  if constexpr (kFaResScaled<KV>)
    for (std::int64_t n = 0; n < 32; ++n) {
      ks[n] = n < nk ? kv8_scale(k + (j0 + n) * kvs, d) : 0.f;
      vs[n] = n < nk ? kv8_scale(v + (j0 + n) * kvs, d) : 0.f;
    }
  (void)kt_lo;
  (void)vt_lo;
  (void)ks;
  (void)vs;
}

#pragma GCC diagnostic pop
#endif

} // namespace tpullm::kernels::detail
