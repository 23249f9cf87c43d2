#pragma once
/// AMX path of the linear for M >= kAmxMinRows (17: prefill): bf16 weights on AMX-BF16, int8 / int4
/// weights on AMX-INT8. Written against the tile interface of kernels/amx_tiles.hpp, so the same
/// code runs on the real tile unit (amx::Hw) or on the scalar emulator (amx::Emu).
///
/// bf16 weights (the paper's BF16 mode): x rows are rounded to bf16 (nearest even) into an
/// [MC, Kq] block (Kq = view rows rounded up to 32, zero padded); each 32-column panel's rows are
/// re-laid once per row block into the VNNI pair layout of a B tile (dword (r, n) = W[2r][n] |
/// W[2r+1][n] << 16; two 16-column tiles per 32-row k step); 32 x 32 outputs accumulate in four
/// f32 C tiles (2 row tiles x 2 column halves) over the whole K with TDPBF16PS.
///
/// int8 / int4 weights: x is cut per weight group into the digits the VNNI GEMV uses
/// (x_digit_count of the call's precision, the same f32 operations as make_x_digits): exact x in
/// three int8 digits, x ~= s1 (h + l / 256 + t / 65536) with s1 = max|x_group| / 127 (residual
/// <= 1.5 s1 / 65536, the level of f32 rounding), XPrecision::int8 in one, x ~= s1 h. The weights
/// are staged as signed int8 (int8), unsigned codes (int8_asym, int8_min) or unsigned nibbles
/// (int4) in B-tile quads, and per group int32 C tiles (digits x 2 column halves) of 16 rows
/// accumulate TDPBSSD (int8) or TDPBSUD (the others); after each group y += scale * s1 *
/// sum_d 256^-d (C_d - z S_d) with S the digit sums and z the zero point (0 for int8, 8 for
/// int4_sym, the group's zero for int4_asym and int8_asym); the scale-and-min formats (int4_min,
/// int8_min) add scale * s1 * sum_d 256^-d C_d - min * s1 * sum_d 256^-d S_d.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tpullm/kernels/amx_tiles.hpp"
#include "tpullm/kernels/attention_shape.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/kernels/detail/matmul_common.hpp"
#include "tpullm/kernels/detail/matmul_portable.hpp"
#include "tpullm/kernels/detail/matmul_x_digits.hpp"

