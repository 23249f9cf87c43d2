#pragma once
/// Linear layer y[M, N] = x[M, K] · W[K, N] (+ bias[N]) over packed weights
/// (kernels/packed_weights.hpp): f32 activations in and out, f32 accumulation, weights f32, bf16,
/// f16, int8 (per-channel or group-wise), int4 group-wise symmetric / asymmetric.
///
/// Two algorithms, each with a portable, an AVX2+FMA and an AVX-512 path (chosen per call from
/// `active_isa()`):
///  - M <= 4 ("GEMV", memory-bound): every panel is streamed once from front to back and
///    dequantized in registers. Quantized formats accumulate sum_k x[k] * q[k][n] per group in f32
///    and apply the group's scale / zero once per group: y += s * (acc - z * sum_k x[k]).
///  - M > 4 ("GEMM", compute-bound): cache-blocked (kc = 256 rows of K, mc <= 336 rows of x);
///    the x block is packed into MR-row strips ([kc][MR], MR = 14 on AVX-512, 6 on AVX2), the
///    [kc, 32] block of one weight panel is used in place (f32) or dequantized once into an f32
///    tile in L1 (all other formats), and a register-blocked micro-kernel (14 x 32 on AVX-512:
///    28 zmm accumulators; 6 x 16 on AVX2) multiplies them.
/// No activation quantization happens anywhere: results match an f32 dequantize-then-multiply up
/// to f32 rounding (see docs/kernels.md for the bounds the tests enforce).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <immintrin.h>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/packed_weights.hpp"

#ifndef TPULLM_TARGET_AVX512
#define TPULLM_TARGET_AVX512                                                                       \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi2,"                   \
                        "prefer-vector-width=512")))
#endif
#ifndef TPULLM_TARGET_AVX2
#define TPULLM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi2")))
#endif

namespace tpullm::kernels {

/// Shape of a linear: x: [M, K], W: [K, N], y: [M, N].
struct LinearShape {
  std::int64_t M = 0; ///< rows of x and y (tokens)
  std::int64_t K = 0; ///< input features
  std::int64_t N = 0; ///< output features
};

namespace detail {

/// A sub-matrix of packed weights: packed rows [k0, k1) (group-aligned) of panels [p0, p1).
struct WeightView {
  const PackedWeights* w = nullptr;
  std::int64_t k0 = 0, k1 = 0, p0 = 0, p1 = 0;
  std::int64_t cols() const { return std::min(w->N, p1 * kPanelCols) - p0 * kPanelCols; }
};

/// Arguments shared by every path. x rows have stride ldx and x column 0 is packed row k0; y rows
/// have stride ldy and y column 0 is weight column p0 * 32. y = (accumulate ? y : 0) + x · W[k0:k1,
/// cols] + bias.
struct XDigits;

struct LinearArgs {
  const float* x = nullptr;
  std::int64_t ldx = 0;
  WeightView v;
  const float* bias = nullptr; ///< [cols] or null
  float* y = nullptr;
  std::int64_t ldy = 0;
  std::int64_t M = 0;
  bool accumulate = false;
  const float* xsum = nullptr; ///< [M][G_view]: per-row, per-group sums of x (quantized only)
  std::int64_t xsum_ld = 0;
  const XDigits* xd = nullptr; ///< digit-decomposed x for the VNNI GEMV (int8 / int4), or null
};

inline constexpr std::int64_t kGemvMaxRows = 4;
#ifndef TPULLM_GEMV_PREFETCH
#define TPULLM_GEMV_PREFETCH 4096
#endif
/// Software prefetch distance (bytes) of the GEMV weight stream, every cache line.
inline constexpr std::int64_t kGemvPf = TPULLM_GEMV_PREFETCH;
inline constexpr std::int64_t kKc = 256;
inline constexpr std::int64_t kMcMax = 336;
inline constexpr std::int64_t kNb = 8; ///< panels per L2-resident C block in the GEMM

/// Rows per accumulation segment of a view: the group size for quantized formats, the whole
/// view otherwise. Segment gi covers packed rows [k0 + gi * step, min(k1, k0 + (gi + 1) * step)).
inline std::int64_t segment_rows(const WeightView& v) {
  return is_quantized(v.w->format) ? v.w->group_rows() : std::max<std::int64_t>(1, v.k1 - v.k0);
}

inline const float* panel_scales(const PackedWeights& w, std::int64_t p, std::int64_t g) {
  return w.scales.data() + (p * w.groups() + g) * kPanelCols;
}
inline const std::uint8_t* panel_zeros(const PackedWeights& w, std::int64_t p, std::int64_t g) {
  return w.zeros.data() + (p * w.groups() + g) * kPanelCols;
}
inline const std::uint8_t* panel_row(const PackedWeights& w, std::int64_t p, std::int64_t k) {
  return w.data.data() + (p * w.stored_rows() + k) * row_bytes(w.format);
}

// ------------------------------------------------------------------------------------------
// Portable path
// ------------------------------------------------------------------------------------------

/// Raw values of one row group (row_group(F) rows) as f32: out[j][32] for row j of the group.
/// Ints are not scaled (int8 signed q, int4 unsigned nibbles); columns in natural order.
template <WeightFormat F>
inline void decode_rows_raw(const std::uint8_t* r, float* out) {
  if constexpr (F == WeightFormat::f32) {
    std::memcpy(out, r, 128);
  } else if constexpr (F == WeightFormat::bf16) {
    for (int j = 0; j < 16; ++j) {
      std::uint16_t lo, hi;
      std::memcpy(&lo, r + 4 * j, 2);
      std::memcpy(&hi, r + 4 * j + 2, 2);
      out[j] = bf16_to_f32(lo);
      out[j + 16] = bf16_to_f32(hi);
    }
  } else if constexpr (F == WeightFormat::f16) {
    for (int j = 0; j < 32; ++j) {
      std::uint16_t h;
      std::memcpy(&h, r + 2 * j, 2);
      out[j] = f16_to_f32(h);
    }
  } else if constexpr (F == WeightFormat::int8) {
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 32; ++c)
        out[j * 32 + c] = static_cast<float>(static_cast<std::int8_t>(r[4 * c + j]));
  } else {
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 32; ++c) {
        out[j * 32 + c] = static_cast<float>(r[4 * c + j] & 0xF);
        out[(j + 4) * 32 + c] = static_cast<float>(r[4 * c + j] >> 4);
      }
  }
}

/// Zero point of column c of a group, as the decoded raw values see it.
template <WeightFormat F>
inline float zero_point(const PackedWeights& w, std::int64_t p, std::int64_t g, int c) {
  if constexpr (F == WeightFormat::int4_sym)
    return 8.0f;
  else if constexpr (F == WeightFormat::int4_asym)
    return static_cast<float>(panel_zeros(w, p, g)[c]);
  else
    return 0.0f;
}

template <WeightFormat F>
void gemv_portable(const LinearArgs& a, std::int64_t pa, std::int64_t pb) {
  constexpr std::int64_t RG = row_group(F);
  const PackedWeights& w = *a.v.w;
  const std::int64_t N = w.N, rb = row_bytes(F);
  float rows[8 * 32];
  for (std::int64_t p = pa; p < pb; ++p) {
    const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
    const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, N - p * kPanelCols));
    for (std::int64_t m = 0; m < a.M; ++m) {
      float t[32] = {};
      const float* xr = a.x + m * a.ldx;
      const std::int64_t seg = segment_rows(a.v);
      std::int64_t gi = 0;
      for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
        const std::int64_t ke = std::min(a.v.k1, ks + seg);
        float acc[32] = {};
        for (std::int64_t k = ks; k < ke; k += RG) {
          decode_rows_raw<F>(panel_row(w, p, k), rows);
          for (std::int64_t j = 0; j < RG; ++j) {
            const float xv = xr[k + j - a.v.k0];
            for (int c = 0; c < 32; ++c)
              acc[c] += xv * rows[j * 32 + c];
          }
        }
        if constexpr (is_quantized(F)) {
          const std::int64_t g = ks / w.group_rows();
          const float* s = panel_scales(w, p, g);
          const float xs = a.xsum[m * a.xsum_ld + gi];
          for (int c = 0; c < 32; ++c)
            t[c] += s[c] * (acc[c] - zero_point<F>(w, p, g, c) * xs);
        } else {
          for (int c = 0; c < 32; ++c)
            t[c] += acc[c];
        }
      }
      float* yr = a.y + m * a.ldy + c0;
      for (int c = 0; c < nc; ++c)
        yr[c] = (a.accumulate ? yr[c] : 0.0f) + t[c] + (a.bias ? a.bias[c0 + c] : 0.0f);
    }
  }
  (void)rb;
}

