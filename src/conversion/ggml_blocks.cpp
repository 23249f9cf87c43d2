// ggml block types -> QuantPlain (decode_ggml_rows) and a reference dequantization
// (dequantize_ggml). Layouts as ggml-common.h defines the blocks (little-endian, packed):
//   Q4_0   d f16 | qs[16]              element j: qs[j] & 15, element j+16: qs[j] >> 4; w = (q-8)*d
//   Q4_1   d f16 | m f16 | qs[16]      as Q4_0 with q unsigned;                     w = q*d + m
//   Q5_0   d f16 | qh u32 | qs[16]     fifth bit of element j: bit j of qh;         w = (q-16)*d
//   Q5_1   d f16 | m f16 | qh | qs[16]                                              w = q*d + m
//   Q8_0   d f16 | qs int8[32]                                                      w = q*d
//   Q2_K   sc[16] | qs[64] | d | dmin  sub-block s = elements 16s..16s+15: (sc[s] & 15) * d,
//                                      min (sc[s] >> 4) * dmin; 2-bit codes:       w = q*dl - ml
//   Q3_K   hmask[32] | qs[64] | sc[12] | d   16 six-bit scales (minus 32); 2 low bits in qs, the
//                                      third bit from hmask (clear = minus 4):     w = dl*q
//   Q4_K   d | dmin | sc[12] | qs[128] 8 sub-blocks of 32: six-bit scale and min packed as
//                                      ggml's get_scale_min_k4;                    w = dl*q - ml
//   Q5_K   d | dmin | sc[12] | qh[32] | qs[128]   as Q4_K with a fifth bit from qh
//   Q6_K   ql[128] | qh[64] | sc int8[16] | d   6-bit codes minus 32, sub-block 16: w = d*sc*q
//   IQ4_NL d | qs[16]                  codebook entries kIq4Values[nibble];         w = d*v
//   IQ4_XS d | scales_h u16 | scales_l[4] | qs[128]   8 sub-blocks of 32, six-bit scale minus 32
// In the 2-bit and 3-bit K-quants a 128-element half of the super-block takes 32 bytes of qs:
// element e reads qs[32*(e/128) + e%32] shifted right by 2*((e%128)/32) (Q3_K's third bit is
// hmask[e%32] bit e/32); Q4_K / Q5_K read 64-element chunks from 32 bytes (low nibbles, then
// high), Q5_K's fifth bit is qh[e%32] bit e/32; Q6_K reads ql[64*(e/128) + 32*((e/32)%2) + e%32]
// (low nibble for (e%128) < 64, else high) and qh[32*(e/128) + e%32] bits 2*((e%128)/32).

#include "tpullm/conversion/ggml_blocks.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <optional>
#include <string>

#include "tpullm/support/error.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::conversion::ggml_impl {
namespace {

/// ggml's IQ4_NL / IQ4_XS codebook (kvalues_iq4nl).
constexpr std::array<std::int8_t, 16> kIq4Values = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                    1,    13,   25,  38,  53,  69,  89,  113};

std::uint8_t byte_at(const std::byte* p, std::size_t i) {
  return std::to_integer<std::uint8_t>(p[i]);
}

std::uint16_t le16(const std::byte* p) {
  return static_cast<std::uint16_t>(byte_at(p, 0) | (byte_at(p, 1) << 8));
}

std::uint32_t le32(const std::byte* p) {
  return static_cast<std::uint32_t>(byte_at(p, 0)) |
         (static_cast<std::uint32_t>(byte_at(p, 1)) << 8) |
         (static_cast<std::uint32_t>(byte_at(p, 2)) << 16) |
         (static_cast<std::uint32_t>(byte_at(p, 3)) << 24);
}

float half_at(const std::byte* p) {
  return f16_to_f32(le16(p));
}

