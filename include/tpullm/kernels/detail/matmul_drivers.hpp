#pragma once
/// Drivers of the linear: micro-kernel tables, the cache-blocked GEMM and the GEMV over a
/// range of panels on one thread, and the OpenMP split of one call (run_linear).

#include "tpullm/kernels/detail/matmul_amx.hpp"
#include "tpullm/kernels/detail/matmul_amx_x8.hpp"
#include "tpullm/kernels/detail/matmul_gemm_bf16dot.hpp"
#include "tpullm/kernels/detail/matmul_portable.hpp"
#include "tpullm/support/error.hpp"
#if TPULLM_X86
#include "tpullm/kernels/detail/matmul_gemv_avx512.hpp"
#include "tpullm/kernels/detail/matmul_gemv_vnni.hpp"
#include "tpullm/kernels/detail/matmul_gemm_avx512.hpp"
#include "tpullm/kernels/detail/matmul_gemv_avx2.hpp"
#include "tpullm/kernels/detail/matmul_gemv_int8_avx2.hpp"
#include "tpullm/kernels/detail/matmul_gemm_avx2.hpp"
#endif

namespace tpullm::kernels::detail {

using MicroFn = void (*)(const float*, const float*, std::int64_t, float*, std::int64_t, int,
                         TileInit, const float*);

#if TPULLM_X86
template <std::size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> avx512_micro_table(std::index_sequence<I...>) {
  return {{&micro_avx512<static_cast<int>(I) + 1>...}};
}
template <std::size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> avx2_micro_table(std::index_sequence<I...>) {
  return {{&micro_avx2<static_cast<int>(I) + 1>...}};
}
#endif

inline int micro_rows(Isa isa) {
  switch (isa) {
  case Isa::portable:
    return 4;
  case Isa::avx2:
    return 6;
  case Isa::amx:
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
#if TPULLM_X86
  static constexpr auto t512 = avx512_micro_table(std::make_index_sequence<14>{});
  static constexpr auto t2 = avx2_micro_table(std::make_index_sequence<6>{});
#endif
  const std::int64_t kv = a.v.k1 - a.v.k0;
  const std::int64_t kc_max = std::min<std::int64_t>(kKc, kv);
  // rows per x block: the packed [mc, kc] x block and the [mc, kNb * 32] C block share half the
  // core's L2 (168 rows with 1 MiB, kMcMax = 336 with 2 MiB)
  const std::int64_t mc_l2 = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(default_local_memory_bytes()) / 6144 / MR * MR, MR, kMcMax);
  const std::int64_t mc_max = std::min<std::int64_t>(mc_l2, mb - ma);
  const std::int64_t mc_round = (mc_max + MR - 1) / MR * MR;
  // x rows [m0, m0 + mc) packed once for the whole K range: block kb at ap + (kb - k0) * mc_round
  // (per-thread buffers, grown on demand and never cleared: every element read is written first)
  ScratchPair& gs = gemm_scratch();
  float* ap = gs.a(static_cast<std::size_t>(mc_round * kv));
  float* btp = gs.b(static_cast<std::size_t>(kc_max * kPanelCols));
  float bias_pad[32];
  for (std::int64_t m0 = ma; m0 < mb; m0 += mc_max) {
    const std::int64_t mc = std::min(mc_max, mb - m0);
    for (std::int64_t kb = a.v.k0; kb < a.v.k1; kb += kc_max) {
      float* dst = ap + (kb - a.v.k0) * mc_round;
      const std::int64_t kc = std::min(kc_max, a.v.k1 - kb);
#if TPULLM_X86
      if (vector_isa(isa) == Isa::avx512) {
        pack_a_avx512(a.x, a.ldx, m0, mc, kb - a.v.k0, kc, MR, dst);
        continue;
      }
#endif
      pack_a(a.x, a.ldx, m0, mc, kb - a.v.k0, kc, MR, dst);
    }
    // kNb panels at a time so their [mc, kNb * 32] C block stays in L2 across the K blocks
    for (std::int64_t pn = pa; pn < pb; pn += kNb) {
      const std::int64_t pe = std::min(pb, pn + kNb);
      for (std::int64_t kb = a.v.k0; kb < a.v.k1; kb += kc_max) {
        const std::int64_t kc = std::min(kc_max, a.v.k1 - kb);
        const float* apk = ap + (kb - a.v.k0) * mc_round;
        for (std::int64_t p = pn; p < pe; ++p) {
          const float* b = nullptr;
          if constexpr (F == WeightFormat::f32) {
            b = reinterpret_cast<const float*>(panel_row(w, p, kb));
          } else {
            switch (isa) {
#if TPULLM_X86
            case Isa::avx2:
              decode_block_avx2<F>(w, p, kb, kc, btp);
              break;
            case Isa::amx:
            case Isa::avx512:
              decode_block_avx512<F>(w, p, kb, kc, btp);
              break;
#else
            case Isa::avx2:
            case Isa::amx:
            case Isa::avx512:
#endif
            case Isa::portable:
              decode_block_portable<F>(w, p, kb, kc, btp);
              break;
            }
            b = btp;
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
          const TileInit init = block_init(a, kb, c0, nc, bias_pad);
          std::int64_t pf = 0;
          for (std::int64_t s = 0; s < mc; s += MR) {
            for (std::int64_t e = pf + pf_step; next && pf < std::min(e, next_bytes); pf += 64)
              __builtin_prefetch(next + pf, 0, 2);
            const int rows = static_cast<int>(std::min<std::int64_t>(MR, mc - s));
            float* c = a.y + (m0 + s) * a.ldy + c0;
            const float* as = apk + s * kc;
            switch (isa) {
#if TPULLM_X86
            case Isa::avx2:
              t2[static_cast<std::size_t>(rows - 1)](as, b, kc, c, a.ldy, nc, init, bias_pad);
              break;
            case Isa::amx:
            case Isa::avx512:
              t512[static_cast<std::size_t>(rows - 1)](as, b, kc, c, a.ldy, nc, init, bias_pad);
              break;
#else
            case Isa::avx2:
            case Isa::amx:
            case Isa::avx512:
#endif
            case Isa::portable:
              micro_portable(as, b, kc, rows, c, a.ldy, nc, init, bias_pad, rows);
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
#if TPULLM_X86
  case Isa::avx2:
    if constexpr (is_quantized(F)) {
      if (a.xd && a.xd->nd == 1) { // XPrecision::int8: integer dot products
        gemv_int8_avx2<F>(a, *a.xd, pa, pb);
        break;
      }
    }
    gemv_avx2<F>(a, pa, pb);
    break;
  case Isa::amx:
  case Isa::avx512:
    if constexpr (is_quantized(F)) {
      if (a.xd) {
        gemv_vnni<F>(a, *a.xd, pa, pb);
        break;
      }
    }
    gemv_avx512<F>(a, pa, pb);
    break;
#else
  case Isa::avx2:
  case Isa::amx:
  case Isa::avx512:
#endif
  case Isa::portable:
    gemv_portable<F>(a, pa, pb);
    break;
  }
}

/// Whether a tile path takes a linear of M rows of format F: AMX (bf16 / int8 / int4), or
/// VDPBF16PS for bf16 on AVX512_BF16 without AMX.
template <WeightFormat F>
bool tile_linear_applies(std::int64_t M) {
  if constexpr (amx_format(F)) {
    bool emulated = false;
    if (amx_linear_applies<F>(M, emulated))
      return true;
  }
  return F == WeightFormat::bf16 && bf16_dot_applies(M);
}

/// Whether run_linear takes a linear of M rows of format F on the GEMV kernels: M <= 4, the VNNI
/// kernels' rows (`digits`: x decomposed for them), or up to kGemvBlockMaxRows rows where no
/// tile path applies.
template <WeightFormat F>
bool gemv_rows(std::int64_t M, bool digits) {
  return M <= kGemvMaxRows || digits || (M <= kGemvBlockMaxRows && !tile_linear_applies<F>(M));
}

/// GEMV of panels [pa, pb) over all a.M rows: at once for M <= 4 and for the VNNI kernels (which
/// block their rows themselves); else in blocks of panels of about kGemvBlockBytes, over which
/// rows run 4 at a time, or 8 (float formats on AVX-512, kGemvRows8MaxK): the first pass reads
/// the panels from DRAM, the next ones from L2.
template <WeightFormat F>
void gemv_rows_range(const LinearArgs& a, Isa isa, std::int64_t pa, std::int64_t pb) {
  if (a.M <= kGemvMaxRows || a.xd) {
    gemv_range<F>(a, isa, pa, pb);
    return;
  }
  const std::int64_t panel = std::max<std::int64_t>(1, (a.v.k1 - a.v.k0) * row_bytes(F));
  const std::int64_t nb = std::max<std::int64_t>(1, kGemvBlockBytes / panel);
  // float formats on AVX-512: passes of 8 rows while x's rows fit (kGemvRows8MaxK), then of 4
  const bool eight = !is_quantized(F) && (isa == Isa::avx512 || isa == Isa::amx) &&
                     a.v.k1 - a.v.k0 <= kGemvRows8MaxK;
  for (std::int64_t p = pa; p < pb; p += nb)
    for (std::int64_t m = 0, rows = 0; m < a.M; m += rows) {
      rows = eight && a.M - m >= 8 ? 8 : std::min(kGemvMaxRows, a.M - m);
      LinearArgs b = a;
      b.M = rows;
      b.x = a.x + m * a.ldx;
      b.y = a.y + m * a.ldy;
      if (a.xsum)
        b.xsum = a.xsum + m * a.xsum_ld;
      gemv_range<F>(b, isa, p, std::min(pb, p + nb));
    }
}

/// A GEMM path of run_linear over rows [0, a.M) and panels [a.v.p0, a.v.p1) as `split` says:
/// range(ma, mb, pa, pb) on the calling thread, over row ranges in multiples of `row_align`, or
/// over panel ranges. Throws Error(internal) for a split over heads.
template <class Range>
void run_gemm_split(const CoreSplit& split, const LinearArgs& a, std::int64_t row_align,
                    Range&& range) {
  switch (split.dim) {
  case SplitDim::none:
    range(0, a.M, a.v.p0, a.v.p1);
    return;
  case SplitDim::rows:
    parallel_for(
        split, a.M, row_align, [&](std::int64_t b, std::int64_t e) { range(b, e, a.v.p0, a.v.p1); },
        1);
    return;
  case SplitDim::cols:
    parallel_for(
        split, a.v.p1 - a.v.p0, 1,
        [&](std::int64_t b, std::int64_t e) { range(0, a.M, a.v.p0 + b, a.v.p0 + e); }, 1);
    return;
  case SplitDim::heads:
    break;
  }
  throw_error(ErrorKind::internal, "",
              "linear: CoreSplit over heads is not meaningful for a matmul");
}

template <WeightFormat F>
void run_linear(const LinearArgs& a, const CoreSplit& planned) {
  const Isa isa = active_isa();
  const std::int64_t P = a.v.p1 - a.v.p0;
#if TPULLM_X86
  // x rounded to int8 (one digit) over integer weights on the tile unit: from kAmxX8MinRows rows
  if constexpr (amx_format(F) && F != WeightFormat::bf16) {
    if (amx_x8_applies(F, a.M, a.xd)) {
      run_gemm_split(skinny_split(planned, a.M, 16), a, 16,
                     [&](std::int64_t ma, std::int64_t mb, std::int64_t pa, std::int64_t pb) {
                       amx_x8_range<F>(a, ma, mb, pa, pb);
                     });
      return;
    }
  }
#endif
  // More than 4 rows on the GEMV kernels (gemv_rows): the VNNI (AVX-512 or AVX2) kernels when
  // linear_view prepared digits for them (vnni_int8_rows), or row blocks of up to
  // kGemvBlockMaxRows; over columns
  if (gemv_rows<F>(a.M, a.xd != nullptr)) {
    CoreSplit split = planned;
    if (a.M > kGemvMaxRows && split.dim == SplitDim::rows)
      split.dim = SplitDim::cols;
    switch (split.dim) {
    case SplitDim::none:
    case SplitDim::rows: // M <= 4 rows are not worth splitting: run on the calling thread
      gemv_rows_range<F>(a, isa, a.v.p0, a.v.p1);
      return;
    case SplitDim::cols: {
      // no thread fork when the weights are too small for it to pay; panel ranges in multiples
      // of the streams a single-row GEMV reads at once when there are enough panels
      const std::int64_t bytes = P * (a.v.k1 - a.v.k0) * row_bytes(F);
      CoreSplit s = split;
      s.parts = static_cast<int>(
          std::clamp<std::int64_t>(bytes / kGemvBytesPerThread, 1, std::max(1, split.parts)));
      // (the float formats' GEMV streams lie inside each panel: any panel range will do)
      const std::int64_t align =
          is_quantized(F) && P >= 2 * kGemvStreams * s.parts ? kGemvStreams : 1;
      parallel_for(s, P, align, [&](std::int64_t b, std::int64_t e) {
        gemv_rows_range<F>(a, isa, a.v.p0 + b, a.v.p0 + e);
      });
      return;
    }
    case SplitDim::heads:
      break;
    }
    throw_error(ErrorKind::internal, "",
                "linear: CoreSplit over heads is not meaningful for a matmul");
  }
  bool emulated = false;
  if constexpr (amx_format(F)) {
    if (amx_linear_applies<F>(a.M, emulated)) { // bf16 / int8 / int4 on the tile unit
      run_gemm_split(skinny_split(planned, a.M, 32), a, 32,
                     [&](std::int64_t ma, std::int64_t mb, std::int64_t pa, std::int64_t pb) {
                       amx_linear_range<F>(a, emulated, ma, mb, pa, pb);
                     });
      return;
    }
  }
  // bf16 weights on AVX512_BF16 without AMX: VDPBF16PS on bf16-rounded x (the AMX numerics)
  if (F == WeightFormat::bf16 && bf16_dot_applies(a.M)) {
    run_gemm_split(skinny_split(planned, a.M, kBf16DotMr), a, kBf16DotMr,
                   [&](std::int64_t ma, std::int64_t mb, std::int64_t pa, std::int64_t pb) {
                     gemm_range_bf16dot(a, ma, mb, pa, pb);
                   });
    return;
  }
  run_gemm_split(skinny_split(planned, a.M, micro_rows(isa)), a, micro_rows(isa),
                 [&](std::int64_t ma, std::int64_t mb, std::int64_t pa, std::int64_t pb) {
                   gemm_range<F>(a, isa, ma, mb, pa, pb);
                 });
}

} // namespace tpullm::kernels::detail