/// Dequantizes packed rows [kb, kb + kc) of panel p (kb, kc multiples of the row group, except a
/// final partial block that ends at stored_rows()) into out: [kc][32] f32.
template <WeightFormat F>
void decode_block_portable(const PackedWeights& w, std::int64_t p, std::int64_t kb, std::int64_t kc,
                           float* out) {
  constexpr std::int64_t RG = row_group(F);
  for (std::int64_t k = 0; k < kc; k += RG) {
    float* o = out + k * kPanelCols;
    decode_rows_raw<F>(panel_row(w, p, kb + k), o);
    if constexpr (is_quantized(F)) {
      const std::int64_t g = (kb + k) / w.group_rows();
      const float* s = panel_scales(w, p, g);
      for (std::int64_t j = 0; j < RG; ++j)
        for (int c = 0; c < 32; ++c)
          o[j * 32 + c] = (o[j * 32 + c] - zero_point<F>(w, p, g, c)) * s[c];
    }
  }
}

/// Packs x rows [m0, m0 + mc) x cols [kb, kb + kc) into strips of MR rows: [strip][kc][MR]
/// (the last strip holds rows < MR and is [kc][rows]).
inline void pack_a(const float* x, std::int64_t ldx, std::int64_t m0, std::int64_t mc,
                   std::int64_t kb, std::int64_t kc, int MR, float* out) {
  for (std::int64_t s = 0; s < mc; s += MR) {
    const std::int64_t rows = std::min<std::int64_t>(MR, mc - s);
    float* o = out + s * kc; // the tail strip is packed `rows` wide
    for (std::int64_t k = 0; k < kc; ++k)
      for (std::int64_t i = 0; i < rows; ++i)
        o[k * rows + i] = x[(m0 + s + i) * ldx + kb + k];
  }
}

/// How a micro-kernel starts its accumulators.
enum class TileInit : std::uint8_t { zero, bias, load };

inline void micro_portable(const float* ap, const float* b, std::int64_t kc, int rows, float* c,
                           std::int64_t ldc, int ncols, TileInit init, const float* bias, int MR) {
  for (int i = 0; i < rows; ++i) {
    float acc[32];
    for (int j = 0; j < 32; ++j) {
      switch (init) {
      case TileInit::zero:
        acc[j] = 0.0f;
        break;
      case TileInit::bias:
        acc[j] = j < ncols ? bias[j] : 0.0f;
        break;
      case TileInit::load:
        acc[j] = j < ncols ? c[i * ldc + j] : 0.0f;
        break;
      }
    }
    for (std::int64_t k = 0; k < kc; ++k) {
      const float av = ap[k * MR + i];
      for (int j = 0; j < 32; ++j)
        acc[j] += av * b[k * 32 + j];
    }
    for (int j = 0; j < ncols; ++j)
      c[i * ldc + j] = acc[j];
  }
}

/// x of a GEMV split into three int8 digits per element for the VNNI path:
/// x ~= s1 * (h + l / 256 + t / 65536), s1 = max|x| / 127 over each weight group; the residual is
/// <= 1.5 * s1 / 65536 (about 1.2e-7 of the group's largest |x|, i.e. f32 rounding level).
struct XDigits {
  std::vector<std::int8_t> d;  ///< [M][3][Kv] digits h, l, t (Kv = view rows)
  std::vector<float> s1;       ///< [M][Gv] scale of digit h per group
  std::vector<std::int32_t> S; ///< [M][Gv][3] sum of each digit over the group
  std::int64_t Kv = 0, Gv = 0;
};

/// Builds XDigits for rows [0, M) of x over view rows [k0, k1) grouped by `seg` rows.
__attribute__((always_inline)) inline void make_x_digits_body(const float* x, std::int64_t ldx,
                                                              std::int64_t M, std::int64_t Kv,
                                                              std::int64_t seg, XDigits& xd) {
  xd.Kv = Kv;
  xd.Gv = (Kv + seg - 1) / seg;
  xd.d.assign(static_cast<std::size_t>(M * 3 * Kv), 0);
  xd.s1.assign(static_cast<std::size_t>(M * xd.Gv), 0.0f);
  xd.S.assign(static_cast<std::size_t>(M * xd.Gv * 3), 0);
  constexpr float kRound = 12582912.0f; // 1.5 * 2^23: (v + kRound) - kRound rounds to nearest
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t g = 0; g < xd.Gv; ++g) {
      const std::int64_t ks = g * seg, ke = std::min(Kv, ks + seg);
      const float* xr = x + m * ldx;
      float mx = 0;
      for (std::int64_t k = ks; k < ke; ++k)
        mx = mx > std::abs(xr[k]) ? mx : std::abs(xr[k]);
      if (!(mx > 0) || !std::isfinite(mx))
        continue; // all-zero group (NaN/inf x is not supported by this path)
      const float s1 = mx / 127.0f, inv1 = 127.0f / mx;
      const float s2 = s1 * (1.0f / 256.0f), inv2 = inv1 * 256.0f;
      const float inv3 = inv2 * 256.0f;
      xd.s1[static_cast<std::size_t>(m * xd.Gv + g)] = s1;
      std::int8_t* dh = xd.d.data() + (m * 3 + 0) * Kv;
      std::int8_t* dl = xd.d.data() + (m * 3 + 1) * Kv;
      std::int8_t* dt = xd.d.data() + (m * 3 + 2) * Kv;
      std::int32_t sh = 0, sl = 0, st = 0;
      for (std::int64_t k = ks; k < ke; ++k) {
        const float v = xr[k];
        const float h = std::clamp((v * inv1 + kRound) - kRound, -127.0f, 127.0f);
        const float r1 = std::fma(-h, s1, v);
        const float l = std::clamp((r1 * inv2 + kRound) - kRound, -127.0f, 127.0f);
        const float r2 = std::fma(-l, s2, r1);
        const float t = std::clamp((r2 * inv3 + kRound) - kRound, -127.0f, 127.0f);
        dh[k] = static_cast<std::int8_t>(h);
        dl[k] = static_cast<std::int8_t>(l);
        dt[k] = static_cast<std::int8_t>(t);
        sh += static_cast<std::int32_t>(h);
        sl += static_cast<std::int32_t>(l);
        st += static_cast<std::int32_t>(t);
      }
      std::int32_t* S = xd.S.data() + (m * xd.Gv + g) * 3;
      S[0] = sh;
      S[1] = sl;
      S[2] = st;
    }
}

TPULLM_TARGET_AVX512 inline void make_x_digits(const float* x, std::int64_t ldx, std::int64_t M,
                                               std::int64_t Kv, std::int64_t seg, XDigits& xd) {
  make_x_digits_body(x, ldx, M, Kv, seg, xd);
}

