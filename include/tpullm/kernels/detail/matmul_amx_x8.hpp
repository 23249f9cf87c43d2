#pragma once
/// AMX-INT8 linear on x rounded to int8 per weight group (XPrecision::int8, `--act-quant
/// dynamic`), on the tile unit only (x86, where cpu_features().amx). Nothing is staged in scalar
/// code:
///   - A tiles (16 rows x one group's k step) load straight from the VNNI kernels' digits
///     (XDigits, nd = 1: [M][Kv] int8, row stride Kv); a last row tile of fewer than 16 rows is
///     copied once into a zero-padded block;
///   - B tiles load straight from the panel for the byte formats (int8 signed: TDPBSSD;
///     int8_asym / int8_min codes: TDPBSUD), each column half's quads at row stride 128; int4 and
///     int6 panels are unpacked once per panel and row block into the same quad layout (AVX-512);
///   - one C tile per column half and group; its 16 x 16 int32 sums are scaled in AVX-512 with
///     the VNNI GEMV's f32 steps (vnni_group_sum at one digit, then t = fma(scale * s1, sum, t),
///     the mins by fnmadd), so a row's result is the VNNI kernels' bit for bit wherever their
///     int32 group sums convert to f32 exactly (groups of at most 64 rows; int8 weights are
///     signed here and offset by 128 there, which is exact below 2^24).
/// Weight groups: 4 to 64 rows (a multiple of 4; one k step) or a multiple of 64 (k steps of 64);
/// the view's rows a multiple of the group.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tpullm/kernels/amx_tiles.hpp"
#include "tpullm/kernels/detail/matmul_amx.hpp"
#include "tpullm/kernels/detail/matmul_common.hpp"
#include "tpullm/kernels/detail/matmul_x_digits.hpp"
#if TPULLM_X86
#include "tpullm/kernels/detail/matmul_avx512_common.hpp"
#include "tpullm/kernels/detail/matmul_gemv_vnni.hpp"
#endif

namespace tpullm::kernels::detail {

/// Fewest rows of x the x8 path takes: a short prompt's 16 rows and up. At 16 rows the whole-model
/// prefill of 0.5B Q4_0 / Q8_0 / Q4_K_M / Q6_K files ran 0.95-1.6x the VNNI kernels' rate once
/// the next panel was prefetched (without it, 0.86-0.90 on three of them: docs/kernels.md round
/// 16); at 8 rows the kernel alone took 1.2-1.9x their time (its tile work does not shrink with M).
inline constexpr std::int64_t kAmxX8MinRows = 16;
/// Rows of x per block of the x8 path (their digits and the unpacked panel stay in L2).
inline constexpr std::int64_t kAmxX8Mc = 64;

/// Calls of the x8 path so far (tests prove with it that the path runs).
inline std::atomic<std::int64_t>& amx_x8_calls() {
  static std::atomic<std::int64_t> n{0};
  return n;
}

/// Whether a view's grouping fits the x8 path: groups of 4..64 rows (multiple of 4) or a
/// multiple of 64, the view a whole number of groups.
inline bool amx_x8_grouping_ok(std::int64_t seg, std::int64_t Kv) {
  return seg >= 4 && seg % 4 == 0 && (seg <= 64 || seg % 64 == 0) && Kv % seg == 0;
}

/// Whether the x8 path takes a linear of format `f` over M rows with digits `xd` (null: none):
/// the tile unit is the active ISA (not the emulator), x has one digit, M >= kAmxX8MinRows and
/// the grouping fits; up to kDecodeArithmeticRows rows (a verify call) only for groups of at most
/// 64 rows, where the result is the VNNI GEMV's bit for bit.
inline bool amx_x8_applies(WeightFormat f, std::int64_t M, const XDigits* xd) {
  if (f == WeightFormat::bf16 || !amx_format(f) || xd == nullptr || xd->nd != 1 ||
      M < kAmxX8MinRows || amx::emulation_forced() || active_isa() != Isa::amx)
    return false;
  if (!amx_x8_grouping_ok(xd->seg, xd->Kv))
    return false;
  return M > kDecodeArithmeticRows || xd->seg <= 64;
}

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// Per-thread scratch of the x8 path.
struct AmxX8Scratch {
  std::vector<std::uint8_t> bq;  ///< one panel's weights as quads: [Kv / 4][128] (int4, int6)
  std::vector<std::int8_t> apad; ///< a last row tile's digits, zero padded: [16][Kv]
  std::vector<float> s1, Sf, xs; ///< per row tile, group and row: [tiles][G][16]
  std::vector<std::int32_t> ci;  ///< four C tiles: [4][16][16]
};
inline AmxX8Scratch& amx_x8_scratch() {
  thread_local AmxX8Scratch s;
  return s;
}

/// Unpacks rows [0, Kv) of panel p (from view row k0) of an int4 / int6 format into quads:
/// quad q (rows 4q..4q+3) at dst + 128 q, column half h at + 64 h, byte 4c + j = row 4q + j,
/// column 16h + c, unsigned.
template <WeightFormat F>
TPULLM_TARGET_AMX_AVX512 void amx_x8_unpack(const PackedWeights& w, std::int64_t p, std::int64_t k0,
                                            std::int64_t Kv, std::uint8_t* dst) {
  const std::uint8_t* src = panel_row(w, p, k0);
  if constexpr (is_six_format(F)) {
    for (std::int64_t k = 0; k < Kv; k += 16, src += 384, dst += 512) {
      __m512i q[4];
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        load_quads6(src, h, q);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j)
          _mm512_storeu_si512(dst + 128 * j + 64 * h, q[j]);
      }
    }
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (std::int64_t k = 0; k < Kv; k += 8, src += 128, dst += 256) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m512i v = _mm512_loadu_si512(src + 64 * h);
        _mm512_storeu_si512(dst + 64 * h, _mm512_and_si512(v, m4));
        _mm512_storeu_si512(dst + 128 + 64 * h, _mm512_and_si512(_mm512_srli_epi32(v, 4), m4));
      }
    }
  }
}