namespace tpullm::kernels::detail {

/// Fewest rows of x for which a linear takes the AMX path: past kDecodeArithmeticRows, so a
/// speculative verify call's rows (up to 16) run the GEMV kernels a decode step runs and get its
/// sums (bf16 x is not rounded there, and the digit kernels sum as a single row does).
inline constexpr std::int64_t kAmxMinRows = kDecodeArithmeticRows + 1;
/// Rows of x staged per block of the AMX path (a multiple of 32).
inline constexpr std::int64_t kAmxMc = 64;

/// True for the formats with an AMX path (bf16 on AMX-BF16; int8 / int4 / int6 on AMX-INT8).
constexpr bool amx_format(WeightFormat f) {
  switch (f) {
  case WeightFormat::bf16:
  case WeightFormat::int8:
  case WeightFormat::int4_sym:
  case WeightFormat::int4_asym:
  case WeightFormat::int8_asym:
  case WeightFormat::int4_min:
  case WeightFormat::int8_min:
  case WeightFormat::int6_sym:
  case WeightFormat::int6_min:
    return true;
  case WeightFormat::f32:
  case WeightFormat::f16:
    return false;
  }
  return false;
}

/// f32 -> bf16 bits, round to nearest even (NaN stays NaN).
inline std::uint16_t amx_bf16_rne(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// ---- tile loops (one call per block; Tiles = amx::Hw or amx::Emu) ---------------------------

/// Tile configuration of the bf16 loop: C 0-3 (16 x 16 f32), A 4-5 (16 x 32 bf16), B 6-7 (16 pair
/// rows x 16 columns).
inline amx::TileConfig amx_bf16_config() {
  amx::TileConfig c;
  for (int t = 0; t < 8; ++t)
    c.set(t, 16, 64);
  return c;
}

/// C[32, 32] f32 (row stride 32 floats) = A[32, Kq] bf16 (row stride lda elements) x B (Kq / 32
/// steps of two 1 KiB VNNI tiles).
template <class Tiles>
TPULLM_TARGET_AMX void amx_bf16_block(const std::uint16_t* a, std::int64_t lda,
                                      const std::uint8_t* b, std::int64_t Kq, float* c) {
  Tiles::template zero<0>();
  Tiles::template zero<1>();
  Tiles::template zero<2>();
  Tiles::template zero<3>();
  const std::int64_t sa = lda * 2;
  for (std::int64_t k = 0; k < Kq; k += 32) {
    const std::uint8_t* bk = b + k / 32 * 2048;
    Tiles::template load<4>(a + k, sa);
    Tiles::template load<5>(a + 16 * lda + k, sa);
    Tiles::template load<6>(bk, 64);
    Tiles::template load<7>(bk + 1024, 64);
    Tiles::template dpbf16ps<0, 4, 6>();
    Tiles::template dpbf16ps<1, 4, 7>();
    Tiles::template dpbf16ps<2, 5, 6>();
    Tiles::template dpbf16ps<3, 5, 7>();
  }
  Tiles::template store<0>(c, 128);
  Tiles::template store<1>(c + 16, 128);
  Tiles::template store<2>(c + 16 * 32, 128);
  Tiles::template store<3>(c + 16 * 32 + 16, 128);
}

/// Tile configuration of the int8 loop for a k step of `kst` bytes (4 <= kst <= 64, kst % 4 ==
/// 0) and `nd` A operands (digits of x, or row tiles): C 0..2 nd - 1 (16 x 16 int32: operand d,
/// column half h in C 2d + h); for nd <= 2, A 4 (and 5) (16 rows x kst bytes) and B 6-7 (kst / 4
/// quads x 16 columns); for nd = 3 one A tile (6) and one B tile (7), reloaded.
inline amx::TileConfig amx_int_config(int kst, int nd = 2) {
  amx::TileConfig c;
  for (int t = 0; t < 2 * nd; ++t)
    c.set(t, 16, 64);
  if (nd == 3) {
    c.set(6, 16, kst).set(7, kst / 4, 64);
  } else {
    c.set(4, 16, kst).set(6, kst / 4, 64).set(7, kst / 4, 64);
    if (nd == 2)
      c.set(5, 16, kst);
  }
  return c;
}

/// C += A x B on the tile unit, with the weights signed (TDPBSSD) or unsigned (TDPBSUD).
template <class Tiles, bool WSigned, int C, int A, int B>
TPULLM_TARGET_AMX TPULLM_ALWAYS_INLINE void amx_int_dp() {
  if constexpr (WSigned)
    Tiles::template dpbssd<C, A, B>();
  else
    Tiles::template dpbsud<C, A, B>();
}

/// Three digits x one column half H of B for one k step: B's half into tile 7, each digit d's
/// rows (at ad + d * dl) into tile 6 in turn, C 2d + H += A x B.
template <class Tiles, bool WSigned, int H>
TPULLM_TARGET_AMX TPULLM_ALWAYS_INLINE void amx_int_half3(const std::int8_t* ad, std::int64_t lda,
                                                          std::int64_t dl, const std::uint8_t* bk) {
  Tiles::template load<7>(bk + 64 * H, 128);
  Tiles::template load<6>(ad, lda);
  amx_int_dp<Tiles, WSigned, H, 6, 7>();
  Tiles::template load<6>(ad + dl, lda);
  amx_int_dp<Tiles, WSigned, 2 + H, 6, 7>();
  Tiles::template load<6>(ad + 2 * dl, lda);
  amx_int_dp<Tiles, WSigned, 4 + H, 6, 7>();
}

/// One weight group of 16-row tiles and one panel: C[d][16][32] int32 = sum over the group's k
/// steps of A_d[16, kst] x B (quads of 32 columns, 128 bytes each), for ND = 1, 2 or 3 A
/// operands (digits of x; the W8A8 body passes two row tiles). ad: operand d's rows at
/// ad + d * dl (row stride lda bytes); b: the group's first quad; c: [ND][16][32].
template <class Tiles, bool WSigned, int ND = 2>
TPULLM_TARGET_AMX void amx_int_group(const std::int8_t* ad, std::int64_t lda, std::int64_t dl,
                                     const std::uint8_t* b, std::int64_t seg, int kst,
                                     std::int32_t* c) {
  static_assert(ND >= 1 && ND <= 3, "the int path takes one to three A operands");
  Tiles::template zero<0>();
  Tiles::template zero<1>();
  if constexpr (ND >= 2) {
    Tiles::template zero<2>();
    Tiles::template zero<3>();
  }
  if constexpr (ND == 3) {
    Tiles::template zero<4>();
    Tiles::template zero<5>();
  }
  for (std::int64_t k = 0; k < seg; k += kst) {
    const std::uint8_t* bk = b + k / 4 * 128;
    if constexpr (ND <= 2) {
      Tiles::template load<4>(ad + k, lda);
      if constexpr (ND == 2)
        Tiles::template load<5>(ad + dl + k, lda);
      Tiles::template load<6>(bk, 128);
      Tiles::template load<7>(bk + 64, 128);
      amx_int_dp<Tiles, WSigned, 0, 4, 6>();
      amx_int_dp<Tiles, WSigned, 1, 4, 7>();
      if constexpr (ND == 2) {
        amx_int_dp<Tiles, WSigned, 2, 5, 6>();
        amx_int_dp<Tiles, WSigned, 3, 5, 7>();
      }
    } else { // eight tiles hold six C: one column half of B at a time, the digits through A 6
      amx_int_half3<Tiles, WSigned, 0>(ad + k, lda, dl, bk);
      amx_int_half3<Tiles, WSigned, 1>(ad + k, lda, dl, bk);
    }
  }
  Tiles::template store<0>(c, 128);
  Tiles::template store<1>(c + 16, 128);
  if constexpr (ND >= 2) {
    Tiles::template store<2>(c + 512, 128);
    Tiles::template store<3>(c + 512 + 16, 128);
  }
  if constexpr (ND == 3) {
    Tiles::template store<4>(c + 1024, 128);
    Tiles::template store<5>(c + 1024 + 16, 128);
  }
}

template <class Tiles>
TPULLM_TARGET_AMX void amx_configure(const amx::TileConfig& cfg) {
  Tiles::configure(cfg);
}
template <class Tiles>
TPULLM_TARGET_AMX void amx_release() {
  Tiles::release();
}

// ---- generic bodies (compiled per backend wrapper) ------------------------------------------

/// Per-thread scratch of the AMX linear.
struct AmxScratch {
  std::vector<std::uint16_t> a16; ///< [MC][Kq] bf16 x block
  std::vector<std::uint8_t> b;    ///< one panel's weights in tile layout
  std::vector<float> c;           ///< [32][32] f32 or [MC][32] f32 group accumulators
  std::vector<std::int32_t> ci;   ///< [nd][16][32] int32 tiles of one group
  std::vector<std::int8_t> ad;    ///< [MC][nd][Kq] digits
  std::vector<float> s1;          ///< [MC][G]
  std::vector<std::int32_t> S;    ///< [MC][G][3] digit sums (digits past nd are 0)
};
inline AmxScratch& amx_scratch() {
  thread_local AmxScratch s;
  return s;
}

/// Writes a block of results: y[m][c0 + j] = v[i][j] (+ bias) (+ y if accumulating).
TPULLM_ALWAYS_INLINE void amx_store(const LinearArgs& a, std::int64_t m0, std::int64_t rows,
                                    std::int64_t p, const float* v, std::int64_t ldv) {
  const std::int64_t c0 = (p - a.v.p0) * kPanelCols;
  const std::int64_t nc = std::min<std::int64_t>(kPanelCols, a.v.w->N - p * kPanelCols);
  for (std::int64_t i = 0; i < rows; ++i) {
    float* yr = a.y + (m0 + i) * a.ldy + c0;
    const float* vr = v + i * ldv;
    for (std::int64_t j = 0; j < nc; ++j) {
      float r = vr[j];
      if (a.bias)
        r += a.bias[c0 + j];
      if (a.accumulate)
        r += yr[j];
      yr[j] = r;
    }
  }
}

/// bf16 weights: rows [ma, mb), panels [pa, pb) of the view.
template <class Tiles>
TPULLM_ALWAYS_INLINE void amx_bf16_body(const LinearArgs& a, std::int64_t ma, std::int64_t mb,
                                        std::int64_t pa, std::int64_t pb) {
  const PackedWeights& w = *a.v.w;
  const std::int64_t Kv = a.v.k1 - a.v.k0, Kq = (Kv + 31) / 32 * 32;
  AmxScratch& s = amx_scratch();
  s.a16.assign(static_cast<std::size_t>(kAmxMc * Kq), 0);
  s.b.resize(static_cast<std::size_t>(Kq * 64));
  s.c.resize(32 * 32);
  amx_configure<Tiles>(amx_bf16_config());
  for (std::int64_t m0 = ma; m0 < mb; m0 += kAmxMc) {
    const std::int64_t mc = std::min(kAmxMc, mb - m0);
    for (std::int64_t i = 0; i < kAmxMc; ++i) {
      std::uint16_t* dst = s.a16.data() + i * Kq;
      if (i < mc) {
        const float* xr = a.x + (m0 + i) * a.ldx;
        for (std::int64_t k = 0; k < Kv; ++k)
          dst[k] = amx_bf16_rne(xr[k]);
      } else {
        std::fill(dst, dst + Kv, std::uint16_t{0});
      }
    }
    for (std::int64_t p = pa; p < pb; ++p) {
      // VNNI pair layout: step t (32 rows), half h (16 columns), pair row r, column j: dword =
      // W[k][c] | W[k + 1][c] << 16 with k = 32t + 2r, c = 16h + j (rows past Kv are zero)
      const std::uint8_t* src = panel_row(w, p, a.v.k0);
      std::uint32_t* bd = reinterpret_cast<std::uint32_t*>(s.b.data());
      for (std::int64_t k = 0; k < Kq; k += 2) {
        std::uint32_t r0[16], r1[16];
        for (int j = 0; j < 16; ++j) {
          r0[j] = r1[j] = 0;
          if (k < Kv)
            std::memcpy(&r0[j], src + k * 64 + 4 * j, 4);
          if (k + 1 < Kv)
            std::memcpy(&r1[j], src + (k + 1) * 64 + 4 * j, 4);
        }
        std::uint32_t* t0 = bd + (k / 32) * 512 + (k % 32) / 2 * 16;
        std::uint32_t* t1 = t0 + 256;
        for (int j = 0; j < 16; ++j) { // panel dword j = col j (low half) | col j + 16 (high)
          t0[j] = (r0[j] & 0xFFFFu) | (r1[j] << 16);
          t1[j] = (r0[j] >> 16) | (r1[j] & 0xFFFF0000u);
        }
      }
      for (std::int64_t r = 0; r < mc; r += 32) {
        amx_bf16_block<Tiles>(s.a16.data() + r * Kq, Kq, s.b.data(), Kq, s.c.data());
        amx_store(a, m0 + r, std::min<std::int64_t>(32, mc - r), p, s.c.data(), 32);
      }
    }
  }
  amx_release<Tiles>();
}

/// Digits of x for the int path: rows [m0, m0 + mc) -> ad [MC][nd][Kq] (each group padded from
/// `seg` to `segp` rows with zeros), s1 [MC][G], S [MC][G][3]; nd = 3 (exact x) or 1
/// (XPrecision::int8), formed by the f32 operations of make_x_digits (the VNNI GEMV's digits).
TPULLM_ALWAYS_INLINE void amx_digits(const LinearArgs& a, std::int64_t m0, std::int64_t mc,
                                     std::int64_t Kv, std::int64_t seg, std::int64_t segp,
                                     std::int64_t G, int nd, AmxScratch& s) {
  const std::int64_t Kq = G * segp;
  s.ad.assign(static_cast<std::size_t>(kAmxMc * nd * Kq), 0);
  s.s1.assign(static_cast<std::size_t>(kAmxMc * G), 0.f);
  s.S.assign(static_cast<std::size_t>(kAmxMc * G * 3), 0);
  for (std::int64_t i = 0; i < mc; ++i) {
    const float* xr = a.x + (m0 + i) * a.ldx;
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t ks = g * seg, ke = std::min(Kv, ks + seg);
      float mx = 0.f;
      bool bad = false; // a NaN or an infinity in the group
      for (std::int64_t k = ks; k < ke; ++k) {
        bad |= !std::isfinite(xr[k]);
        mx = std::max(mx, std::abs(xr[k]));
      }
      if (bad) { // a NaN scale, so the row's outputs are NaN (as make_x_digits does)
        s.s1[static_cast<std::size_t>(i * G + g)] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      if (!(mx > 0.f))
        continue; // an all-zero group: scale 0
      const float s1 = mx / 127.0f, inv1 = 127.0f / mx;
      const float s2 = s1 * (1.0f / 256.0f), inv2 = inv1 * 256.0f, inv3 = inv2 * 256.0f;
      s.s1[static_cast<std::size_t>(i * G + g)] = s1;
      std::int8_t* d0 = s.ad.data() + (i * nd) * Kq + g * segp;
      std::int32_t sum[3] = {0, 0, 0};
      for (std::int64_t k = ks; k < ke; ++k) {
        const float v = xr[k];
        const float h = std::clamp(std::nearbyint(v * inv1), -127.0f, 127.0f);
        d0[k - ks] = static_cast<std::int8_t>(h);
        sum[0] += static_cast<std::int32_t>(h);
        if (nd == 1)
          continue;
        const float r1 = std::fma(-h, s1, v);
        const float l = std::clamp(std::nearbyint(r1 * inv2), -127.0f, 127.0f);
        const float r2 = std::fma(-l, s2, r1);
        const float t = std::clamp(std::nearbyint(r2 * inv3), -127.0f, 127.0f);
        d0[Kq + k - ks] = static_cast<std::int8_t>(l);
        d0[2 * Kq + k - ks] = static_cast<std::int8_t>(t);
        sum[1] += static_cast<std::int32_t>(l);
        sum[2] += static_cast<std::int32_t>(t);
      }
      std::copy(sum, sum + 3, s.S.data() + (i * G + g) * 3);
    }
  }
}

/// k step (bytes = rows) of the int path for groups of `seg` rows: the group itself when it
/// fits one tile row (<= 64), else 64 (groups padded to a multiple of 64).
inline int amx_int_kstep(std::int64_t seg) {
  return seg <= 64 ? static_cast<int>(seg) : 64;
}

/// int8 / int4 weights: rows [ma, mb), panels [pa, pb) of the view, x in ND digits.
template <WeightFormat F, class Tiles, int ND>
TPULLM_ALWAYS_INLINE void amx_int_body(const LinearArgs& a, std::int64_t ma, std::int64_t mb,
                                       std::int64_t pa, std::int64_t pb) {
  const PackedWeights& w = *a.v.w;
  const std::int64_t Kv = a.v.k1 - a.v.k0, seg = segment_rows(a.v);
  const std::int64_t G = (Kv + seg - 1) / seg;
  const int kst = amx_int_kstep(seg);
  const std::int64_t segp = (seg + kst - 1) / kst * kst, Kq = G * segp;
  AmxScratch& s = amx_scratch();
  s.b.resize(static_cast<std::size_t>(Kq * 32));
  s.c.resize(static_cast<std::size_t>(kAmxMc * 32));
  s.ci.resize(ND * 16 * 32);
  amx_configure<Tiles>(amx_int_config(kst, ND));
  const std::int64_t g0 = a.v.k0 / w.group_rows(); // first weight group of the view
  for (std::int64_t m0 = ma; m0 < mb; m0 += kAmxMc) {
    const std::int64_t mc = std::min(kAmxMc, mb - m0);
    amx_digits(a, m0, mc, Kv, seg, segp, G, ND, s);
    for (std::int64_t p = pa; p < pb; ++p) {
      // B quads: group g's quad q at (g * segp / 4 + q) * 128; byte 4c + j = row 4q + j, column
      // c (8-bit formats: the byte as stored; int4: the nibble, unsigned); padding rows are zero
      std::memset(s.b.data(), 0, s.b.size());
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t ks = g * seg, ke = std::min(Kv, ks + seg);
        std::uint8_t* dst = s.b.data() + g * segp * 32;
        if constexpr (is_byte_format(F)) {
          std::memcpy(dst, panel_row(w, p, a.v.k0 + ks), static_cast<std::size_t>((ke - ks) * 32));
        } else if constexpr (is_six_format(F)) {
          for (std::int64_t k = ks; k < ke; k += 16) { // one block -> four quads
            const std::uint8_t* b = panel_row(w, p, a.v.k0 + k);
            std::uint8_t* q0 = dst + (k - ks) / 4 * 128;
            for (int q = 0; q < 4; ++q) // quad q's byte i: column i / 4, row 4q + i % 4
              for (int i = 0; i < 128; ++i)
                q0[128 * q + i] = block_code6(b, 4 * q + i % 4, i / 4);
          }
        } else {
          for (std::int64_t k = ks; k < ke; k += 8) { // one octet -> two quads
            const std::uint8_t* o = panel_row(w, p, a.v.k0 + k);
            std::uint8_t* q0 = dst + (k - ks) / 4 * 128;
            for (int i = 0; i < 128; ++i) {
              q0[i] = o[i] & 0x0F;
              q0[128 + i] = o[i] >> 4;
            }
          }
        }
      }
      std::fill(s.c.begin(), s.c.end(), 0.f);
      for (std::int64_t r = 0; r < mc; r += 16) {
        float* acc = s.c.data() + r * 32;
        for (std::int64_t g = 0; g < G; ++g) {
          amx_int_group<Tiles, F == WeightFormat::int8, ND>(s.ad.data() + r * ND * Kq + g * segp,
                                                            ND * Kq, Kq, s.b.data() + g * segp * 32,
                                                            segp, kst, s.ci.data());
          GroupParams sc_buf;
          const float* sc = panel_scales(w, p, g0 + g, sc_buf);
          for (std::int64_t i = 0; i < std::min<std::int64_t>(16, mc - r); ++i) {
            const std::size_t mi = static_cast<std::size_t>((r + i) * G + g);
            const float s1 = s.s1[mi];
            const std::int32_t* S = s.S.data() + 3 * mi;
            // digit d of row i: C tile row at ci + d * 512 + i * 32. The f32 steps are the VNNI
            // GEMV's (vnni_group_sum, then t = fma(scale * s1, sum, t), the mins by fnmadd), as
            // explicit fmas: the same bits whatever the compiler contracts, and at one digit the
            // VNNI kernels' results exactly
            const std::int32_t* c0 = s.ci.data() + i * 32;
            GroupParams mn_buf;
            const float* mn = has_mins(F) ? panel_mins(w, p, g0 + g, mn_buf) : nullptr;
            const float xs = has_mins(F) ? vnni_digit_xsum(s1, S) : 0.f;
            for (int j = 0; j < 32; ++j) {
              std::int64_t z = 0; // each digit's C_d - z S_d exactly, in integers
              if constexpr (fixed_zero(F) != 0)
                z = fixed_zero(F);
              else if constexpr (has_zeros(F))
                z = panel_zeros(w, p, g0 + g)[j];
              float sum = static_cast<float>(std::int64_t{c0[j]} - z * S[0]);
              if constexpr (ND == 3) {
                const float f1 = static_cast<float>(std::int64_t{c0[512 + j]} - z * S[1]);
                const float f2 = static_cast<float>(std::int64_t{c0[1024 + j]} - z * S[2]);
                sum = std::fma(f2, 1.0f / 65536.0f, std::fma(f1, 1.0f / 256.0f, sum));
              }
              const float scs1 = sc[j] * s1;
              float t = std::fma(scs1, sum, acc[i * 32 + j]);
              if constexpr (has_mins(F))
                t = std::fma(-mn[j], xs, t);
              acc[i * 32 + j] = t;
            }
          }
        }
      }
      amx_store(a, m0, mc, p, s.c.data(), 32);
    }
  }
  amx_release<Tiles>();
}

template <WeightFormat F, class Tiles>
TPULLM_ALWAYS_INLINE void amx_linear_body(const LinearArgs& a, std::int64_t ma, std::int64_t mb,
                                          std::int64_t pa, std::int64_t pb) {
  if constexpr (F == WeightFormat::bf16)
    amx_bf16_body<Tiles>(a, ma, mb, pa, pb);
  else if constexpr (amx_format(F)) {
    if (a.xprec == XPrecision::int8)
      amx_int_body<F, Tiles, 1>(a, ma, mb, pa, pb);
    else
      amx_int_body<F, Tiles, 3>(a, ma, mb, pa, pb);
  }
}

/// The AMX linear on the emulator (portable code around the emulated tiles; any CPU).
template <WeightFormat F>
void amx_linear_emu(const LinearArgs& a, std::int64_t ma, std::int64_t mb, std::int64_t pa,
                    std::int64_t pb) {
  amx_linear_body<F, amx::Emu>(a, ma, mb, pa, pb);
}

#if TPULLM_X86
/// The AMX linear on the tile unit (AVX-512 code around the tiles; only where cpu_features().amx).
template <WeightFormat F>
TPULLM_TARGET_AVX512 void amx_linear_hw(const LinearArgs& a, std::int64_t ma, std::int64_t mb,
                                        std::int64_t pa, std::int64_t pb) {
  amx_linear_body<F, amx::Hw>(a, ma, mb, pa, pb);
}
#endif

/// Which AMX implementation a linear of format F with M rows takes now, if any: the emulator
/// while amx::ScopedEmulation is alive, the tile unit when the active Isa is amx.
/// Test hook: while true, integer weights take the tile unit too (on an AMX CPU), so the
/// hardware tests can run AMX-INT8; by default the tile unit takes bf16 weights only.
inline bool& amx_int_forced() {
  static bool on = false;
  return on;
}

/// Whether a linear of M rows over format f takes an AMX path, and on which implementation
/// (`emulated`: the tile emulator under amx::ScopedEmulation, any format of amx_format). On the
/// tile unit only bf16 weights take this body: its AMX-INT8 measured 1.4-4x slower than the VNNI
/// row kernels (x in int8) and the f32-FMA GEMM (exact x) in whole-model prefill on the first
/// AMX machine (docs/kernels.md, round 15). x in int8 on integer weights takes the tile unit
/// through the x8 kernel instead (detail/matmul_amx_x8.hpp, round 16).
inline bool amx_linear_applies(WeightFormat f, std::int64_t M, bool& emulated) {
  emulated = false;
  if (!amx_format(f) || M < kAmxMinRows)
    return false;
  if (amx::emulation_forced()) {
    emulated = true;
    return true;
  }
  return active_isa() == Isa::amx && (f == WeightFormat::bf16 || amx_int_forced());
}
template <WeightFormat F>
inline bool amx_linear_applies(std::int64_t M, bool& emulated) {
  return amx_linear_applies(F, M, emulated);
}

/// Runs the AMX linear for rows [ma, mb) x panels [pa, pb) on the chosen implementation.
template <WeightFormat F>
void amx_linear_range(const LinearArgs& a, bool emulated, std::int64_t ma, std::int64_t mb,
                      std::int64_t pa, std::int64_t pb) {
  if (ma >= mb || pa >= pb)
    return;
#if TPULLM_X86
  if (!emulated) {
    amx_linear_hw<F>(a, ma, mb, pa, pb);
    return;
  }
#endif
  (void)emulated;
  amx_linear_emu<F>(a, ma, mb, pa, pb);
}

} // namespace tpullm::kernels::detail