// ------------------------------------------------------------------------------------------
// AVX-512 path
// ------------------------------------------------------------------------------------------
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// Raw row group -> w[j][0..1] (row j of the group, columns 0..15 / 16..31).
template <WeightFormat F>
TPULLM_TARGET_AVX512 inline void decode_rows_avx512(const std::uint8_t* r, __m512 (*w)[2]) {
  if constexpr (F == WeightFormat::f32) {
    w[0][0] = _mm512_load_ps(reinterpret_cast<const float*>(r));
    w[0][1] = _mm512_load_ps(reinterpret_cast<const float*>(r) + 16);
  } else if constexpr (F == WeightFormat::bf16) {
    const __m512i d = _mm512_load_si512(r);
    w[0][0] = _mm512_castsi512_ps(_mm512_slli_epi32(d, 16));
    w[0][1] =
        _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else if constexpr (F == WeightFormat::f16) {
    w[0][0] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(r)));
    w[0][1] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32)));
  } else if constexpr (F == WeightFormat::int8) {
    for (int h = 0; h < 2; ++h) {
      const __m512i d = _mm512_load_si512(r + 64 * h);
      w[0][h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(d, 24), 24));
      w[1][h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(d, 16), 24));
      w[2][h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(d, 8), 24));
      w[3][h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(d, 24));
    }
  } else {
    const __m512i m4 = _mm512_set1_epi32(0xF);
    for (int h = 0; h < 2; ++h) {
      const __m512i d = _mm512_load_si512(r + 64 * h);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const int sh = 8 * (j % 4) + 4 * (j / 4);
        w[j][h] = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(d, sh), m4));
      }
    }
  }
}

TPULLM_TARGET_AVX512 inline __mmask16 col_mask(int ncols, int half) {
  const int n = std::clamp(ncols - 16 * half, 0, 16);
  return static_cast<__mmask16>((1u << n) - 1u);
}

template <WeightFormat F>
TPULLM_TARGET_AVX512 inline void group_zero_avx512(const PackedWeights& w, std::int64_t p,
                                                   std::int64_t g, __m512& z0, __m512& z1) {
  if constexpr (F == WeightFormat::int4_sym) {
    z0 = z1 = _mm512_set1_ps(8.0f);
  } else if constexpr (F == WeightFormat::int4_asym) {
    const std::uint8_t* z = panel_zeros(w, p, g);
    z0 = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(z))));
    z1 = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(z + 16))));
  } else {
    z0 = z1 = _mm512_setzero_ps();
  }
}

TPULLM_TARGET_AVX512 inline void store_rows_avx512(const LinearArgs& a, std::int64_t m0, int R,
                                                   std::int64_t p, __m512 (*t)[2]) {
  const PackedWeights& w = *a.v.w;
  const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
  const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, w.N - p * kPanelCols));
  const __mmask16 k0m = col_mask(nc, 0), k1m = col_mask(nc, 1);
  for (int r = 0; r < R; ++r) {
    float* yr = a.y + (m0 + r) * a.ldy + c0;
    __m512 v0 = t[r][0], v1 = t[r][1];
    if (a.bias) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0m, a.bias + c0));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1m, a.bias + c0 + 16));
    }
    if (a.accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0m, yr));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1m, yr + 16));
    }
    _mm512_mask_storeu_ps(yr, k0m, v0);
    _mm512_mask_storeu_ps(yr + 16, k1m, v1);
  }
}

/// GEMV over R rows of x (R <= 4) for one panel with f32 FMAs (all formats). NA independent
/// accumulator sets along K hide the FMA latency.
template <WeightFormat F, int R>
TPULLM_TARGET_AVX512 void gemv_panel_avx512(const LinearArgs& a, std::int64_t m0, std::int64_t p) {
  constexpr int RG = static_cast<int>(row_group(F));
  constexpr int NA = R == 1 ? 4 : R == 2 ? 2 : 1;
  constexpr int STEP = RG == 1 ? NA : RG; // rows per loop iteration
  const PackedWeights& w = *a.v.w;
  const std::int64_t rb = row_bytes(F);
  const float* xr[R];
  for (int r = 0; r < R; ++r)
    xr[r] = a.x + (m0 + r) * a.ldx - a.v.k0;
  __m512 t[R][2];
  for (int r = 0; r < R; ++r)
    t[r][0] = t[r][1] = _mm512_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m512 acc[NA][R][2];
#pragma GCC unroll 4
    for (int u = 0; u < NA; ++u)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        acc[u][r][0] = acc[u][r][1] = _mm512_setzero_ps();
    const std::uint8_t* row = panel_row(w, p, ks);
    std::int64_t k = ks;
    for (; k + STEP <= ke; k += STEP, row += STEP * rb) {
      for (std::int64_t b = 0; b < STEP * rb; b += 64) // every line of this step, kGemvPf ahead
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + b, _MM_HINT_T0);
      __m512 wv[STEP][2];
#pragma GCC unroll 8
      for (int u = 0; u < STEP; u += RG)
        decode_rows_avx512<F>(row + u * rb, wv + u);
#pragma GCC unroll 8
      for (int u = 0; u < STEP; ++u)
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512 xb = _mm512_set1_ps(xr[r][k + u]);
          acc[u % NA][r][0] = _mm512_fmadd_ps(xb, wv[u][0], acc[u % NA][r][0]);
          acc[u % NA][r][1] = _mm512_fmadd_ps(xb, wv[u][1], acc[u % NA][r][1]);
        }
    }
    if constexpr (RG == 1) {
      for (; k < ke; ++k, row += rb) {
        __m512 wv[1][2];
        decode_rows_avx512<F>(row, wv);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512 xb = _mm512_set1_ps(xr[r][k]);
          acc[0][r][0] = _mm512_fmadd_ps(xb, wv[0][0], acc[0][r][0]);
          acc[0][r][1] = _mm512_fmadd_ps(xb, wv[0][1], acc[0][r][1]);
        }
      }
    }
#pragma GCC unroll 4
    for (int u = 1; u < NA; ++u)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        acc[0][r][0] = _mm512_add_ps(acc[0][r][0], acc[u][r][0]);
        acc[0][r][1] = _mm512_add_ps(acc[0][r][1], acc[u][r][1]);
      }
    if constexpr (is_quantized(F)) {
      const std::int64_t g = ks / w.group_rows();
      const float* s = panel_scales(w, p, g);
      const __m512 s0 = _mm512_load_ps(s), s1 = _mm512_load_ps(s + 16);
      __m512 z0, z1;
      group_zero_avx512<F>(w, p, g, z0, z1);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 xs = _mm512_set1_ps(a.xsum[(m0 + r) * a.xsum_ld + gi]);
        t[r][0] = _mm512_fmadd_ps(s0, _mm512_fnmadd_ps(z0, xs, acc[0][r][0]), t[r][0]);
        t[r][1] = _mm512_fmadd_ps(s1, _mm512_fnmadd_ps(z1, xs, acc[0][r][1]), t[r][1]);
      }
    } else {
      for (int r = 0; r < R; ++r) {
        t[r][0] = _mm512_add_ps(t[r][0], acc[0][r][0]);
        t[r][1] = _mm512_add_ps(t[r][1], acc[0][r][1]);
      }
    }
  }
  store_rows_avx512(a, m0, R, p, t);
}

template <WeightFormat F>
TPULLM_TARGET_AVX512 void gemv_avx512(const LinearArgs& a, std::int64_t pa, std::int64_t pb) {
  for (std::int64_t p = pa; p < pb; ++p) {
    std::int64_t m = 0;
    for (; m + 4 <= a.M; m += 4)
      gemv_panel_avx512<F, 4>(a, m, p);
    switch (a.M - m) {
    case 3:
      gemv_panel_avx512<F, 3>(a, m, p);
      break;
    case 2:
      gemv_panel_avx512<F, 2>(a, m, p);
      break;
    case 1:
      gemv_panel_avx512<F, 1>(a, m, p);
      break;
    }
  }
}

