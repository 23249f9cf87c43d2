#pragma once
/// Portable path of the linear kernels: raw row-group decoding (scalar), the GEMV and the GEMM
/// micro-kernel on xsimd vectors (detail/portable_simd.hpp), block dequantization and x packing
/// into MR-row strips.

#include "tpullm/kernels/detail/matmul_common.hpp"
#include "tpullm/kernels/detail/portable_simd.hpp"

namespace tpullm::kernels::detail {

/// Raw values of one row group (row_group(F) rows) as f32: out[j][32] for row j of the group.
/// Ints are not scaled (int8 signed q, int8_asym / int8_min unsigned codes, int4 unsigned
/// nibbles, int6 unsigned codes); columns in natural order.
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
  } else if constexpr (F == WeightFormat::int8_asym || F == WeightFormat::int8_min) {
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 32; ++c)
        out[j * 32 + c] = static_cast<float>(r[4 * c + j]);
  } else if constexpr (is_six_format(F)) {
    for (int i = 0; i < 16; ++i)
      for (int c = 0; c < 32; ++c)
        out[i * 32 + c] = static_cast<float>(block_code6(r, i, c));
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
  if constexpr (fixed_zero(F) != 0)
    return static_cast<float>(fixed_zero(F));
  else if constexpr (has_zeros(F))
    return static_cast<float>(panel_zeros(w, p, g)[c]);
  else
    return 0.0f;
}

template <WeightFormat F>
void gemv_portable(const LinearArgs& a, std::int64_t pa, std::int64_t pb) {
  constexpr std::int64_t RG = row_group(F);
  const PackedWeights& w = *a.v.w;
  const std::int64_t N = w.N, rb = row_bytes(F);
  float rows[16 * 32];
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
        constexpr int NV = static_cast<int>(32 / kPW);
        PVec av[NV];
        for (int c = 0; c < NV; ++c)
          av[c] = PVec(0.f);
        for (std::int64_t k = ks; k < ke; k += RG) {
          const float* rp = rows;
          if constexpr (F == WeightFormat::f32)
            rp = reinterpret_cast<const float*>(panel_row(w, p, k)); // used in place
          else
            decode_rows_raw<F>(panel_row(w, p, k), rows);
          for (std::int64_t j = 0; j < RG; ++j) {
            const PVec xv(xr[k + j - a.v.k0]);
            for (int c = 0; c < NV; ++c)
              av[c] = pv_fma(xv, pv_load(rp + j * 32 + c * kPW), av[c]);
          }
        }
        float acc[32];
        for (int c = 0; c < NV; ++c)
          pv_store(acc + c * kPW, av[c]);
        if constexpr (is_quantized(F)) {
          const std::int64_t g = ks / w.group_rows();
          GroupParams s_buf;
          const float* s = panel_scales(w, p, g, s_buf);
          const float xs = a.xsum[m * a.xsum_ld + gi];
          if constexpr (has_mins(F)) { // sum_k x (u s - m) = s acc - m xs
            GroupParams mn_buf;
            const float* mn = panel_mins(w, p, g, mn_buf);
            for (int c = 0; c < 32; ++c)
              t[c] += s[c] * acc[c] - mn[c] * xs;
          } else {
            for (int c = 0; c < 32; ++c)
              t[c] += s[c] * (acc[c] - zero_point<F>(w, p, g, c) * xs);
          }
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
      GroupParams s_buf;
      const float* s = panel_scales(w, p, g, s_buf);
      if constexpr (has_mins(F)) {
        GroupParams mn_buf;
        const float* mn = panel_mins(w, p, g, mn_buf);
        for (std::int64_t j = 0; j < RG; ++j)
          for (int c = 0; c < 32; ++c)
            o[j * 32 + c] = o[j * 32 + c] * s[c] - mn[c];
      } else {
        for (std::int64_t j = 0; j < RG; ++j)
          for (int c = 0; c < 32; ++c)
            o[j * 32 + c] = (o[j * 32 + c] - zero_point<F>(w, p, g, c)) * s[c];
      }
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

/// How the GEMM tile of K block kb, columns [c0, c0 + nc) of the view, starts: from y (a later K
/// block, or accumulate), else from the bias (copied into bias_pad [32], zero past nc) or zero.
inline TileInit block_init(const LinearArgs& a, std::int64_t kb, std::int64_t c0, int nc,
                           float* bias_pad) {
  if (kb != a.v.k0 || a.accumulate)
    return TileInit::load;
  if (!a.bias)
    return TileInit::zero;
  std::fill(bias_pad, bias_pad + 32, 0.0f);
  std::copy(a.bias + c0, a.bias + c0 + nc, bias_pad);
  return TileInit::bias;
}

/// MR x 32 micro-kernel of the portable path: rows of C in 16-column halves of PVec
/// accumulators (4 rows x 16 columns = 16 SSE registers).
inline void micro_portable(const float* ap, const float* b, std::int64_t kc, int rows, float* c,
                           std::int64_t ldc, int ncols, TileInit init, const float* bias, int MR) {
  constexpr int NV = static_cast<int>(16 / kPW); // vectors per 16-column half
  for (int half = 0; half < 2 && 16 * half < ncols; ++half) {
    const int c0 = 16 * half;
    PVec acc[4][NV];
    for (int i0 = 0; i0 < rows; i0 += 4) {
      const int nr = std::min(4, rows - i0);
      for (int i = 0; i < 4; ++i)
        for (int v = 0; v < NV; ++v) {
          float t[kPW];
          for (std::int64_t l = 0; l < kPW; ++l) {
            const int j = c0 + v * static_cast<int>(kPW) + static_cast<int>(l);
            float e = 0.0f;
            if (i < nr && j < ncols) {
              if (init == TileInit::bias)
                e = bias[j];
              else if (init == TileInit::load)
                e = c[(i0 + i) * ldc + j];
            }
            t[l] = e;
          }
          acc[i][v] = pv_load(t);
        }
      for (std::int64_t k = 0; k < kc; ++k) {
        PVec bv[NV];
        for (int v = 0; v < NV; ++v)
          bv[v] = pv_load(b + k * 32 + c0 + v * kPW);
        for (int i = 0; i < 4; ++i) {
          const PVec a(i < nr ? ap[k * MR + i0 + i] : 0.0f);
          for (int v = 0; v < NV; ++v)
            acc[i][v] = pv_fma(a, bv[v], acc[i][v]);
        }
      }
      for (int i = 0; i < nr; ++i) {
        float t[16];
        for (int v = 0; v < NV; ++v)
          pv_store(t + v * kPW, acc[i][v]);
        for (int j = 0; j < std::min(16, ncols - c0); ++j)
          c[(i0 + i) * ldc + c0 + j] = t[j];
      }
    }
  }
}

} // namespace tpullm::kernels::detail
