#pragma once
/// Drivers of the W8A8 linear (kernels/int8_linear.hpp): the path choice, the GEMV (M <= 4: each
/// panel streamed once) and the cache-blocked GEMM (M > 4: x rows packed once per row block into
/// the micro-kernel's strip layout, every panel's whole K per register tile, no partial int32
/// sums leave the registers) on one thread, and their split across the worker pool (run_w8a8),
/// exactly as kernels::linear splits (panels for SplitDim::cols, rows for SplitDim::rows).

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/detail/int8_linear_amx.hpp"
#include "tpullm/kernels/detail/int8_quantize.hpp"
#include "tpullm/kernels/detail/int8_tile.hpp"
#include "tpullm/kernels/detail/matmul_common.hpp"
#include "tpullm/support/error.hpp"
#if TPULLM_X86
#include "tpullm/kernels/detail/int8_linear_avx2.hpp"
#include "tpullm/kernels/detail/int8_linear_avx512.hpp"
#endif

namespace tpullm::kernels::detail {

/// The code path of a W8A8 product.
enum class W8A8Path : std::uint8_t {
  portable,     ///< scalar int32 loops
  avx2,         ///< VPMOVSXBW + VPMADDWD on ymm
  avx_vnni,     ///< VEX VPDPBUSD on ymm
  vnni512,      ///< AVX-512 VPDPBUSD on zmm
  amx,          ///< AMX-INT8 TDPBSSD on the tile unit (M >= kAmxMinRows)
  amx_emulated, ///< the AMX body on the scalar tile emulator (tests)
};

/// Printable name of a W8A8Path.
inline const char* w8a8_path_name(W8A8Path p) {
  switch (p) {
  case W8A8Path::portable:
    return "portable";
  case W8A8Path::avx2:
    return "avx2";
  case W8A8Path::avx_vnni:
    return "avx-vnni";
  case W8A8Path::vnni512:
    return "avx512-vnni";
  case W8A8Path::amx:
    return "amx";
  case W8A8Path::amx_emulated:
    return "amx-emulated";
  }
  return "?";
}

/// The path a W8A8 product with M rows takes now: the AMX emulator while amx::ScopedEmulation
/// is alive (M >= 16), else from active_isa(): amx (M >= 16), avx512 with VNNI, avx2 with AVX-VNNI
/// (unless w8a8_avx_vnni_disabled()), avx2 (also AVX-512 CPUs without VNNI), portable.
inline W8A8Path w8a8_path(std::int64_t M) {
  if (M >= kAmxMinRows && amx::emulation_forced())
    return W8A8Path::amx_emulated;
#if TPULLM_X86
  const Isa isa = active_isa();
  if (isa == Isa::amx && M >= kAmxMinRows)
    return W8A8Path::amx;
  if (vector_isa(isa) == Isa::avx512 && cpu_features().avx512_vnni)
    return W8A8Path::vnni512;
  if (isa != Isa::portable)
    return cpu_features().avx_vnni && !w8a8_avx_vnni_disabled() ? W8A8Path::avx_vnni
                                                                : W8A8Path::avx2;
#endif
  return W8A8Path::portable;
}

/// One W8A8 product: rows [qm0, qm0 + M) of the quantized x times w, into y [M, ldy] (+ bias).
struct W8A8Args {
  const QuantRows* q = nullptr;
  std::int64_t qm0 = 0, M = 0;
  const PackedWeights* w = nullptr;
  const float* bias = nullptr; ///< [N] or null
  float* y = nullptr;
  std::int64_t ldy = 0;
  const std::int16_t* a16 = nullptr; ///< GEMV on the avx2 / portable paths: [M][Kp] q - z
};

/// Per-thread buffers of the W8A8 drivers (grown on demand, reused without clearing).
struct W8A8Scratch {
  std::vector<std::uint8_t> strips; ///< packed x strips of one row block
  std::vector<std::int32_t> colsum; ///< [panels][32]
  std::vector<std::int16_t> a16;    ///< GEMV activations as int16
};
inline W8A8Scratch& w8a8_scratch() {
  thread_local W8A8Scratch s;
  return s;
}

/// a16[m][k] = q - z of rows [qm0, qm0 + M) (the int16 paths' activations).
inline void w8a8_rows_int16(const QuantRows& q, std::int64_t qm0, std::int64_t M,
                            std::vector<std::int16_t>& a16) {
  a16.resize(static_cast<std::size_t>(M * q.Kp));
  const int off = 128 + q.zero;
  for (std::int64_t m = 0; m < M; ++m) {
    const std::uint8_t* c = q.row(qm0 + m);
    std::int16_t* d = a16.data() + m * q.Kp;
    for (std::int64_t k = 0; k < q.Kp; ++k)
      d[k] = static_cast<std::int16_t>(static_cast<int>(c[k]) - off);
  }
}

/// The tile of rows [m, m + rows) x panels from p of a product (strip fields left to the caller).
inline W8A8Tile w8a8_tile_at(const W8A8Args& a, std::int64_t m, std::int64_t p) {
  const PackedWeights& w = *a.w;
  W8A8Tile t;
  t.w = panel_row(w, p, 0);
  t.pbytes = w.panel_bytes();
  t.Kq = w.stored_rows() / 4;
  t.zc = 128 + a.q->zero;
  t.ws = per_channel_scales(w, p);
  t.bias = a.bias ? a.bias + p * kPanelCols : nullptr;
  t.rs = a.q->scale.data() + a.qm0 + m;
  t.y = a.y + m * a.ldy + p * kPanelCols;
  t.ldy = a.ldy;
  t.ncols = w.N - p * kPanelCols;
  return t;
}

/// Scalar rows [ma, mb) x panels [pa, pb) (any M), activations as int16 q - z.
inline void w8a8_portable_range(const W8A8Args& a, const std::int16_t* a16, std::int64_t lda,
                                std::int64_t ma, std::int64_t mb, std::int64_t pa,
                                std::int64_t pb) {
  const PackedWeights& w = *a.w;
  const std::int64_t Kq = w.stored_rows() / 4;
  for (std::int64_t m = ma; m < mb; ++m) {
    const std::int16_t* x = a16 + (m - ma) * lda;
    for (std::int64_t p = pa; p < pb; ++p) {
      std::int32_t acc[32] = {};
      const auto* wp = reinterpret_cast<const std::int8_t*>(panel_row(w, p, 0));
      for (std::int64_t t = 0; t < Kq; ++t, wp += 128) {
        const std::int16_t* xq = x + 4 * t;
        for (int c = 0; c < 32; ++c)
          for (int j = 0; j < 4; ++j)
            acc[c] += xq[j] * wp[4 * c + j];
      }
      const W8A8Tile t = w8a8_tile_at(a, m, p);
      const float sr = t.rs[0];
      for (int c = 0; c < tile_cols(t, 0); ++c) {
        float v = static_cast<float>(acc[c]) * (sr * t.ws[c]);
        if (t.bias)
          v += t.bias[c];
        t.y[c] = v;
      }
    }
  }
}

/// GEMV (M <= 4) over panels [pa, pb) on the calling thread.
inline void w8a8_gemv_range(const W8A8Args& a, W8A8Path path, std::int64_t pa, std::int64_t pb) {
  if (pa >= pb)
    return;
  [[maybe_unused]] const int rows = static_cast<int>(a.M);
  switch (path) {
#if TPULLM_X86
  case W8A8Path::vnni512: {
    W8A8Tile t = w8a8_tile_at(a, 0, pa);
    t.a = a.q->row(a.qm0);
    t.a_rs = a.q->Kp;
    t.a_qs = 4;
    w8a8_gemv_avx512(t, rows, pb - pa);
    return;
  }
  case W8A8Path::avx_vnni:
    for (std::int64_t p = pa; p < pb; ++p) {
      W8A8Tile t = w8a8_tile_at(a, 0, p);
      t.a = a.q->row(a.qm0);
      t.a_rs = a.q->Kp;
      t.a_qs = 4;
      w8a8_gemv_rows_avxvnni(t, rows);
    }
    return;
  case W8A8Path::avx2:
    for (std::int64_t p = pa; p < pb; ++p) {
      W8A8Tile t = w8a8_tile_at(a, 0, p);
      t.a = reinterpret_cast<const std::uint8_t*>(a.a16);
      t.a_rs = a.q->Kp * 2;
      t.a_qs = 8;
      w8a8_gemv_panel_avx2(t, rows);
    }
    return;
#else
  case W8A8Path::vnni512:
  case W8A8Path::avx_vnni:
  case W8A8Path::avx2:
#endif
  case W8A8Path::amx:
  case W8A8Path::amx_emulated:
  case W8A8Path::portable:
    w8a8_portable_range(a, a.a16, a.q->Kp, 0, a.M, pa, pb);
    return;
  }
}

/// Rows of a path's GEMM register tile.
inline int w8a8_mr(W8A8Path path) {
  switch (path) {
#if TPULLM_X86
  case W8A8Path::vnni512:
    return kW8A8MrVnni;
  case W8A8Path::avx_vnni:
    return kW8A8MrAvxVnni;
  case W8A8Path::avx2:
    return kW8A8MrAvx2;
#else
  case W8A8Path::vnni512:
  case W8A8Path::avx_vnni:
  case W8A8Path::avx2:
#endif
  case W8A8Path::portable:
    return 1;
  case W8A8Path::amx:
  case W8A8Path::amx_emulated:
    return 32;
  }
  return 1;
}

/// GEMM rows [ma, mb) x panels [pa, pb) on the calling thread.
inline void w8a8_gemm_range(const W8A8Args& a, W8A8Path path, std::int64_t ma, std::int64_t mb,
                            std::int64_t pa, std::int64_t pb) {
  if (ma >= mb || pa >= pb)
    return;
  const QuantRows& q = *a.q;
  const PackedWeights& w = *a.w;
  switch (path) {
  case W8A8Path::amx_emulated:
    w8a8_amx_emu(q, a.qm0, w, a.bias, a.y, a.ldy, ma, mb, pa, pb);
    return;
  case W8A8Path::amx:
#if TPULLM_X86
    w8a8_amx_hw(q, a.qm0, w, a.bias, a.y, a.ldy, ma, mb, pa, pb);
    return;
#endif
  case W8A8Path::portable: {
    std::vector<std::int16_t>& a16 = w8a8_scratch().a16;
    for (std::int64_t m0 = ma; m0 < mb; m0 += 64) {
      const std::int64_t me = std::min(mb, m0 + 64);
      w8a8_rows_int16(q, a.qm0 + m0, me - m0, a16);
      w8a8_portable_range(a, a16.data(), q.Kp, m0, me, pa, pb);
    }
    return;
  }
  case W8A8Path::vnni512:
  case W8A8Path::avx_vnni:
  case W8A8Path::avx2:
    break;
  }
#if TPULLM_X86
  const int MR = w8a8_mr(path);
  const bool int16 = path == W8A8Path::avx2;
  const std::int64_t Kp = q.Kp, Kq = Kp / 4, esz = int16 ? 2 : 1;
  W8A8Scratch& s = w8a8_scratch();
  if (!int16) { // the panels' column sums, once per call
    s.colsum.resize(static_cast<std::size_t>((pb - pa) * 32));
    for (std::int64_t p = pa; p < pb; ++p) {
      std::int32_t* cs = s.colsum.data() + (p - pa) * 32;
      if (path == W8A8Path::vnni512)
        w8a8_colsum_avx512(panel_row(w, p, 0), Kq, cs);
      else
        w8a8_colsum_avxvnni(panel_row(w, p, 0), Kq, cs);
    }
  }
  // rows per block: its packed strips take half the core's local memory (L2)
  const std::int64_t blk = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(default_local_memory_bytes()) / 2 / (Kp * esz) / MR * MR, MR,
      std::int64_t{32} * MR);
  const int off = 128 + q.zero;
  for (std::int64_t m0 = ma; m0 < mb; m0 += blk) {
    const std::int64_t mc = std::min(blk, mb - m0);
    // strip i (rows m0 + i * MR ...): quad t of row r at strip + (t * rows + r) * 4 * esz
    s.strips.resize(static_cast<std::size_t>(mc * Kp * esz));
    for (std::int64_t i0 = 0; i0 < mc; i0 += MR) {
      const std::int64_t rows = std::min<std::int64_t>(MR, mc - i0);
      std::uint8_t* dst = s.strips.data() + i0 * Kp * esz;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::uint8_t* src = q.row(a.qm0 + m0 + i0 + r);
        if (int16) {
          auto* d16 = reinterpret_cast<std::int16_t*>(dst);
          for (std::int64_t t = 0; t < Kq; ++t)
            for (int j = 0; j < 4; ++j)
              d16[(t * rows + r) * 4 + j] = static_cast<std::int16_t>(src[4 * t + j] - off);
        } else {
          for (std::int64_t t = 0; t < Kq; ++t)
            std::memcpy(dst + (t * rows + r) * 4, src + 4 * t, 4);
        }
      }
    }
    for (std::int64_t p = pa; p < pb; ++p)
      for (std::int64_t i0 = 0; i0 < mc; i0 += MR) {
        const int rows = static_cast<int>(std::min<std::int64_t>(MR, mc - i0));
        W8A8Tile t = w8a8_tile_at(a, m0 + i0, p);
        t.a = s.strips.data() + i0 * Kp * esz;
        t.a_rs = 4 * esz;
        t.a_qs = 4 * esz * rows;
        if (!int16)
          t.colsum = s.colsum.data() + (p - pa) * 32;
        if (path == W8A8Path::vnni512)
          w8a8_gemm_tile_avx512(t, rows);
        else if (path == W8A8Path::avx_vnni)
          w8a8_panel_avxvnni(t, rows);
        else
          w8a8_panel_avx2(t, rows);
      }
  }
