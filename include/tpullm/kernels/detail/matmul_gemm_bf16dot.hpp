#pragma once
/// GEMM of bf16 weights on AVX512_BF16 (VDPBF16PS), the prefill path of `--mode bf16` on CPUs
/// with AVX512_BF16 and no AMX (Zen 4 / Zen 5, Sapphire Rapids without the tile unit): the same
/// numerics as the AMX-BF16 path (detail/matmul_amx.hpp): x rows are rounded to bf16 (nearest
/// even), products of two bf16 are exact in f32 and accumulate in f32 over the whole K. One
/// VDPBF16PS does 16 lanes x 2 multiply-adds, twice the f32 FMA's work per instruction.
///
/// Layouts (k pairs j = 0 .. ceil(kc / 2) - 1 of a [kc] K block, the odd tail zero padded):
///  - x strip of MR rows: [pairs][MR] dwords, dword (j, i) = bf16(x[i][2j]) | bf16(x[i][2j+1]) <<
///  16
///  - weight block of one 32-column panel: [pairs][32] dwords, dword (j, n) = W[2j][n] |
///    W[2j+1][n] << 16 (re-laid once per block from the panel's bf16 rows, as a B tile of AMX)
/// and the MR x 32 micro-kernel keeps C[MR][32] in 2 * MR zmm accumulators.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/support/float16.hpp"
#include "tpullm/kernels/detail/matmul_common.hpp"
#include "tpullm/kernels/detail/matmul_portable.hpp"
#include "tpullm/support/error.hpp"
#if TPULLM_X86
#include "tpullm/kernels/detail/matmul_avx512_common.hpp"
#include "tpullm/kernels/detail/matmul_gemm_avx512.hpp"
#endif

namespace tpullm::kernels::detail {

/// Fewest rows of x for which a bf16 linear takes the VDPBF16PS GEMM: past the row-blocked
/// GEMV's rows, which measured 10-15% faster at 16 (kGemvBlockMaxRows).
inline constexpr std::int64_t kBf16DotMinRows = kGemvBlockMaxRows + 1;
#ifndef TPULLM_BF16DOT_KC
#define TPULLM_BF16DOT_KC 256
#endif
/// K rows per block of the VDPBF16PS GEMM (even): its [kc / 2, 32] dword weight block (16 KiB)
/// and a 14-row x strip (7 KiB) share L1.
inline constexpr std::int64_t kBf16DotKc = TPULLM_BF16DOT_KC;
/// Rows of the VDPBF16PS micro-kernel (2 * 14 accumulators + 2 weight registers + 1 spare).
inline constexpr int kBf16DotMr = 14;

/// When true, bf16 GEMMs on AVX512_BF16 CPUs take the f32-FMA path (widened weights, x in f32)
/// instead. The default is the faster one measured per vendor: AMD (Zen 4 / 5) runs VDPBF16PS
/// at about twice its f32 FMA rate (0.5B prefill 512: 718 t/s against 534 for f16 on FMA), an
/// Intel core without usable AMX at about half (a Xeon VM: 163 against 340 GFLOP/s), so only
/// AMD takes it by default. `TPULLM_BF16_DOT=1` / `0` in the environment (read once, at the first
/// call) forces it on / off; any other value throws Error(invalid_input). Tests cover both paths.
inline bool& bf16_dot_disabled() {
  static bool disabled = [] {
    const char* env = std::getenv("TPULLM_BF16_DOT");
    if (!env || !*env)
      return !cpu_features().amd;
    if (std::string_view(env) == "1")
      return false;
    if (std::string_view(env) == "0")
      return true;
    throw_error(ErrorKind::invalid_input, "TPULLM_BF16_DOT",
                "TPULLM_BF16_DOT='" + std::string(env) + "' is not 0 or 1");
  }();
  return disabled;
}

/// True when a bf16 linear of M rows takes the VDPBF16PS GEMM: AVX-512 is the active path (not
/// AMX, whose tile path comes first), the CPU has AVX512_BF16, M >= kBf16DotMinRows, not disabled.
inline bool bf16_dot_applies(std::int64_t M) {
  return TPULLM_X86 && M >= kBf16DotMinRows && active_isa() == Isa::avx512 &&
         cpu_features().avx512_bf16 && !bf16_dot_disabled();
}

#if TPULLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"

/// Function attribute: the AVX-512 level plus AVX512_BF16 (VDPBF16PS).
#define TPULLM_TARGET_AVX512_BF16                                                                  \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma,f16c,bmi2,"        \
                        "prefer-vector-width=512")))

