#pragma once
/// Round-to-nearest (RTN) weight quantization at compile time: a float W: [K, N] becomes 4- or
/// 8-bit codes with one scale (and zero point) per group of `group_size` rows along K and per
/// output column, in the plain form the GPTQ / AWQ repacker consumes (QuantPlain), so quantized
/// float checkpoints go through the same packing as direct-through ones.
///
/// With b bits, qmax = 2^b - 1, per group g and column n over the rows k of the group:
///   asymmetric: lo = min(0, min_k w), hi = max(0, max_k w), scale = (hi - lo) / qmax,
///               zero = clamp(round(-lo / scale), 0, qmax),
///               q = clamp(round(w / scale) + zero, 0, qmax)           (w ~= (q - zero) * scale)
///   symmetric : scale = max_k |w| / (2^(b-1) - 1), zero = 2^(b-1),
///               q = clamp(round(w / scale), -(2^(b-1) - 1), 2^(b-1) - 1) + zero
/// (the range includes 0, as GPTQ's quantizer does, so an all-zero column is exact). A group
/// whose values are all zero gets scale 1 (codes equal to the zero point). round() is
/// std::nearbyint (ties to even).

#include <cstdint>
#include <span>

#include "tpullm/conversion/quant_repack.hpp"

namespace tpullm::conversion {

/// How a float weight is quantized by RTN.
struct RtnOptions {
  int bits = 4;                ///< 4 or 8
  std::int64_t group_size = 0; ///< rows per group along K; 0 = one group (per output channel)
  bool symmetric = false;      ///< no zero point (zero fixed at 2^(bits-1))
};

/// RTN-quantizes W: [K, N] row-major f32 (W[k][n] = w[k * N + n]) into plain codes, scales
/// [G, N] and zeros [G, N] (G = K / group, natural g_idx). Throws Error(invalid_input) when the
/// sizes disagree, bits is not 4 or 8, or the group size does not divide K / is not a multiple
/// of 8, and when a value is not finite.
QuantPlain rtn_quantize(std::span<const float> w, std::int64_t K, std::int64_t N,
                        const RtnOptions& o);

} // namespace tpullm::conversion