#endif
}

/// GEMVs (M <= 4) of products that read the same quantized rows (gate and up: a.q, a.qm0, a.M
/// equal) on `split`'s workers in one fork / join: their panels concatenated, whole panels per
/// range (each panel's k pieces are the thread's streams; no alignment, so 28 panels on 2 threads
/// are 14 + 14), fewer threads when the weights are small, as kernels::linear does.
inline void run_w8a8_gemvs(std::span<W8A8Args> prods, const CoreSplit& split) {
  const W8A8Args& a0 = prods.front();
  const W8A8Path path = w8a8_path(a0.M);
  if (path == W8A8Path::avx2 || path == W8A8Path::portable) {
    std::vector<std::int16_t>& a16 = w8a8_scratch().a16;
    w8a8_rows_int16(*a0.q, a0.qm0, a0.M, a16);
    for (W8A8Args& a : prods)
      a.a16 = a16.data();
  }
  std::int64_t P = 0, bytes = 0;
  for (const W8A8Args& a : prods) {
    P += a.w->panels();
    bytes += a.w->panels() * a.w->panel_bytes();
  }
  auto range = [&](std::int64_t b, std::int64_t e) {
    std::int64_t p0 = 0;
    for (const W8A8Args& a : prods) {
      const std::int64_t n = a.w->panels();
      w8a8_gemv_range(a, path, std::clamp<std::int64_t>(b - p0, 0, n),
                      std::clamp<std::int64_t>(e - p0, 0, n));
      p0 += n;
    }
  };
  if (split.dim != SplitDim::cols) {
    range(0, P);
    return;
  }
  CoreSplit s = split;
  s.parts = static_cast<int>(
      std::clamp<std::int64_t>(bytes / kGemvBytesPerThread, 1, std::max(1, split.parts)));
  parallel_for(s, P, 1, range);
}