#define TPULLM_TARGET_AVX512_VNNI                                                                  \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c,bmi2,"        \
                        "prefer-vector-width=512")))

/// acc += VPDPBUSD(u8 a, s8 b), in place (with the intrinsic GCC 12 copies the accumulator
/// before every instruction).
TPULLM_TARGET_AVX512_VNNI inline __attribute__((always_inline)) void dpbusd(__m512i& acc, __m512i a,
                                                                            __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

/// Sum over the 16 columns of one half after a group: s1 * sum_d 256^-d (A_d - z * S_d).
TPULLM_TARGET_AVX512_VNNI inline __m512 vnni_group_sum(__m512i a0, __m512i a1, __m512i a2, __m512 z,
                                                       const std::int32_t* S) {
  const __m512 f0 =
      _mm512_fnmadd_ps(z, _mm512_set1_ps(static_cast<float>(S[0])), _mm512_cvtepi32_ps(a0));
  const __m512 f1 =
      _mm512_fnmadd_ps(z, _mm512_set1_ps(static_cast<float>(S[1])), _mm512_cvtepi32_ps(a1));
  const __m512 f2 =
      _mm512_fnmadd_ps(z, _mm512_set1_ps(static_cast<float>(S[2])), _mm512_cvtepi32_ps(a2));
  return _mm512_fmadd_ps(f2, _mm512_set1_ps(1.0f / 65536.0f),
                         _mm512_fmadd_ps(f1, _mm512_set1_ps(1.0f / 256.0f), f0));
}

TPULLM_TARGET_AVX512_VNNI inline __m512i bcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/// Single-row VNNI GEMV for one panel with every accumulator a named register: int4 uses 12
/// (3 digits x 2 column halves x low/high nibble rows), int8 12 (3 digits x 2 halves x 2 quads).
template <WeightFormat F>
TPULLM_TARGET_AVX512_VNNI void gemv_panel_vnni_r1(const LinearArgs& a, const XDigits& xd,
                                                  std::int64_t m0, std::int64_t p) {
  const PackedWeights& w = *a.v.w;
  __m512 t0 = _mm512_setzero_ps(), t1 = _mm512_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const std::int8_t* xh = xd.d.data() + (m0 * 3 + 0) * xd.Kv - a.v.k0;
  const std::int8_t* xl = xd.d.data() + (m0 * 3 + 1) * xd.Kv - a.v.k0;
  const std::int8_t* xt = xd.d.data() + (m0 * 3 + 2) * xd.Kv - a.v.k0;
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    const __m512i zero = _mm512_setzero_si512();
    __m512i h0a = zero, h0b = zero, h1a = zero, h1b = zero; // digit h, half 0/1, set a/b
    __m512i l0a = zero, l0b = zero, l1a = zero, l1b = zero;
    __m512i u0a = zero, u0b = zero, u1a = zero, u1b = zero; // digit t
    const std::uint8_t* row = panel_row(w, p, ks);
    std::int64_t k = ks;
    if constexpr (F == WeightFormat::int8) {
      for (; k + 8 <= ke; k += 8, row += 256) {
        for (int b = 0; b < 256; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + b, _MM_HINT_T0);
        const __m512i w0a = _mm512_xor_si512(_mm512_load_si512(row), flip);
        const __m512i w1a = _mm512_xor_si512(_mm512_load_si512(row + 64), flip);
        const __m512i w0b = _mm512_xor_si512(_mm512_load_si512(row + 128), flip);
        const __m512i w1b = _mm512_xor_si512(_mm512_load_si512(row + 192), flip);
        __m512i b = bcast4(xh + k);
        dpbusd(h0a, w0a, b);
        dpbusd(h1a, w1a, b);
        b = bcast4(xl + k);
        dpbusd(l0a, w0a, b);
        dpbusd(l1a, w1a, b);
        b = bcast4(xt + k);
        dpbusd(u0a, w0a, b);
        dpbusd(u1a, w1a, b);
        b = bcast4(xh + k + 4);
        dpbusd(h0b, w0b, b);
        dpbusd(h1b, w1b, b);
        b = bcast4(xl + k + 4);
        dpbusd(l0b, w0b, b);
        dpbusd(l1b, w1b, b);
        b = bcast4(xt + k + 4);
        dpbusd(u0b, w0b, b);
        dpbusd(u1b, w1b, b);
      }
      for (; k < ke; k += 4, row += 128) {
        const __m512i w0 = _mm512_xor_si512(_mm512_load_si512(row), flip);
        const __m512i w1 = _mm512_xor_si512(_mm512_load_si512(row + 64), flip);
        __m512i b = bcast4(xh + k);
        dpbusd(h0a, w0, b);
        dpbusd(h1a, w1, b);
        b = bcast4(xl + k);
        dpbusd(l0a, w0, b);
        dpbusd(l1a, w1, b);
        b = bcast4(xt + k);
        dpbusd(u0a, w0, b);
        dpbusd(u1a, w1, b);
      }
    } else {
      for (; k < ke; k += 8, row += 128) {
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + 64, _MM_HINT_T0);
        const __m512i v0 = _mm512_load_si512(row), v1 = _mm512_load_si512(row + 64);
        const __m512i lo0 = _mm512_and_si512(v0, m4), lo1 = _mm512_and_si512(v1, m4);
        const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi32(v0, 4), m4);
        const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi32(v1, 4), m4);
        __m512i bl = bcast4(xh + k), bh = bcast4(xh + k + 4);
        dpbusd(h0a, lo0, bl);
        dpbusd(h1a, lo1, bl);
        dpbusd(h0b, hi0, bh);
        dpbusd(h1b, hi1, bh);
        bl = bcast4(xl + k);
        bh = bcast4(xl + k + 4);
        dpbusd(l0a, lo0, bl);
        dpbusd(l1a, lo1, bl);
        dpbusd(l0b, hi0, bh);
        dpbusd(l1b, hi1, bh);
        bl = bcast4(xt + k);
        bh = bcast4(xt + k + 4);
        dpbusd(u0a, lo0, bl);
        dpbusd(u1a, lo1, bl);
        dpbusd(u0b, hi0, bh);
        dpbusd(u1b, hi1, bh);
      }
    }
    const std::int64_t g = ks / w.group_rows();
    const float* s = panel_scales(w, p, g);
    __m512 z0, z1;
    if constexpr (F == WeightFormat::int8)
      z0 = z1 = _mm512_set1_ps(128.0f);
    else
      group_zero_avx512<F>(w, p, g, z0, z1);
    const std::int32_t* S = xd.S.data() + (m0 * xd.Gv + gi) * 3;
    const __m512 s1 = _mm512_set1_ps(xd.s1[static_cast<std::size_t>(m0 * xd.Gv + gi)]);
    const __m512 r0 = vnni_group_sum(_mm512_add_epi32(h0a, h0b), _mm512_add_epi32(l0a, l0b),
                                     _mm512_add_epi32(u0a, u0b), z0, S);
    const __m512 r1 = vnni_group_sum(_mm512_add_epi32(h1a, h1b), _mm512_add_epi32(l1a, l1b),
                                     _mm512_add_epi32(u1a, u1b), z1, S);
    t0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(s), s1), r0, t0);
    t1 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(s + 16), s1), r1, t1);
  }
  __m512 t[1][2] = {{t0, t1}};
  store_rows_avx512(a, m0, 1, p, t);
}

