#pragma once
/// Portable (scalar) path of the linear kernels: raw row-group decoding, the GEMV, block
/// dequantization, x packing into MR-row strips and the GEMM micro-kernel.

#include "tpullm/kernels/detail/matmul_common.hpp"

namespace tpullm::kernels::detail {

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

} // namespace tpullm::kernels::detail