/// Runs one product on `split`'s workers: the GEMV by panel ranges (run_w8a8_gemvs), the GEMM by
/// row ranges (SplitDim::rows, multiples of the register tile) or panel ranges (SplitDim::cols).
inline void run_w8a8(W8A8Args a, const CoreSplit& planned) {
  const std::int64_t P = a.w->panels();
  const W8A8Path path = w8a8_path(a.M);
  if (planned.dim == SplitDim::heads)
    throw_error(ErrorKind::internal, "",
                "linear_w8a8: CoreSplit over heads is not meaningful for a matmul");
  if (a.M <= kGemvMaxRows) {
    run_w8a8_gemvs({&a, 1}, planned);
    return;
  }
  const CoreSplit split = skinny_split(planned, a.M, w8a8_mr(path));
  switch (split.dim) {
  case SplitDim::none:
    w8a8_gemm_range(a, path, 0, a.M, 0, P);
    return;
  case SplitDim::rows:
    parallel_for(
        split, a.M, w8a8_mr(path),
        [&](std::int64_t b, std::int64_t e) { w8a8_gemm_range(a, path, b, e, 0, P); }, 1);
    return;
  case SplitDim::cols:
    parallel_for(
        split, P, 1,
        [&](std::int64_t b, std::int64_t e) { w8a8_gemm_range(a, path, 0, a.M, b, e); }, 1);
    return;
  case SplitDim::heads:
    break;
  }
}

} // namespace tpullm::kernels::detail