/// VNNI GEMV (int8 / int4 only) over R rows for one panel: per weight group, three VPDPBUSD
/// accumulations (one per activation digit) of unsigned weights u (int8: q + 128) by the signed
/// digits; the group's result is s1 * sum_d 256^-d (A_d - z * S_d) * scale.
template <WeightFormat F, int R>
TPULLM_TARGET_AVX512_VNNI void gemv_panel_vnni(const LinearArgs& a, const XDigits& xd,
                                               std::int64_t m0, std::int64_t p) {
  constexpr int RG = static_cast<int>(row_group(F));
  constexpr bool kSplit = R <= 2; // separate lo/hi accumulators to shorten dependency chains
  constexpr int NH = (F == WeightFormat::int8 || !kSplit) ? 1 : 2;
  const PackedWeights& w = *a.v.w;
  __m512 t[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    t[r][0] = t[r][1] = _mm512_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m512i acc[R][3][2][NH];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
      for (int d = 0; d < 3; ++d)
#pragma GCC unroll 4
        for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
          for (int n = 0; n < NH; ++n)
            acc[r][d][h][n] = _mm512_setzero_si512();
    const std::uint8_t* row = panel_row(w, p, ks);
    const std::int8_t* xdr[R][3];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int d = 0; d < 3; ++d)
        xdr[r][d] = xd.d.data() + ((m0 + r) * 3 + d) * xd.Kv - a.v.k0;
    for (std::int64_t k = ks; k < ke; k += RG, row += 128) {
      _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(row) + kGemvPf + 64, _MM_HINT_T0);
      __m512i wl[2], wh[2];
#pragma GCC unroll 4
      for (int h = 0; h < 2; ++h) {
        const __m512i v = _mm512_load_si512(row + 64 * h);
        if constexpr (F == WeightFormat::int8) {
          wl[h] = _mm512_xor_si512(v, flip);
          wh[h] = wl[h];
        } else {
          wl[h] = _mm512_and_si512(v, m4);
          wh[h] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
        for (int d = 0; d < 3; ++d) {
          std::int32_t xl;
          std::memcpy(&xl, xdr[r][d] + k, 4);
          const __m512i bl = _mm512_set1_epi32(xl);
          if constexpr (F == WeightFormat::int8) {
#pragma GCC unroll 4
            for (int h = 0; h < 2; ++h)
              dpbusd(acc[r][d][h][0], wl[h], bl);
          } else {
            std::int32_t xh;
            std::memcpy(&xh, xdr[r][d] + k + 4, 4);
            const __m512i bh = _mm512_set1_epi32(xh);
#pragma GCC unroll 4
            for (int h = 0; h < 2; ++h) {
              dpbusd(acc[r][d][h][0], wl[h], bl);
              dpbusd(acc[r][d][h][NH - 1], wh[h], bh);
            }
          }
        }
    }
    const std::int64_t g = ks / w.group_rows();
    const float* s = panel_scales(w, p, g);
    __m512 z[2];
    if constexpr (F == WeightFormat::int8)
      z[0] = z[1] = _mm512_set1_ps(128.0f);
    else
      group_zero_avx512<F>(w, p, g, z[0], z[1]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::int32_t* S = xd.S.data() + ((m0 + r) * xd.Gv + gi) * 3;
      const float s1 = xd.s1[static_cast<std::size_t>((m0 + r) * xd.Gv + gi)];
#pragma GCC unroll 4
      for (int h = 0; h < 2; ++h) {
        __m512 f[3];
#pragma GCC unroll 4
        for (int d = 0; d < 3; ++d) {
          __m512i ai = acc[r][d][h][0];
          if constexpr (NH == 2)
            ai = _mm512_add_epi32(ai, acc[r][d][h][1]);
          f[d] = _mm512_fnmadd_ps(z[h], _mm512_set1_ps(static_cast<float>(S[d])),
                                  _mm512_cvtepi32_ps(ai));
        }
        const __m512 sum =
            _mm512_fmadd_ps(f[2], _mm512_set1_ps(1.0f / 65536.0f),
                            _mm512_fmadd_ps(f[1], _mm512_set1_ps(1.0f / 256.0f), f[0]));
        t[r][h] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(s + 16 * h), _mm512_set1_ps(s1)),
                                  sum, t[r][h]);
      }
    }
  }
  store_rows_avx512(a, m0, R, p, t);
}

template <WeightFormat F>
TPULLM_TARGET_AVX512_VNNI void gemv_vnni(const LinearArgs& a, const XDigits& xd, std::int64_t pa,
                                         std::int64_t pb) {
  for (std::int64_t p = pa; p < pb; ++p) {
    std::int64_t m = 0;
    for (; m + 2 <= a.M; m += 2)
      gemv_panel_vnni<F, 2>(a, xd, m, p);
    if (m < a.M)
      gemv_panel_vnni_r1<F>(a, xd, m, p);
  }
}

template <WeightFormat F>
TPULLM_TARGET_AVX512 void decode_block_avx512(const PackedWeights& w, std::int64_t p,
                                              std::int64_t kb, std::int64_t kc, float* out) {
  constexpr int RG = static_cast<int>(row_group(F));
  const std::int64_t rb = row_bytes(F);
  const std::uint8_t* row = panel_row(w, p, kb);
  std::int64_t k = 0;
  while (k < kc) {
    std::int64_t ke = kc;
    __m512 s0 = _mm512_set1_ps(1.0f), s1 = s0, z0 = _mm512_setzero_ps(), z1 = z0;
    if constexpr (is_quantized(F)) {
      const std::int64_t g = (kb + k) / w.group_rows();
      ke = std::min(kc, (g + 1) * w.group_rows() - kb);
      const float* s = panel_scales(w, p, g);
      s0 = _mm512_load_ps(s);
      s1 = _mm512_load_ps(s + 16);
      group_zero_avx512<F>(w, p, g, z0, z1);
    }
    for (; k < ke; k += RG, row += RG * rb) {
      __m512 wv[RG][2];
      decode_rows_avx512<F>(row, wv);
#pragma GCC unroll 8
      for (int j = 0; j < RG; ++j) {
        if constexpr (is_quantized(F)) {
          wv[j][0] = _mm512_mul_ps(_mm512_sub_ps(wv[j][0], z0), s0);
          wv[j][1] = _mm512_mul_ps(_mm512_sub_ps(wv[j][1], z1), s1);
        }
        _mm512_store_ps(out + (k + j) * 32, wv[j][0]);
        _mm512_store_ps(out + (k + j) * 32 + 16, wv[j][1]);
      }
    }
  }
}

/// MR x 32 micro-kernel: C[MR, ncols] (=|+=) Ap[kc][MR] · B[kc][32].
template <int MR>
TPULLM_TARGET_AVX512 void micro_avx512(const float* ap, const float* b, std::int64_t kc, float* c,
                                       std::int64_t ldc, int ncols, TileInit init,
                                       const float* bias) {
  __m512 acc[MR][2];
  const __mmask16 m0 = col_mask(ncols, 0), m1 = col_mask(ncols, 1);
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    switch (init) {
    case TileInit::zero:
      acc[i][0] = acc[i][1] = _mm512_setzero_ps();
      break;
    case TileInit::bias:
      acc[i][0] = _mm512_maskz_loadu_ps(m0, bias);
      acc[i][1] = _mm512_maskz_loadu_ps(m1, bias + 16);
      break;
    case TileInit::load:
      acc[i][0] = _mm512_maskz_loadu_ps(m0, c + i * ldc);
      acc[i][1] = _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
      break;
    }
  }
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + 32 * k), b1 = _mm512_load_ps(b + 32 * k + 16);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(ap[k * MR + i]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
    _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
  }
}

// ------------------------------------------------------------------------------------------
// AVX2 path
// ------------------------------------------------------------------------------------------