/// Q4_K / Q5_K six-bit scale and min of sub-block s (0..7) from the 12 packed bytes: bytes 0-3
/// hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7, bytes 4-7 likewise the mins,
/// bytes 8-11 the low 4 bits of scales 4-7 (low nibble) and mins 4-7 (high nibble).
void k4_scale_min(const std::byte* sc, int s, int& scale, int& min) {
  if (s < 4) {
    scale = byte_at(sc, s) & 63;
    min = byte_at(sc, s + 4) & 63;
  } else {
    scale = (byte_at(sc, s + 4) & 15) | ((byte_at(sc, s - 4) >> 6) << 4);
    min = (byte_at(sc, s + 4) >> 4) | ((byte_at(sc, s) >> 6) << 4);
  }
}

/// Q3_K six-bit scale j (0..15) minus 32: low 4 bits in the nibbles of bytes 0-7 (scales 0-7 the
/// low nibbles, 8-15 the high), high 2 bits in bytes 8-11 (byte 8 + j%4, bits 2*(j/4)).
int q3k_scale(const std::byte* sc, int j) {
  const int low = j < 8 ? (byte_at(sc, j) & 15) : (byte_at(sc, j - 8) >> 4);
  const int high = (byte_at(sc, 8 + j % 4) >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

/// The container of `t` (ggml_packing); throws unsupported naming a type that has none.
GgmlPacking container_of(GgmlType t) {
  const GgmlPacking c = ggml_packing(t);
  if (c.bits != 0)
    return c;
  if (ggml_is_float(t))
    throw_error(ErrorKind::unsupported, "ggml " + std::string(ggml_name(t)),
                "a plain float type has no blocks to decode (import it as a plain weight)");
  throw_error(ErrorKind::unsupported, "ggml " + std::string(ggml_name(t)),
              "this ggml type is not importable (importable block types: Q4_0, Q4_1, Q5_0, Q5_1, "
              "Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)");
}

/// One decoded block: codes as QuantPlain stores them, and per group scale (and min).
struct Decoded {
  std::array<std::uint8_t, 256> code{};
  std::array<float, 16> scale{};
  std::array<float, 16> min{};
  // Two-level types: scale[s] == super_scale * scale_code[s] (min likewise), exactly.
  float super_scale = 0, super_min = 0;
  std::array<std::int8_t, 16> scale_code{};
  std::array<std::int8_t, 16> min_code{};
};

/// Sets group s of a two-level block: scale d * sc and min dmin * m, as ggml forms them.
void set_two_level(Decoded& o, int s, float d, int sc, float dmin = 0, int m = 0) {
  o.super_scale = d;
  o.super_min = dmin;
  o.scale_code[static_cast<std::size_t>(s)] = static_cast<std::int8_t>(sc);
  o.min_code[static_cast<std::size_t>(s)] = static_cast<std::int8_t>(m);
  o.scale[static_cast<std::size_t>(s)] = d * static_cast<float>(sc);
  o.min[static_cast<std::size_t>(s)] = dmin * static_cast<float>(m);
}

/// Decodes one block of type `t` at `b`. Symmetric codes are value + 8 (4-bit), value + 32
/// (6-bit: Q6_K's codes as stored) or value + 128 (8-bit); "scale and min" codes are ggml's
/// unsigned codes with min = what ggml subtracts.
void decode_block(GgmlType t, const std::byte* b, Decoded& o) {
  switch (t) {
  case GgmlType::q4_0:
    o.scale[0] = half_at(b);
    for (int j = 0; j < 16; ++j) {
      o.code[j] = byte_at(b, 2 + j) & 15;
      o.code[j + 16] = byte_at(b, 2 + j) >> 4;
    }
    return;
  case GgmlType::q4_1:
    o.scale[0] = half_at(b);
    o.min[0] = -half_at(b + 2); // w = q*d + m = q*d - (-m), exactly
    for (int j = 0; j < 16; ++j) {
      o.code[j] = byte_at(b, 4 + j) & 15;
      o.code[j + 16] = byte_at(b, 4 + j) >> 4;
    }
    return;
  case GgmlType::q5_0:
  case GgmlType::q5_1: {
    const bool with_min = t == GgmlType::q5_1;
    const int off = with_min ? 4 : 2;
    o.scale[0] = half_at(b);
    if (with_min)
      o.min[0] = -half_at(b + 2);
    const std::uint32_t qh = le32(b + off);
    const int bias = with_min ? 0 : 32 - 16; // symmetric: (q - 16) + 32, int6_sym's codes
    for (int j = 0; j < 16; ++j) {
      const int lo = (byte_at(b, off + 4 + j) & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi =
          (byte_at(b, off + 4 + j) >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      o.code[j] = static_cast<std::uint8_t>(lo + bias);
      o.code[j + 16] = static_cast<std::uint8_t>(hi + bias);
    }
    return;
  }
  case GgmlType::q8_0:
    o.scale[0] = half_at(b);
    for (int j = 0; j < 32; ++j)
      o.code[j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(byte_at(b, 2 + j)) + 128);
    return;
  case GgmlType::q2_k: {
    const float d = half_at(b + 80), dmin = half_at(b + 82);
    for (int s = 0; s < 16; ++s)
      set_two_level(o, s, d, byte_at(b, s) & 15, dmin, byte_at(b, s) >> 4);
    for (int e = 0; e < 256; ++e)
      o.code[e] = (byte_at(b, 16 + 32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 3;
    return;
  }
  case GgmlType::q3_k: {
    const float d = half_at(b + 108);
    for (int s = 0; s < 16; ++s)
      set_two_level(o, s, d, q3k_scale(b + 96, s));
    for (int e = 0; e < 256; ++e) {
      const int low = (byte_at(b, 32 + 32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 3;
      const int high = (byte_at(b, e % 32) >> (e / 32)) & 1;
      o.code[e] = static_cast<std::uint8_t>(low + (high ? 0 : -4) + 8);
    }
    return;
  }
  case GgmlType::q4_k:
  case GgmlType::q5_k: {
    const bool five = t == GgmlType::q5_k;
    const float d = half_at(b), dmin = half_at(b + 2);
    for (int s = 0; s < 8; ++s) {
      int sc = 0, m = 0;
      k4_scale_min(b + 4, s, sc, m);
      set_two_level(o, s, d, sc, dmin, m);
    }
    const std::byte* qs = b + (five ? 48 : 16);
    for (int e = 0; e < 256; ++e) {
      const std::uint8_t byte = byte_at(qs, 32 * (e / 64) + e % 32);
      int q = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
      if (five)
        q |= ((byte_at(b, 16 + e % 32) >> (e / 32)) & 1) << 4;
      o.code[e] = static_cast<std::uint8_t>(q);
    }
    return;
  }
  case GgmlType::q6_k: {
    const float d = half_at(b + 208);
    for (int s = 0; s < 16; ++s)
      set_two_level(o, s, d, static_cast<std::int8_t>(byte_at(b, 192 + s)));
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, r = e % 128;
      const std::uint8_t lb = byte_at(b, 64 * half + 32 * ((r / 32) % 2) + r % 32);
      const int low = r < 64 ? (lb & 15) : (lb >> 4);
      const int high = (byte_at(b, 128 + 32 * half + r % 32) >> (2 * (r / 32))) & 3;
      o.code[e] = static_cast<std::uint8_t>(low | (high << 4)); // value + 32
    }
    return;
  }
  case GgmlType::iq4_nl:
    o.scale[0] = half_at(b);
    for (int j = 0; j < 16; ++j) {
      o.code[j] = static_cast<std::uint8_t>(kIq4Values[byte_at(b, 2 + j) & 15] + 128);
      o.code[j + 16] = static_cast<std::uint8_t>(kIq4Values[byte_at(b, 2 + j) >> 4] + 128);
    }
    return;
  case GgmlType::iq4_xs: {
    const float d = half_at(b);
    const std::uint16_t sh = le16(b + 2);
    for (int s = 0; s < 8; ++s) {
      const int ls = ((byte_at(b, 4 + s / 2) >> (4 * (s % 2))) & 15) | (((sh >> (2 * s)) & 3) << 4);
      set_two_level(o, s, d, ls - 32);
      for (int j = 0; j < 16; ++j) {
        const std::uint8_t q = byte_at(b, 8 + 16 * s + j);
        o.code[32 * s + j] = static_cast<std::uint8_t>(kIq4Values[q & 15] + 128);
        o.code[32 * s + 16 + j] = static_cast<std::uint8_t>(kIq4Values[q >> 4] + 128);
      }
    }
    return;
  }
  case GgmlType::f32:
  case GgmlType::f16:
  case GgmlType::bf16:
  case GgmlType::q8_1:
  case GgmlType::q8_k:
  case GgmlType::iq2_xxs:
  case GgmlType::iq2_xs:
  case GgmlType::iq3_xxs:
  case GgmlType::iq1_s:
  case GgmlType::iq3_s:
  case GgmlType::iq2_s:
  case GgmlType::i8:
  case GgmlType::i16:
  case GgmlType::i32:
  case GgmlType::i64:
  case GgmlType::f64:
  case GgmlType::iq1_m:
  case GgmlType::tq1_0:
  case GgmlType::tq2_0:
  case GgmlType::mxfp4:
  case GgmlType::nvfp4:
  case GgmlType::q1_0:
  case GgmlType::q2_0:
    break;
  }
  throw_error(ErrorKind::internal, "ggml " + std::string(ggml_name(t)),
              "decode_block called for a type without a decoder");
}

/// Bytes of `rows` rows of `K` elements of `t`; throws invalid_input unless `have` is exactly that.
void expect_bytes(GgmlType t, std::int64_t K, std::int64_t rows, std::size_t have) {
  const std::string where = "ggml " + std::string(ggml_name(t));
  check(K > 0 && rows > 0, ErrorKind::invalid_input, where, "row length ", K, " and row count ",
        rows, " must be positive");
  const std::optional<std::int64_t> row = ggml_row_bytes(t, K);
  check(row.has_value(), ErrorKind::invalid_input, where, "row length ", K,
        " is not a multiple of the block of ", ggml_info(t).block_elems, " elements");
  check(*row <= std::numeric_limits<std::int64_t>::max() / rows, ErrorKind::invalid_input, where,
        rows, " rows of ", K, " elements overflow");
  check(static_cast<std::uint64_t>(have) == static_cast<std::uint64_t>(*row * rows),
        ErrorKind::invalid_input, where, rows, " rows of ", K, " elements take ", *row * rows,
        " bytes, got ", have);
}

} // namespace
} // namespace tpullm::conversion::ggml_impl

namespace tpullm::conversion {

QuantPlain decode_ggml_rows(GgmlType t, std::span<const std::byte> data, std::int64_t K,
                            std::int64_t N) {
  using namespace ggml_impl;
  const GgmlPacking c = container_of(t);
  expect_bytes(t, K, N, data.size());
  const GgmlTypeInfo info = ggml_info(t);
  const std::int64_t G = K / c.group_size, blocks = K / info.block_elems;
  const std::int64_t groups_per_block = info.block_elems / c.group_size;

  QuantPlain p;
  p.K = K;
  p.N = N;
  p.bits = c.bits;
  p.group_size = c.group_size;
  const auto KN = static_cast<std::size_t>(K * N), GN = static_cast<std::size_t>(G * N);
  p.q.resize(KN);
  p.scales.resize(GN);
  if (c.has_mins)
    p.mins.resize(GN);
  else
    p.zeros.assign(GN, static_cast<std::uint8_t>(1u << (c.bits - 1)));
  const bool two = c.super_rows > 0;
  if (two) { // one super-block per ggml block (256 elements)
    const auto SN = static_cast<std::size_t>(K / c.super_rows * N);
    p.super_rows = c.super_rows;
    p.scale_codes.resize(GN);
    p.super_scales.resize(SN);
    if (c.has_mins) {
      p.min_codes.resize(GN);
      p.super_mins.resize(SN);
    }
  }
  p.g_idx.resize(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k)
    p.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(k / c.group_size);

  // Row n of the file is column n of W: write W[k][n] for one block of every row of a tile of
  // rows at once, so the stores of a tile are runs of `tile` consecutive bytes of each W row.
  constexpr std::int64_t kTile = 16;
  Decoded dec[kTile];
  for (std::int64_t n0 = 0; n0 < N; n0 += kTile) {
    const std::int64_t rows = std::min(kTile, N - n0);
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      for (std::int64_t r = 0; r < rows; ++r)
        decode_block(t, data.data() + ((n0 + r) * blocks + blk) * info.block_bytes, dec[r]);
      const std::int64_t k0 = blk * info.block_elems, g0 = blk * groups_per_block;
      for (std::int64_t e = 0; e < info.block_elems; ++e) {
        std::uint8_t* dst = p.q.data() + (k0 + e) * N + n0;
        for (std::int64_t r = 0; r < rows; ++r)
          dst[r] = dec[r].code[static_cast<std::size_t>(e)];
      }
      for (std::int64_t g = 0; g < groups_per_block; ++g)
        for (std::int64_t r = 0; r < rows; ++r) {
          const auto at = static_cast<std::size_t>((g0 + g) * N + n0 + r);
          p.scales[at] = dec[r].scale[static_cast<std::size_t>(g)];
          if (c.has_mins)
            p.mins[at] = dec[r].min[static_cast<std::size_t>(g)];
          if (two) {
            p.scale_codes[at] = dec[r].scale_code[static_cast<std::size_t>(g)];
            if (c.has_mins)
              p.min_codes[at] = dec[r].min_code[static_cast<std::size_t>(g)];
          }
        }
      if (two)
        for (std::int64_t r = 0; r < rows; ++r) {
          const auto at = static_cast<std::size_t>(blk * N + n0 + r);
          p.super_scales[at] = dec[r].super_scale;
          if (c.has_mins)
            p.super_mins[at] = dec[r].super_min;
        }
    }
  }
  return p;
}

} // namespace tpullm::conversion

// The reference dequantization: written block by block in the order ggml's dequantize_row_*
// walks a block, with each output's f32 expression as ggml writes it (the tests compare it with
// ggml's own output bit for bit, and with QuantPlain::dequantize of decode_ggml_rows).
namespace tpullm::conversion::ggml_ref {
namespace {

using ggml_impl::byte_at;
using ggml_impl::half_at;
using ggml_impl::kIq4Values;

void ref_q4_0(const std::byte* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((byte_at(b, 2 + j) & 15) - 8) * d;
    y[j + 16] = static_cast<float>((byte_at(b, 2 + j) >> 4) - 8) * d;
  }
}

void ref_q4_1(const std::byte* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(byte_at(b, 4 + j) & 15) * d + m;
    y[j + 16] = static_cast<float>(byte_at(b, 4 + j) >> 4) * d + m;
  }
}

/// Q5_0 (no min: codes minus 16) and Q5_1 (codes as stored, plus m).
void ref_q5(const std::byte* b, float* y, bool with_min) {
  const float d = half_at(b);
  const float m = with_min ? half_at(b + 2) : 0.0f;
  const std::byte* qh = b + (with_min ? 4 : 2);
  const std::byte* qs = qh + 4;
  std::uint32_t h = 0;
  for (int i = 3; i >= 0; --i)
    h = (h << 8) | byte_at(qh, static_cast<std::size_t>(i));
  for (int j = 0; j < 16; ++j) {
    const int x0 = (byte_at(qs, j) & 0x0F) | static_cast<int>((h >> j) << 4 & 0x10);
    const int x1 = (byte_at(qs, j) >> 4) | static_cast<int>((h >> (j + 12)) & 0x10);
    if (with_min) {
      y[j] = static_cast<float>(x0) * d + m;
      y[j + 16] = static_cast<float>(x1) * d + m;
    } else {
      y[j] = static_cast<float>(x0 - 16) * d;
      y[j + 16] = static_cast<float>(x1 - 16) * d;
    }
  }
}

void ref_q8_0(const std::byte* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j)
    y[j] = static_cast<float>(static_cast<std::int8_t>(byte_at(b, 2 + j))) * d;
}

void ref_q2_k(const std::byte* b, float* y) {
  const std::byte* sc = b;
  const std::byte* q = b + 16;
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  int is = 0;
  for (int half = 0; half < 2; ++half, q += 32)
    for (int shift = 0; shift < 8; shift += 2)
      for (int part = 0; part < 2; ++part, ++is) {
        const float dl = d * static_cast<float>(byte_at(sc, is) & 0xF);
        const float ml = dmin * static_cast<float>(byte_at(sc, is) >> 4);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>((byte_at(q, 16 * part + l) >> shift) & 3) - ml;
      }
}

void ref_q3_k(const std::byte* b, float* y) {
  const std::byte* hm = b;
  const std::byte* q = b + 32;
  const float d = half_at(b + 108);
  // The 16 scales: unpack the 12 bytes into 16 six-bit values, as ggml's aux words do.
  std::array<int, 16> scales{};
  for (int i = 0; i < 4; ++i) {
    const int hi = byte_at(b, 96 + 8 + i);
    scales[i] = (byte_at(b, 96 + i) & 0xF) | ((hi & 3) << 4);
    scales[4 + i] = (byte_at(b, 96 + 4 + i) & 0xF) | (((hi >> 2) & 3) << 4);
    scales[8 + i] = (byte_at(b, 96 + i) >> 4) | (((hi >> 4) & 3) << 4);
    scales[12 + i] = (byte_at(b, 96 + 4 + i) >> 4) | (((hi >> 6) & 3) << 4);
  }
  int is = 0;
  unsigned mask = 1;
  for (int half = 0; half < 2; ++half, q += 32)
    for (int shift = 0; shift < 8; shift += 2, mask <<= 1)
      for (int part = 0; part < 2; ++part, ++is) {
        const float dl = d * static_cast<float>(scales[static_cast<std::size_t>(is)] - 32);
        for (int l = 0; l < 16; ++l) {
          const int low = (byte_at(q, 16 * part + l) >> shift) & 3;
          const int sub = (byte_at(hm, 16 * part + l) & mask) ? 0 : 4;
          *y++ = dl * static_cast<float>(low - sub);
        }
      }
}

/// Q4_K (qh == nullptr) and Q5_K.
void ref_q45_k(const std::byte* b, float* y, bool five) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const std::byte* sc = b + 4;
  const std::byte* qh = b + 16;
  const std::byte* q = b + (five ? 48 : 16);
  unsigned bit_lo = 1, bit_hi = 2;
  for (int chunk = 0; chunk < 4; ++chunk, q += 32, bit_lo <<= 2, bit_hi <<= 2) {
    // get_scale_min_k4 for sub-blocks 2*chunk and 2*chunk + 1.
    std::array<float, 2> dl{}, ml{};
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * chunk + h;
      int s = 0, m = 0;
      if (j < 4) {
        s = byte_at(sc, j) & 63;
        m = byte_at(sc, j + 4) & 63;
      } else {
        s = (byte_at(sc, j + 4) & 0xF) | ((byte_at(sc, j - 4) >> 6) << 4);
        m = (byte_at(sc, j + 4) >> 4) | ((byte_at(sc, j) >> 6) << 4);
      }
      dl[static_cast<std::size_t>(h)] = d * static_cast<float>(s);
      ml[static_cast<std::size_t>(h)] = dmin * static_cast<float>(m);
    }
    for (int l = 0; l < 32; ++l) {
      const int hb = five && (byte_at(qh, l) & bit_lo) ? 16 : 0;
      *y++ = dl[0] * static_cast<float>((byte_at(q, l) & 0xF) + hb) - ml[0];
    }
    for (int l = 0; l < 32; ++l) {
      const int hb = five && (byte_at(qh, l) & bit_hi) ? 16 : 0;
      *y++ = dl[1] * static_cast<float>((byte_at(q, l) >> 4) + hb) - ml[1];
    }
  }
}

void ref_q6_k(const std::byte* b, float* y) {
  const float d = half_at(b + 208);
  const std::byte* ql = b;
  const std::byte* qh = b + 128;
  const std::byte* sc = b + 192;
  for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int h = byte_at(qh, l);
      const int q1 = ((byte_at(ql, l) & 0xF) | ((h & 3) << 4)) - 32;
      const int q2 = ((byte_at(ql, l + 32) & 0xF) | (((h >> 2) & 3) << 4)) - 32;
      const int q3 = ((byte_at(ql, l) >> 4) | (((h >> 4) & 3) << 4)) - 32;
      const int q4 = ((byte_at(ql, l + 32) >> 4) | (((h >> 6) & 3) << 4)) - 32;
      const auto s = [&](int i) {
        return static_cast<float>(
            static_cast<std::int8_t>(byte_at(sc, static_cast<std::size_t>(i))));
      };
      y[l] = d * s(is) * static_cast<float>(q1);
      y[l + 32] = d * s(is + 2) * static_cast<float>(q2);
      y[l + 64] = d * s(is + 4) * static_cast<float>(q3);
      y[l + 96] = d * s(is + 6) * static_cast<float>(q4);
    }
}