/// x rows [m0, m0 + mc) x cols [kb, kb + kc) (kc <= the view's columns from kb) into MR-row
/// strips of bf16 pairs [pairs][rows] (rows past mc, and the odd column past kc, are zero).
inline void pack_a_bf16dot(const float* x, std::int64_t ldx, std::int64_t m0, std::int64_t mc,
                           std::int64_t kb, std::int64_t kc, int MR, std::uint32_t* out) {
  const std::int64_t pairs = (kc + 1) / 2;
  for (std::int64_t s = 0; s < mc; s += MR) {
    const int rows = static_cast<int>(std::min<std::int64_t>(MR, mc - s));
    std::uint32_t* o = out + s * pairs;
    for (int i = 0; i < rows; ++i) {
      const float* xr = x + (m0 + s + i) * ldx + kb;
      for (std::int64_t j = 0; j < pairs; ++j) {
        const std::uint32_t lo = tpullm::f32_to_bf16(xr[2 * j]);
        const std::uint32_t hi = 2 * j + 1 < kc ? tpullm::f32_to_bf16(xr[2 * j + 1]) : 0u;
        o[j * rows + i] = lo | (hi << 16);
      }
    }
  }
}

/// Panel p's bf16 rows [kb, kb + kc) into the pair layout [pairs][32] (the odd tail's second row
/// zero). A stored bf16 row is 16 dwords, dword c = column c | column c + 16 << 16
/// (packed_weights.hpp elem_offset), so each pair of rows is two ands, two shifts and two ors.
TPULLM_TARGET_AVX512 inline void decode_block_bf16dot(const PackedWeights& w, std::int64_t p,
                                                      std::int64_t kb, std::int64_t kc,
                                                      std::uint32_t* out) {
  const std::uint8_t* row = panel_row(w, p, kb);
  const std::int64_t pairs = (kc + 1) / 2;
  const __m512i lo = _mm512_set1_epi32(0xFFFF),
                hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (std::int64_t j = 0; j < pairs; ++j) {
    const __m512i r0 = _mm512_loadu_si512(row + 2 * j * 64);
    const __m512i r1 =
        2 * j + 1 < kc ? _mm512_loadu_si512(row + (2 * j + 1) * 64) : _mm512_setzero_si512();
    _mm512_store_si512(out + j * 32,
                       _mm512_or_si512(_mm512_and_si512(r0, lo), _mm512_slli_epi32(r1, 16)));
    _mm512_store_si512(out + j * 32 + 16,
                       _mm512_or_si512(_mm512_srli_epi32(r0, 16), _mm512_and_si512(r1, hi)));
  }
}

/// MR x 32 micro-kernel: C[MR, ncols] (=|+=) Ap[pairs][MR] · B[pairs][32] with VDPBF16PS.
template <int MR>
TPULLM_TARGET_AVX512_BF16 void micro_bf16dot(const std::uint32_t* ap, const std::uint32_t* b,
                                             std::int64_t pairs, float* c, std::int64_t ldc,
                                             int ncols, TileInit init, const float* bias) {
  __m512 acc[MR][2];
  const __mmask16 m0 = col_mask(ncols, 0), m1 = col_mask(ncols, 1);
  tile_start_avx512<MR>(acc, init, c, ldc, bias, m0, m1);
  for (std::int64_t j = 0; j < pairs; ++j) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b + 32 * j);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(b + 32 * j + 16);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[j * MR + i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
    }
  }
  tile_store_avx512<MR>(acc, c, ldc, m0, m1);
}

#pragma GCC diagnostic pop

using MicroBf16DotFn = void (*)(const std::uint32_t*, const std::uint32_t*, std::int64_t, float*,
                                std::int64_t, int, TileInit, const float*);
template <std::size_t... I>
constexpr std::array<MicroBf16DotFn, sizeof...(I)> bf16dot_micro_table(std::index_sequence<I...>) {
  return {{&micro_bf16dot<static_cast<int>(I) + 1>...}};
}