/// Raw row group -> w[j][0..3] (row j; columns 0-7, 8-15, 16-23, 24-31).
template <WeightFormat F>
TPULLM_TARGET_AVX2 inline void decode_rows_avx2(const std::uint8_t* r, __m256 (*w)[4]) {
  if constexpr (F == WeightFormat::f32) {
    for (int i = 0; i < 4; ++i)
      w[0][i] = _mm256_load_ps(reinterpret_cast<const float*>(r) + 8 * i);
  } else if constexpr (F == WeightFormat::bf16) {
    const __m256i d0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(r));
    const __m256i d1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32));
    const __m256i hm = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    w[0][0] = _mm256_castsi256_ps(_mm256_slli_epi32(d0, 16));
    w[0][1] = _mm256_castsi256_ps(_mm256_slli_epi32(d1, 16));
    w[0][2] = _mm256_castsi256_ps(_mm256_and_si256(d0, hm));
    w[0][3] = _mm256_castsi256_ps(_mm256_and_si256(d1, hm));
  } else if constexpr (F == WeightFormat::f16) {
    for (int i = 0; i < 4; ++i)
      w[0][i] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(r + 16 * i)));
  } else if constexpr (F == WeightFormat::int8) {
    for (int i = 0; i < 4; ++i) {
      const __m256i d = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32 * i));
      w[0][i] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 24), 24));
      w[1][i] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 16), 24));
      w[2][i] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 8), 24));
      w[3][i] = _mm256_cvtepi32_ps(_mm256_srai_epi32(d, 24));
    }
  } else {
    const __m256i m4 = _mm256_set1_epi32(0xF);
    for (int i = 0; i < 4; ++i) {
      const __m256i d = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32 * i));
      for (int j = 0; j < 8; ++j) {
        const int sh = 8 * (j % 4) + 4 * (j / 4);
        w[j][i] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(d, sh), m4));
      }
    }
  }
}

template <WeightFormat F>
TPULLM_TARGET_AVX2 inline void group_zero_avx2(const PackedWeights& w, std::int64_t p,
                                               std::int64_t g, __m256* z) {
  if constexpr (F == WeightFormat::int4_sym) {
    for (int i = 0; i < 4; ++i)
      z[i] = _mm256_set1_ps(8.0f);
  } else if constexpr (F == WeightFormat::int4_asym) {
    const std::uint8_t* zp = panel_zeros(w, p, g);
    for (int i = 0; i < 4; ++i)
      z[i] = _mm256_cvtepi32_ps(
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zp + 8 * i))));
  } else {
    for (int i = 0; i < 4; ++i)
      z[i] = _mm256_setzero_ps();
  }
}

TPULLM_TARGET_AVX2 inline __m256i col_mask_avx2(int ncols, int part) {
  const int n = std::clamp(ncols - 8 * part, 0, 8);
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/// GEMV over R <= 2 rows of x for one panel, f32 FMAs on decoded weights.
template <WeightFormat F, int R>
TPULLM_TARGET_AVX2 void gemv_panel_avx2(const LinearArgs& a, std::int64_t m0, std::int64_t p) {
  constexpr int RG = static_cast<int>(row_group(F));
  constexpr int NA = R == 1 ? 2 : 1;
  const PackedWeights& w = *a.v.w;
  const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
  const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, w.N - p * kPanelCols));
  const std::int64_t rb = row_bytes(F);
  __m256 t[R][4];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i)
      t[r][i] = _mm256_setzero_ps();
  const std::int64_t seg = segment_rows(a.v);
  std::int64_t gi = 0;
  for (std::int64_t ks = a.v.k0; ks < a.v.k1; ks += seg, ++gi) {
    const std::int64_t ke = std::min(a.v.k1, ks + seg);
    __m256 acc[NA][R][4];
    for (int u = 0; u < NA; ++u)
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 4; ++i)
          acc[u][r][i] = _mm256_setzero_ps();
    const std::uint8_t* row = panel_row(w, p, ks);
    for (std::int64_t k = ks; k < ke; k += RG, row += RG * rb) {
      __m256 wv[RG][4];
      decode_rows_avx2<F>(row, wv);
      for (int j = 0; j < RG; ++j)
        for (int r = 0; r < R; ++r) {
          const __m256 xb = _mm256_set1_ps(a.x[(m0 + r) * a.ldx + k + j - a.v.k0]);
          const int u = static_cast<int>((k + j) % NA);
          for (int i = 0; i < 4; ++i)
            acc[u][r][i] = _mm256_fmadd_ps(xb, wv[j][i], acc[u][r][i]);
        }
    }
    for (int u = 1; u < NA; ++u)
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 4; ++i)
          acc[0][r][i] = _mm256_add_ps(acc[0][r][i], acc[u][r][i]);
    if constexpr (is_quantized(F)) {
      const std::int64_t g = ks / w.group_rows();
      const float* s = panel_scales(w, p, g);
      __m256 z[4];
      group_zero_avx2<F>(w, p, g, z);
      for (int r = 0; r < R; ++r) {
        const __m256 xs = _mm256_set1_ps(a.xsum[(m0 + r) * a.xsum_ld + gi]);
        for (int i = 0; i < 4; ++i)
          t[r][i] = _mm256_fmadd_ps(_mm256_load_ps(s + 8 * i),
                                    _mm256_fnmadd_ps(z[i], xs, acc[0][r][i]), t[r][i]);
      }
    } else {
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 4; ++i)
          t[r][i] = _mm256_add_ps(t[r][i], acc[0][r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* yr = a.y + (m0 + r) * a.ldy + c0;
    for (int i = 0; i < 4; ++i) {
      const __m256i mk = col_mask_avx2(nc, i);
      __m256 v = t[r][i];
      if (a.bias)
        v = _mm256_add_ps(v, _mm256_maskload_ps(a.bias + c0 + 8 * i, mk));
      if (a.accumulate)
        v = _mm256_add_ps(v, _mm256_maskload_ps(yr + 8 * i, mk));
      _mm256_maskstore_ps(yr + 8 * i, mk, v);
    }
  }
}

template <WeightFormat F>
TPULLM_TARGET_AVX2 void gemv_avx2(const LinearArgs& a, std::int64_t pa, std::int64_t pb) {
  for (std::int64_t p = pa; p < pb; ++p) {
    std::int64_t m = 0;
    for (; m + 2 <= a.M; m += 2)
      gemv_panel_avx2<F, 2>(a, m, p);
    if (m < a.M)
      gemv_panel_avx2<F, 1>(a, m, p);
  }
}

template <WeightFormat F>
TPULLM_TARGET_AVX2 void decode_block_avx2(const PackedWeights& w, std::int64_t p, std::int64_t kb,
                                          std::int64_t kc, float* out) {
  constexpr int RG = static_cast<int>(row_group(F));
  const std::int64_t rb = row_bytes(F);
  const std::uint8_t* row = panel_row(w, p, kb);
  std::int64_t k = 0;
  while (k < kc) {
    std::int64_t ke = kc;
    __m256 s[4], z[4];
    for (int i = 0; i < 4; ++i) {
      s[i] = _mm256_set1_ps(1.0f);
      z[i] = _mm256_setzero_ps();
    }
    if constexpr (is_quantized(F)) {
      const std::int64_t g = (kb + k) / w.group_rows();
      ke = std::min(kc, (g + 1) * w.group_rows() - kb);
      const float* sp = panel_scales(w, p, g);
      for (int i = 0; i < 4; ++i)
        s[i] = _mm256_load_ps(sp + 8 * i);
      group_zero_avx2<F>(w, p, g, z);
    }
    for (; k < ke; k += RG, row += RG * rb) {
      __m256 wv[RG][4];
      decode_rows_avx2<F>(row, wv);
      for (int j = 0; j < RG; ++j)
        for (int i = 0; i < 4; ++i) {
          if constexpr (is_quantized(F))
            wv[j][i] = _mm256_mul_ps(_mm256_sub_ps(wv[j][i], z[i]), s[i]);
          _mm256_store_ps(out + (k + j) * 32 + 8 * i, wv[j][i]);
        }
    }
  }
}

