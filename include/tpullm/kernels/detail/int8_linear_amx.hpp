#pragma once
/// AMX-INT8 body of the W8A8 GEMM (M >= kAmxMinRows), written against kernels/amx_tiles.hpp so
/// it runs on the tile unit (amx::Hw) or on the scalar emulator (amx::Emu). TDPBSSD multiplies
/// the signed activations q by the signed weights directly (no code bias): per block of 32 rows
/// and one 32-column panel, four int32 C tiles (2 row tiles x 2 column halves) accumulate over
/// the whole K in steps of 64 (K padded with zeros to a multiple of 64, the panel's quads copied
/// once per row block into a zero-padded B buffer). isum = C - z * colsum(w).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tpullm/kernels/amx_tiles.hpp"
#include "tpullm/kernels/detail/int8_quantize.hpp"
#include "tpullm/kernels/detail/matmul_amx.hpp"

namespace tpullm::kernels::detail {

/// Per-thread buffers of the AMX W8A8 body.
struct W8A8AmxScratch {
  std::vector<std::int8_t> a;   ///< [32][Kq64] signed activations of one row block
  std::vector<std::uint8_t> b;  ///< [Kq64 / 4][128] one panel's quads, zero padded
  std::vector<std::int32_t> c;  ///< [32][32] C tiles
  std::vector<std::int32_t> cs; ///< [32] the panel's column sums
};
inline W8A8AmxScratch& w8a8_amx_scratch() {
  thread_local W8A8AmxScratch s;
  return s;
}

/// y rows [ma, mb) (of q's rows starting at qm0) x panels [pa, pb): y[m][n] at y + m * ldy + n,
/// bias[n] or null.
template <class Tiles>
TPULLM_ALWAYS_INLINE void w8a8_amx_body(const QuantRows& q, std::int64_t qm0,
                                        const PackedWeights& w, const float* bias, float* y,
                                        std::int64_t ldy, std::int64_t ma, std::int64_t mb,
                                        std::int64_t pa, std::int64_t pb) {
  const std::int64_t Kp = q.Kp, Kq = (Kp + 63) / 64 * 64;
  W8A8AmxScratch& s = w8a8_amx_scratch();
  s.a.resize(static_cast<std::size_t>(32 * Kq));
  s.b.resize(static_cast<std::size_t>(Kq / 4 * 128));
  s.c.resize(32 * 32);
  s.cs.resize(32);
  amx_configure<Tiles>(amx_int_config(64));
  for (std::int64_t m0 = ma; m0 < mb; m0 += 32) {
    const std::int64_t mc = std::min<std::int64_t>(32, mb - m0);
    std::fill(s.a.begin(), s.a.end(), std::int8_t{0});
    for (std::int64_t i = 0; i < mc; ++i) {
      const std::uint8_t* src = q.row(qm0 + m0 + i);
      std::int8_t* dst = s.a.data() + i * Kq;
      for (std::int64_t k = 0; k < Kp; ++k)
        dst[k] = static_cast<std::int8_t>(static_cast<int>(src[k]) - 128);
    }
    for (std::int64_t p = pa; p < pb; ++p) {
      std::memset(s.b.data(), 0, s.b.size());
      std::memcpy(s.b.data(), panel_row(w, p, 0), static_cast<std::size_t>(Kp * 32));
      if (q.zero != 0) {
        std::fill(s.cs.begin(), s.cs.end(), 0);
        for (std::int64_t t = 0; t < Kp / 4; ++t)
          for (int c = 0; c < 32; ++c)
            for (int j = 0; j < 4; ++j)
              s.cs[static_cast<std::size_t>(c)] +=
                  static_cast<std::int8_t>(s.b[static_cast<std::size_t>(t * 128 + 4 * c + j)]);
      }
      amx_int_group<Tiles, true>(s.a.data(), Kq, 16 * Kq, s.b.data(), Kq, 64, s.c.data());
      const std::int64_t c0 = p * kPanelCols;
      const int nc = static_cast<int>(std::min<std::int64_t>(kPanelCols, w.N - c0));
      const float* ws = per_channel_scales(w, p);
      for (std::int64_t i = 0; i < mc; ++i) {
        const float sr = q.scale[static_cast<std::size_t>(qm0 + m0 + i)];
        float* yr = y + (m0 + i) * ldy + c0;
        for (int c = 0; c < nc; ++c) {
          const std::int32_t isum = s.c[static_cast<std::size_t>(i * 32 + c)] -
                                    (q.zero != 0 ? q.zero * s.cs[static_cast<std::size_t>(c)] : 0);
          float v = static_cast<float>(isum) * (sr * ws[c]);
          if (bias)
            v += bias[c0 + c];
          yr[c] = v;
        }
      }
    }
  }
  amx_release<Tiles>();
}

/// The AMX W8A8 body on the emulator (any CPU).
inline void w8a8_amx_emu(const QuantRows& q, std::int64_t qm0, const PackedWeights& w,
                         const float* bias, float* y, std::int64_t ldy, std::int64_t ma,
                         std::int64_t mb, std::int64_t pa, std::int64_t pb) {
  w8a8_amx_body<amx::Emu>(q, qm0, w, bias, y, ldy, ma, mb, pa, pb);
}

#if TPULLM_X86
/// The AMX W8A8 body on the tile unit (only where cpu_features().amx).
TPULLM_TARGET_AVX512 inline void w8a8_amx_hw(const QuantRows& q, std::int64_t qm0,
                                             const PackedWeights& w, const float* bias, float* y,
                                             std::int64_t ldy, std::int64_t ma, std::int64_t mb,
                                             std::int64_t pa, std::int64_t pb) {
  w8a8_amx_body<amx::Hw>(q, qm0, w, bias, y, ldy, ma, mb, pa, pb);
}
#endif

} // namespace tpullm::kernels::detail