/// One k step (view row kk) into C tile C: A tile 4 + C % 2, B tile 6 + C % 2.
template <WeightFormat F, int H, int C>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void
amx_x8_step(const std::int8_t* ad, std::int64_t lda, const std::uint8_t* b, std::int64_t kk) {
  constexpr int A = 4 + C % 2, B = 6 + C % 2;
  amx::Hw::load<A>(ad + kk, lda);
  amx::Hw::load<B>(b + kk / 4 * 128 + 64 * H, 128);
  if constexpr (F == WeightFormat::int8)
    amx::Hw::dpbssd<C, A, B>();
  else
    amx::Hw::dpbsud<C, A, B>();
}

/// Groups gb and gb + 1 (NB = 2) or gb alone (NB = 1) into C tiles CB and CB + 1: the sum over
/// each group's k steps of A (digits at ad, row stride lda) x B (quads at b, row stride 128,
/// column half H); then into ci + 256 J ([16][16] int32 each).
template <WeightFormat F, int H, int CB, int NB>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void
amx_x8_tiles(const std::int8_t* ad, std::int64_t lda, const std::uint8_t* b, std::int64_t gb,
             std::int64_t seg, int kst, std::int32_t* ci) {
  static_assert((CB == 0 || CB == 2) && (NB == 1 || NB == 2), "C tiles 0-1 or 2-3");
  amx::Hw::zero<CB>();
  if constexpr (NB > 1)
    amx::Hw::zero<CB + 1>();
  for (std::int64_t k = 0; k < seg; k += kst) {
    amx_x8_step<F, H, CB>(ad, lda, b, gb * seg + k);
    if constexpr (NB > 1)
      amx_x8_step<F, H, CB + 1>(ad, lda, b, (gb + 1) * seg + k);
  }
  amx::Hw::store<CB>(ci, 64);
  if constexpr (NB > 1)
    amx::Hw::store<CB + 1>(ci + 256, 64);
}

/// Batch i (groups 2i, 2i + 1) into C tiles 0-1 (i even) or 2-3 (i odd), stored at ci + 512 *
/// (i % 2).
template <WeightFormat F, int H>
TPULLM_TARGET_AMX_AVX512 TPULLM_ALWAYS_INLINE void
amx_x8_batch(const std::int8_t* ad, std::int64_t lda, const std::uint8_t* b, std::int64_t i,
             std::int64_t G, std::int64_t seg, int kst, std::int32_t* ci) {
  const std::int64_t gb = 2 * i;
  std::int32_t* c = ci + 512 * (i % 2);
  if (i % 2 == 0) {
    if (gb + 1 < G)
      amx_x8_tiles<F, H, 0, 2>(ad, lda, b, gb, seg, kst, c);
    else
      amx_x8_tiles<F, H, 0, 1>(ad, lda, b, gb, seg, kst, c);
  } else {
    if (gb + 1 < G)
      amx_x8_tiles<F, H, 2, 2>(ad, lda, b, gb, seg, kst, c);
    else
      amx_x8_tiles<F, H, 2, 1>(ad, lda, b, gb, seg, kst, c);
  }
}