/// MR x 16 micro-kernel on half `h` of a 32-column B block.
template <int MR>
TPULLM_TARGET_AVX2 void micro_avx2_half(const float* ap, const float* b, std::int64_t kc, float* c,
                                        std::int64_t ldc, int ncols, TileInit init,
                                        const float* bias) {
  __m256 acc[MR][2];
  const __m256i m0 = col_mask_avx2(ncols, 0), m1 = col_mask_avx2(ncols, 1);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    switch (init) {
    case TileInit::zero:
      acc[i][0] = acc[i][1] = _mm256_setzero_ps();
      break;
    case TileInit::bias:
      acc[i][0] = _mm256_maskload_ps(bias, m0);
      acc[i][1] = _mm256_maskload_ps(bias + 8, m1);
      break;
    case TileInit::load:
      acc[i][0] = _mm256_maskload_ps(c + i * ldc, m0);
      acc[i][1] = _mm256_maskload_ps(c + i * ldc + 8, m1);
      break;
    }
  }
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b + 32 * k), b1 = _mm256_load_ps(b + 32 * k + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(ap + k * MR + i);
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    _mm256_maskstore_ps(c + i * ldc, m0, acc[i][0]);
    _mm256_maskstore_ps(c + i * ldc + 8, m1, acc[i][1]);
  }
}

template <int MR>
TPULLM_TARGET_AVX2 void micro_avx2(const float* ap, const float* b, std::int64_t kc, float* c,
                                   std::int64_t ldc, int ncols, TileInit init, const float* bias) {
  micro_avx2_half<MR>(ap, b, kc, c, ldc, ncols, init, bias);
  if (ncols > 16)
    micro_avx2_half<MR>(ap, b + 16, kc, c + 16, ldc, ncols - 16, init, bias ? bias + 16 : nullptr);
}

#pragma GCC diagnostic pop

// ------------------------------------------------------------------------------------------
// Drivers
// ------------------------------------------------------------------------------------------

using MicroFn = void (*)(const float*, const float*, std::int64_t, float*, std::int64_t, int,
                         TileInit, const float*);

template <std::size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> avx512_micro_table(std::index_sequence<I...>) {
  return {{&micro_avx512<static_cast<int>(I) + 1>...}};
}
template <std::size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> avx2_micro_table(std::index_sequence<I...>) {
  return {{&micro_avx2<static_cast<int>(I) + 1>...}};
}

inline int micro_rows(Isa isa) {
  switch (isa) {
  case Isa::portable:
    return 4;
  case Isa::avx2:
    return 6;
  case Isa::avx512:
    return 14;
  }
  return 4;
}

/// GEMM for rows [ma, mb) and panels [pa, pb) on the calling thread.
template <WeightFormat F>
void gemm_range(const LinearArgs& a, Isa isa, std::int64_t ma, std::int64_t mb, std::int64_t pa,
                std::int64_t pb) {
  const PackedWeights& w = *a.v.w;
  const int MR = micro_rows(isa);
  static constexpr auto t512 = avx512_micro_table(std::make_index_sequence<14>{});
  static constexpr auto t2 = avx2_micro_table(std::make_index_sequence<6>{});
  const std::int64_t kv = a.v.k1 - a.v.k0;
  const std::int64_t kc_max = std::min<std::int64_t>(kKc, kv);
  const std::int64_t mc_max = std::min<std::int64_t>(kMcMax, mb - ma);
  const std::int64_t mc_round = (mc_max + MR - 1) / MR * MR;
  // x rows [m0, m0 + mc) packed once for the whole K range: block kb at ap + (kb - k0) * mc_round
  AlignedArray<float> ap(static_cast<std::size_t>(mc_round * kv));
  AlignedArray<float> bt(static_cast<std::size_t>(kc_max * kPanelCols));
  float bias_pad[32];
  for (std::int64_t m0 = ma; m0 < mb; m0 += mc_max) {
    const std::int64_t mc = std::min(mc_max, mb - m0);
    for (std::int64_t kb = a.v.k0; kb < a.v.k1; kb += kc_max)
      pack_a(a.x, a.ldx, m0, mc, kb - a.v.k0, std::min(kc_max, a.v.k1 - kb), MR,
             ap.data() + (kb - a.v.k0) * mc_round);
    // kNb panels at a time so their [mc, kNb * 32] C block stays in L2 across the K blocks
    for (std::int64_t pn = pa; pn < pb; pn += kNb) {
      const std::int64_t pe = std::min(pb, pn + kNb);
      for (std::int64_t kb = a.v.k0; kb < a.v.k1; kb += kc_max) {
        const std::int64_t kc = std::min(kc_max, a.v.k1 - kb);
        const float* apk = ap.data() + (kb - a.v.k0) * mc_round;
        for (std::int64_t p = pn; p < pe; ++p) {
          const float* b = nullptr;
          if constexpr (F == WeightFormat::f32) {
            b = reinterpret_cast<const float*>(panel_row(w, p, kb));
          } else {
            switch (isa) {
            case Isa::portable:
              decode_block_portable<F>(w, p, kb, kc, bt.data());
              break;
            case Isa::avx2:
              decode_block_avx2<F>(w, p, kb, kc, bt.data());
              break;
            case Isa::avx512:
              decode_block_avx512<F>(w, p, kb, kc, bt.data());
              break;
            }
            b = bt.data();
          }
          // the next weight block this thread will touch, prefetched into L2 strip by strip
          const std::uint8_t* next = nullptr;
          std::int64_t next_bytes = 0;
          if (p + 1 < pe) {
            next = panel_row(w, p + 1, kb);
            next_bytes = kc * row_bytes(F);
          } else if (kb + kc_max < a.v.k1) {
            next = panel_row(w, pn, kb + kc_max);
            next_bytes = std::min(kc_max, a.v.k1 - kb - kc_max) * row_bytes(F);
          }
          const std::int64_t strips = (mc + MR - 1) / MR;
          const std::int64_t pf_step = (next_bytes / 64 + strips - 1) / strips * 64;
          const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
          const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, w.N - p * kPanelCols));
          TileInit init = TileInit::load;
          if (kb == a.v.k0 && !a.accumulate) {
            init = a.bias ? TileInit::bias : TileInit::zero;
            if (a.bias) {
              std::fill(bias_pad, bias_pad + 32, 0.0f);
              std::copy(a.bias + c0, a.bias + c0 + nc, bias_pad);
            }
          }
          std::int64_t pf = 0;
          for (std::int64_t s = 0; s < mc; s += MR) {
            for (std::int64_t e = pf + pf_step; next && pf < std::min(e, next_bytes); pf += 64)
              _mm_prefetch(reinterpret_cast<const char*>(next + pf), _MM_HINT_T1);
            const int rows = static_cast<int>(std::min<std::int64_t>(MR, mc - s));
            float* c = a.y + (m0 + s) * a.ldy + c0;
            const float* as = apk + s * kc;
            switch (isa) {
            case Isa::portable:
              micro_portable(as, b, kc, rows, c, a.ldy, nc, init, bias_pad, rows);
              break;
            case Isa::avx2:
              t2[static_cast<std::size_t>(rows - 1)](as, b, kc, c, a.ldy, nc, init, bias_pad);
              break;
            case Isa::avx512:
              t512[static_cast<std::size_t>(rows - 1)](as, b, kc, c, a.ldy, nc, init, bias_pad);
              break;
            }
          }
        }
      }
    }
  }
}

template <WeightFormat F>
void gemv_range(const LinearArgs& a, Isa isa, std::int64_t pa, std::int64_t pb) {
  switch (isa) {
  case Isa::portable:
    gemv_portable<F>(a, pa, pb);
    break;
  case Isa::avx2:
    gemv_avx2<F>(a, pa, pb);
    break;
  case Isa::avx512:
    if constexpr (is_quantized(F)) {
      if (a.xd) {
        gemv_vnni<F>(a, *a.xd, pa, pb);
        break;
      }
    }
    gemv_avx512<F>(a, pa, pb);
    break;
  }
}