/// Per-thread buffers of the VDPBF16PS GEMM (x pair strips, one re-laid weight block).
struct Bf16DotScratch {
  AlignedArray<std::uint32_t> ap, bt;
  static std::uint32_t* grow(AlignedArray<std::uint32_t>& v, std::size_t n) {
    if (v.size() < n)
      v = AlignedArray<std::uint32_t>(n);
    return v.data();
  }
};
inline Bf16DotScratch& bf16dot_scratch() {
  thread_local Bf16DotScratch s;
  return s;
}

/// GEMM of bf16 weights for rows [ma, mb) and panels [pa, pb) on the calling thread, blocked as
/// gemm_range (x rows packed once per mc block for the whole K range; kNb panels per C block).
inline void gemm_range_bf16dot(const LinearArgs& a, std::int64_t ma, std::int64_t mb,
                               std::int64_t pa, std::int64_t pb) {
  static constexpr auto table = bf16dot_micro_table(std::make_index_sequence<kBf16DotMr>{});
  constexpr int MR = kBf16DotMr;
  const PackedWeights& w = *a.v.w;
  const std::int64_t kv = a.v.k1 - a.v.k0;
  const std::int64_t kc_max = std::min<std::int64_t>(kBf16DotKc, (kv + 1) / 2 * 2);
  const std::int64_t mc_l2 = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(default_local_memory_bytes()) / 6144 / MR * MR, MR, kMcMax);
  const std::int64_t mc_max = std::min<std::int64_t>(mc_l2, mb - ma);
  const std::int64_t mc_round = (mc_max + MR - 1) / MR * MR;
  const std::int64_t kpairs = (kv + kc_max - 1) / kc_max * (kc_max / 2);
  Bf16DotScratch& gs = bf16dot_scratch();
  std::uint32_t* ap = Bf16DotScratch::grow(gs.ap, static_cast<std::size_t>(mc_round * kpairs));
  std::uint32_t* btp =
      Bf16DotScratch::grow(gs.bt, static_cast<std::size_t>(kc_max / 2 * kPanelCols));
  float bias_pad[32];
  for (std::int64_t m0 = ma; m0 < mb; m0 += mc_max) {
    const std::int64_t mc = std::min(mc_max, mb - m0);
    // strips of equal height (16 rows: 8 + 8, not 14 + 2, whose 2-row kernel is load-bound)
    const int mr = static_cast<int>((mc + (mc + MR - 1) / MR - 1) / ((mc + MR - 1) / MR));
    for (std::int64_t kb = a.v.k0; kb < a.v.k1; kb += kc_max)
      pack_a_bf16dot(a.x, a.ldx, m0, mc, kb - a.v.k0, std::min(kc_max, a.v.k1 - kb), mr,
                     ap + (kb - a.v.k0) / 2 * mc_round);
    for (std::int64_t pn = pa; pn < pb; pn += kNb) {
      const std::int64_t pe = std::min(pb, pn + kNb);
      for (std::int64_t kb = a.v.k0; kb < a.v.k1; kb += kc_max) {
        const std::int64_t kc = std::min(kc_max, a.v.k1 - kb), pairs = (kc + 1) / 2;
        const std::uint32_t* apk = ap + (kb - a.v.k0) / 2 * mc_round;
        for (std::int64_t p = pn; p < pe; ++p) {
          decode_block_bf16dot(w, p, kb, kc, btp);
          const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
          const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, w.N - p * kPanelCols));
          const TileInit init = block_init(a, kb, c0, nc, bias_pad);
          for (std::int64_t s = 0; s < mc; s += mr) {
            const int rows = static_cast<int>(std::min<std::int64_t>(mr, mc - s));
            table[static_cast<std::size_t>(rows - 1)](apk + s * pairs, btp, pairs,
                                                      a.y + (m0 + s) * a.ldy + c0, a.ldy, nc, init,
                                                      bias_pad);
          }
        }
      }
    }
  }
}
#else
inline void gemm_range_bf16dot(const LinearArgs&, std::int64_t, std::int64_t, std::int64_t,
                               std::int64_t) {
  throw_error(ErrorKind::internal, "", "gemm_range_bf16dot: not an x86 build");
}
#endif

} // namespace tpullm::kernels::detail