/// One column half H of one 16-row tile over every group of the view, two groups per batch of C
/// tiles, software-pipelined: the tile unit computes batch i + 1 while the vector units scale
/// batch i's sums (the two batches in alternate C tiles and halves of ci). After each group the
/// 16 rows' t += scale * s1 * (C - z S) (and - min * xs), as the VNNI GEMV sums. tt[i][H]
/// receives row i's 16 results.
template <WeightFormat F, int H>
TPULLM_TARGET_AMX_AVX512 void
amx_x8_half(const LinearArgs& a, std::int64_t p, const std::int8_t* ad, std::int64_t lda,
            const std::uint8_t* b, std::int64_t G, std::int64_t seg, int kst, const float* s1,
            const float* Sf, const float* xs, std::int32_t* ci, __m512 (*tt)[2],
            const std::uint8_t* next = nullptr) {
  const PackedWeights& w = *a.v.w;
  const std::int64_t g0 = a.v.k0 / w.group_rows();
  const std::int64_t gbytes = seg * row_bytes(F); // one group of a panel as stored
  __m512 t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    t[i] = _mm512_setzero_ps();
  const std::int64_t batches = (G + 1) / 2;
  amx_x8_batch<F, H>(ad, lda, b, 0, G, seg, kst, ci);
  for (std::int64_t bi = 0; bi < batches; ++bi) {
    if (bi + 1 < batches)
      amx_x8_batch<F, H>(ad, lda, b, bi + 1, G, seg, kst, ci);
    const std::int64_t nb = std::min<std::int64_t>(2, G - 2 * bi);
    // the next panel's same groups on their way from memory while this one computes (the tile
    // loads have no prefetch of their own; a short prompt reads each panel once)
    if (next != nullptr)
      for (std::int64_t o = 2 * bi * gbytes; o < (2 * bi + nb) * gbytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next) + o, _MM_HINT_T0);
    for (std::int64_t j = 0; j < nb; ++j) {
      const std::int64_t g = 2 * bi + j;
      __m512 sc[2], z[2];
      group_scale_avx512(w, p, g0 + g, sc[0], sc[1]);
      if constexpr (F != WeightFormat::int8)
        vnni_zero<F>(w, p, g0 + g, z[0], z[1]);
      [[maybe_unused]] __m512 mn[2];
      if constexpr (has_mins(F))
        group_min_avx512(w, p, g0 + g, mn[0], mn[1]);
      const float* s1g = s1 + g * 16;
      const float* Sg = Sf + g * 16;
      [[maybe_unused]] const float* xg = xs + g * 16;
      const std::int32_t* cj = ci + 512 * (bi % 2) + 256 * j;
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(cj + 16 * i));
        // int8: signed weights here, q + 128 with z = 128 there: the same f32 while exact
        __m512 f = c;
        if constexpr (F != WeightFormat::int8)
          f = _mm512_fnmadd_ps(z[H], _mm512_set1_ps(Sg[i]), c);
        t[i] = _mm512_fmadd_ps(_mm512_mul_ps(sc[H], _mm512_set1_ps(s1g[i])), f, t[i]);
        if constexpr (has_mins(F))
          t[i] = _mm512_fnmadd_ps(mn[H], _mm512_set1_ps(xg[i]), t[i]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    tt[i][H] = t[i];
}

/// The x8 path over rows [ma, mb) and panels [pa, pb) on the calling thread (a.xd: one digit).
template <WeightFormat F>
TPULLM_TARGET_AMX_AVX512 void amx_x8_range(const LinearArgs& a, std::int64_t ma, std::int64_t mb,
                                           std::int64_t pa, std::int64_t pb) {
  if (ma >= mb || pa >= pb)
    return;
  amx_x8_calls().fetch_add(1, std::memory_order_relaxed);
  const XDigits& xd = *a.xd;
  const PackedWeights& w = *a.v.w;
  const std::int64_t Kv = xd.Kv, seg = xd.seg, G = xd.Gv;
  const int kst = static_cast<int>(seg <= 64 ? seg : 64);
  AmxX8Scratch& s = amx_x8_scratch();
  constexpr bool kUnpack = !is_byte_format(F);
  if (kUnpack)
    s.bq.resize(static_cast<std::size_t>(Kv * 32));
  s.ci.resize(4 * 256 + 16); // four C tiles, + room to align to 64 bytes
  std::int32_t* ci = reinterpret_cast<std::int32_t*>(
      (reinterpret_cast<std::uintptr_t>(s.ci.data()) + 63) & ~std::uintptr_t{63});
  constexpr std::int64_t kTiles = kAmxX8Mc / 16;
  s.s1.resize(static_cast<std::size_t>(kTiles * G * 16));
  s.Sf.resize(s.s1.size());
  s.xs.resize(s.s1.size());
  amx::TileConfig cfg;
  cfg.set(0, 16, 64).set(1, 16, 64).set(2, 16, 64).set(3, 16, 64);
  cfg.set(4, 16, kst).set(5, 16, kst).set(6, kst / 4, 64).set(7, kst / 4, 64);
  amx::Hw::configure(cfg);
  alignas(64) __m512 tt[16][2];
  for (std::int64_t m0 = ma; m0 < mb; m0 += kAmxX8Mc) {
    const std::int64_t mc = std::min(kAmxX8Mc, mb - m0);
    const std::int64_t tiles = (mc + 15) / 16;
    // Per row tile, group and row: s1, S as f32 (the VNNI kernels' operand) and the digit sum
    // x as the digits represent it (scale-and-min formats); rows past mc are zero.
    for (std::int64_t ti = 0; ti < tiles; ++ti)
      for (std::int64_t g = 0; g < G; ++g)
        for (int i = 0; i < 16; ++i) {
          const std::int64_t m = m0 + ti * 16 + i;
          const std::size_t o = static_cast<std::size_t>((ti * G + g) * 16 + i);
          if (m < m0 + mc) {
            const std::size_t mi = static_cast<std::size_t>(m * G + g);
            s.s1[o] = xd.s1[mi];
            s.Sf[o] = static_cast<float>(xd.S[3 * mi]);
            s.xs[o] = has_mins(F) ? vnni_digit_xsum(xd.s1[mi], xd.S.data() + 3 * mi) : 0.f;
          } else {
            s.s1[o] = s.Sf[o] = s.xs[o] = 0.f;
          }
        }
    // a last tile of fewer than 16 rows: its digits into a zero-padded block
    const std::int64_t tail = mc % 16;
    if (tail != 0) {
      s.apad.assign(static_cast<std::size_t>(16 * Kv), 0);
      std::memcpy(s.apad.data(), xd.d.data() + (m0 + mc - tail) * Kv,
                  static_cast<std::size_t>(tail * Kv));
    }
    for (std::int64_t p = pa; p < pb; ++p) {
      const std::uint8_t* bq;
      if constexpr (kUnpack) {
        amx_x8_unpack<F>(w, p, a.v.k0, Kv, s.bq.data());
        bq = s.bq.data();
      } else {
        bq = panel_row(w, p, a.v.k0);
      }
      for (std::int64_t ti = 0; ti < tiles; ++ti) {
        const std::int64_t r0 = m0 + ti * 16;
        const std::int64_t rows = std::min<std::int64_t>(16, m0 + mc - r0);
        const std::int8_t* ad = rows < 16 ? s.apad.data() : xd.d.data() + r0 * Kv;
        const std::size_t po = static_cast<std::size_t>(ti * G * 16);
        const std::uint8_t* next = ti == 0 && p + 1 < pb ? panel_row(w, p + 1, a.v.k0) : nullptr;
        amx_x8_half<F, 0>(a, p, ad, Kv, bq, G, seg, kst, s.s1.data() + po, s.Sf.data() + po,
                          s.xs.data() + po, ci, tt, next);
        amx_x8_half<F, 1>(a, p, ad, Kv, bq, G, seg, kst, s.s1.data() + po, s.Sf.data() + po,
                          s.xs.data() + po, ci, tt);
        store_rows_avx512(a, r0, static_cast<int>(rows), p, tt);
      }
    }
  }
  amx::Hw::release();
}

#pragma GCC diagnostic pop
#endif

} // namespace tpullm::kernels::detail