template <WeightFormat F>
void run_linear(const LinearArgs& a, const CoreSplit& split) {
  const Isa isa = active_isa();
  const std::int64_t P = a.v.p1 - a.v.p0;
  if (a.M <= kGemvMaxRows) {
    switch (split.dim) {
    case SplitDim::none:
    case SplitDim::rows: // M <= 4 rows are not worth splitting: run on the calling thread
      gemv_range<F>(a, isa, a.v.p0, a.v.p1);
      return;
    case SplitDim::cols:
      parallel_for(split, P, 1, [&](std::int64_t b, std::int64_t e) {
        gemv_range<F>(a, isa, a.v.p0 + b, a.v.p0 + e);
      });
      return;
    case SplitDim::heads:
      break;
    }
    throw std::invalid_argument("linear: CoreSplit over heads is not meaningful for a matmul");
  }
  switch (split.dim) {
  case SplitDim::none:
    gemm_range<F>(a, isa, 0, a.M, a.v.p0, a.v.p1);
    return;
  case SplitDim::rows:
    parallel_for(split, a.M, micro_rows(isa), [&](std::int64_t b, std::int64_t e) {
      gemm_range<F>(a, isa, b, e, a.v.p0, a.v.p1);
    });
    return;
  case SplitDim::cols:
    parallel_for(split, P, 1, [&](std::int64_t b, std::int64_t e) {
      gemm_range<F>(a, isa, 0, a.M, a.v.p0 + b, a.v.p0 + e);
    });
    return;
  case SplitDim::heads:
    break;
  }
  throw std::invalid_argument("linear: CoreSplit over heads is not meaningful for a matmul");
}

/// Test hook: when true, int8 / int4 GEMVs on AVX-512 use the f32-FMA dequantization path even if
/// the CPU has AVX512_VNNI (so tests cover that path on VNNI machines).
inline bool& vnni_disabled() {
  static bool disabled = false;
  return disabled;
}

/// Runs a linear over a weight view. For quantized GEMVs it prepares the per-group x sums (f32
/// FMA paths) or the digit-decomposed x (VNNI path, AVX-512 with AVX512_VNNI).
inline void linear_view(LinearArgs a, const CoreSplit& split) {
  const PackedWeights& w = *a.v.w;
  if (a.accumulate && a.bias)
    throw std::invalid_argument("linear: accumulate together with bias is not supported");
  std::vector<float> xsum;
  XDigits xd;
  if (is_quantized(w.format) && a.M <= kGemvMaxRows) {
    const std::int64_t seg = segment_rows(a.v), Kv = a.v.k1 - a.v.k0;
    if (active_isa() == Isa::avx512 && cpu_features().avx512_vnni && !vnni_disabled()) {
      make_x_digits(a.x, a.ldx, a.M, Kv, seg, xd);
      a.xd = &xd;
    } else {
      const std::int64_t G = (Kv + seg - 1) / seg;
      xsum.assign(static_cast<std::size_t>(a.M * G), 0.0f);
      for (std::int64_t m = 0; m < a.M; ++m)
        for (std::int64_t g = 0; g < G; ++g) {
          float s = 0;
          const float* xr = a.x + m * a.ldx;
          for (std::int64_t k = g * seg; k < std::min(Kv, (g + 1) * seg); ++k)
            s += xr[k];
          xsum[static_cast<std::size_t>(m * G + g)] = s;
        }
      a.xsum = xsum.data();
      a.xsum_ld = G;
    }
  }
  switch (w.format) {
  case WeightFormat::f32:
    run_linear<WeightFormat::f32>(a, split);
    return;
  case WeightFormat::bf16:
    run_linear<WeightFormat::bf16>(a, split);
    return;
  case WeightFormat::f16:
    run_linear<WeightFormat::f16>(a, split);
    return;
  case WeightFormat::int8:
    run_linear<WeightFormat::int8>(a, split);
    return;
  case WeightFormat::int4_sym:
    run_linear<WeightFormat::int4_sym>(a, split);
    return;
  case WeightFormat::int4_asym:
    run_linear<WeightFormat::int4_asym>(a, split);
    return;
  }
}

/// x: [M, K] -> the x the kernels read: columns in packed row order (act-order k_perm) and
/// zero-padded to stored_rows(). Returns x itself when neither applies, else fills `buf`.
inline const float* prepare_x(const float* x, std::int64_t M, const PackedWeights& w,
                              std::vector<float>& buf) {
  const std::int64_t K = w.K, Kp = w.stored_rows();
  if (w.k_perm.empty() && Kp == K)
    return x;
  buf.assign(static_cast<std::size_t>(M * Kp), 0.0f);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t j = 0; j < K; ++j)
      buf[static_cast<std::size_t>(m * Kp + j)] =
          x[m * K + (w.k_perm.empty() ? j : w.k_perm[static_cast<std::size_t>(j)])];
  return buf.data();
}

inline void check_weights(const char* what, const PackedWeights& w) {
  const std::int64_t rb = row_bytes(w.format);
  if (w.K <= 0 || w.N <= 0 ||
      static_cast<std::int64_t>(w.data.size()) != w.panels() * w.stored_rows() * rb)
    throw std::invalid_argument(std::string(what) + ": packed weights are empty or inconsistent");
  if (is_quantized(w.format) &&
      (w.group_size <= 0 || w.K % w.group_size != 0 ||
       static_cast<std::int64_t>(w.scales.size()) != w.panels() * w.groups() * kPanelCols))
    throw std::invalid_argument(std::string(what) + ": bad group_size / scales for " +
                                std::string(format_name(w.format)));
}

} // namespace detail

/// y = x · W + bias. x: [M, K] row-major f32; w: packed W [K, N]; bias: [N] or empty;
/// y: [M, N] row-major f32 (fully overwritten). `split` divides N (SplitDim::cols, by 32-column
/// panels) or M (SplitDim::rows, GEMM only; M <= 4 runs on one thread) across OpenMP threads.
/// Throws std::invalid_argument on shape mismatch or SplitDim::heads.
inline void linear(std::span<const float> x, const PackedWeights& w, std::span<const float> bias,
                   std::span<float> y, LinearShape s, CoreSplit split = {}) {
  detail::check_weights("linear", w);
  if (s.M <= 0 || s.K != w.K || s.N != w.N)
    throw std::invalid_argument("linear: shape [M=" + std::to_string(s.M) +
                                ", K=" + std::to_string(s.K) + ", N=" + std::to_string(s.N) +
                                "] does not match weights [K=" + std::to_string(w.K) +
                                ", N=" + std::to_string(w.N) + "] (M must be > 0)");
  if (static_cast<std::int64_t>(x.size()) < s.M * s.K ||
      static_cast<std::int64_t>(y.size()) < s.M * s.N)
    throw std::invalid_argument("linear: x or y span is smaller than [M, K] / [M, N]");
  if (!bias.empty() && static_cast<std::int64_t>(bias.size()) != s.N)
    throw std::invalid_argument("linear: bias has " + std::to_string(bias.size()) +
                                " elements, N=" + std::to_string(s.N));
  std::vector<float> xp;
  const float* xptr = detail::prepare_x(x.data(), s.M, w, xp);
  detail::LinearArgs a;
  a.x = xptr;
  a.ldx = w.stored_rows();
  a.v = {&w, 0, w.stored_rows(), 0, w.panels()};
  a.bias = bias.empty() ? nullptr : bias.data();
  a.y = y.data();
  a.ldy = s.N;
  a.M = s.M;
  detail::linear_view(a, split);
}

} // namespace tpullm::kernels