void ref_iq4_nl(const std::byte* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Values[byte_at(b, 2 + j) & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Values[byte_at(b, 2 + j) >> 4]);
  }
}

void ref_iq4_xs(const std::byte* b, float* y) {
  const float d = half_at(b);
  const unsigned sh = ggml_impl::le16(b + 2);
  const std::byte* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
    const int ls = ((byte_at(b, 4 + ib / 2) >> (4 * (ib % 2))) & 0xF) |
                   static_cast<int>(((sh >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIq4Values[byte_at(qs, j) & 0xF]);
      y[j + 16] = dl * static_cast<float>(kIq4Values[byte_at(qs, j) >> 4]);
    }
  }
}

/// Dequantizes one block (or one element of a plain type) of `t` at `b` into y.
void ref_block(GgmlType t, const std::byte* b, float* y) {
  switch (t) {
  case GgmlType::f32:
    *y = std::bit_cast<float>(ggml_impl::le32(b));
    return;
  case GgmlType::f16:
    *y = half_at(b);
    return;
  case GgmlType::bf16:
    *y = bf16_to_f32(ggml_impl::le16(b));
    return;
  case GgmlType::q4_0:
    return ref_q4_0(b, y);
  case GgmlType::q4_1:
    return ref_q4_1(b, y);
  case GgmlType::q5_0:
    return ref_q5(b, y, false);
  case GgmlType::q5_1:
    return ref_q5(b, y, true);
  case GgmlType::q8_0:
    return ref_q8_0(b, y);
  case GgmlType::q2_k:
    return ref_q2_k(b, y);
  case GgmlType::q3_k:
    return ref_q3_k(b, y);
  case GgmlType::q4_k:
    return ref_q45_k(b, y, false);
  case GgmlType::q5_k:
    return ref_q45_k(b, y, true);
  case GgmlType::q6_k:
    return ref_q6_k(b, y);
  case GgmlType::iq4_nl:
    return ref_iq4_nl(b, y);
  case GgmlType::iq4_xs:
    return ref_iq4_xs(b, y);
  case GgmlType::q8_1:
  case GgmlType::q8_k:
  case GgmlType::iq2_xxs:
  case GgmlType::iq2_xs:
  case GgmlType::iq3_xxs:
  case GgmlType::iq1_s:
  case GgmlType::iq3_s:
  case GgmlType::iq2_s:
  case GgmlType::i8:
  case GgmlType::i16:
  case GgmlType::i32:
  case GgmlType::i64:
  case GgmlType::f64:
  case GgmlType::iq1_m:
  case GgmlType::tq1_0:
  case GgmlType::tq2_0:
  case GgmlType::mxfp4:
  case GgmlType::nvfp4:
  case GgmlType::q1_0:
  case GgmlType::q2_0:
    break;
  }
  throw_error(ErrorKind::unsupported, "ggml " + std::string(ggml_name(t)),
              "this ggml type is not importable");
}

} // namespace
} // namespace tpullm::conversion::ggml_ref

namespace tpullm::conversion {

std::vector<float> dequantize_ggml(GgmlType t, std::span<const std::byte> data, std::int64_t n) {
  const GgmlTypeInfo info = ggml_info(t);
  check(info.importable, ErrorKind::unsupported, "ggml " + std::string(info.name),
        "this ggml type is not importable");
  ggml_impl::expect_bytes(t, n, 1, data.size());
  std::vector<float> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n / info.block_elems; ++i)
    ggml_ref::ref_block(t, data.data() + i * info.block_bytes, y.data() + i * info.block_elems);
  return y;
}

} // namespace tpullm::conversion
