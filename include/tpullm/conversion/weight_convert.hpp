#pragma once
/// Weights as the Tpu dialect stores them, converted from the Top module's checkpoint weights
/// at compile time and shared by every module that uses them.
///
/// A packed Tpu weight `@name : tensor<KxNx<dtype>, panels [, quant<packed, ...>]>` has parts
///   "data"   u8  [bytes]            the 32-column panels (kernels/packed_weights.hpp)
///   "scales" f32 [P * G * 32]       quantized formats only
///   "zeros"  u8  [P * G * 32]       formats with zero points only (u4 / u8, zero_point)
///   "mins"   f32 [P * G * 32]       scale-and-min formats only (u4 / u8, min): w = u * s - min
///   "scale_codes" / "min_codes" i8 [P * G * 32]   two-level scales only (quant `super = S`):
///                                   then "scales" / "mins" are f32 [P * (K / S) * 32], one per
///                                   super-block of S rows, and a group's scale is super * code
///   "k_perm" i32 [K]                act-order only: original row of each packed row
/// and maps to kernels::PackedWeights without a copy (packed_view). GPTQ / AWQ weights go
/// through direct: their 4 / 8-bit codes, scales and zero points are repacked, never dequantized.
/// Float weights are rounded to the mode's dtype (f32 / bf16 / f16; bf16 -> f16 refuses values
/// outside f16's range).

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tpullm/conversion/quant_repack.hpp"
#include "tpullm/conversion/rtn_quantize.hpp"
#include "tpullm/ir/module.hpp"
#include "tpullm/kernels/packed_weights.hpp"

namespace tpullm::conversion {

/// The kernel format of a packed Tpu weight type (panels layout); throws Error(invalid_input)
/// for any other type.
kernels::WeightFormat packed_format(const ir::TensorType& t);

/// The Tpu type of a packed weight with these properties (super_rows: two-level scales, or 0).
ir::TensorType packed_type(kernels::WeightFormat f, std::int64_t K, std::int64_t N,
                           std::int64_t group_size, bool act_order, std::int64_t super_rows = 0);

/// kernels::PackedWeights viewing the parts of packed weight `w` (no copy: `w`'s data must
/// outlive the result). Throws Error(invalid_input) naming the weight when a part is missing or
/// has the wrong size.
kernels::PackedWeights packed_view(const ir::Weight& w);

/// An ir::Weight named `name` owning `pw` (its parts point into it).
ir::Weight make_packed_weight(std::string name, kernels::PackedWeights pw, bool act_order);

/// The integer codes, scales and zero points of a GPTQ / AWQ Top weight (u4 / u8 logical [K, N]
/// with parts qweight, scales, qzeros unless the spec has no zero_point, optional g_idx), in
/// plain form; formats gptq (v1 zeros), gptq_v2 (exact zeros), awq. Throws Error naming `w`.
QuantPlain unpack_quant_weight(const ir::Weight& w);

/// The elements of a float weight's "data" part widened to f32 (row-major, stored shape).
std::vector<float> float_values(const ir::Weight& w);

/// Converts Top weights to Tpu storage once per (weight, conversion), whatever number of
/// modules and stage variants ask: the first call converts, later calls return the same
/// ir::Weight (same name, same bytes). Thread-safe; weights without data (parsed from text)
/// convert their types only.
class WeightConverter {
public:
  /// Packed [K, N] operand of tpu.MatMul / tpu.MLP from `src`: float [N, K] (`transposed`, HF
  /// Linear layout) or [K, N] stored as `dtype` (f32, bf16 or f16), or a GPTQ / AWQ u4 [K, N]
  /// (repacked to int4 whatever `dtype` says).
  const ir::Weight& packed(const ir::Weight& src, bool transposed, ir::DType dtype);
  /// Packed [K, N] operand quantized at compile time by round-to-nearest (rtn_quantize.hpp) from
  /// float `src` ([N, K] when `transposed`, else [K, N]): int4_sym / int4_asym (4 bits) or int8 /
  /// int8_asym (8 bits), symmetric or not as `o` says. A GPTQ / AWQ `src` goes through direct
  /// (as packed()) whatever `o` says. Converted once per (weight, options).
  const ir::Weight& quantized(const ir::Weight& src, bool transposed, const RtnOptions& o);
  /// A row-major float parameter stored as `dtype` (returns `src`'s twin unchanged when it is
  /// already stored so).
  const ir::Weight& row_major(const ir::Weight& src, ir::DType dtype);
  /// Packed weights concatenated along N (q/k/v fusion); every part but the last must have N a
  /// multiple of 32 and all must share K, format, group size and row order.
  const ir::Weight& concat_packed(const std::vector<const ir::Weight*>& parts);

  /// The three packed operands of a tpu.MLP with an act-order down projection's row
  /// permutation folded into gate / up: when `down` (packed, [I, H]) has a k_perm, gate and up
  /// ([H, I]) come back with column j = their column k_perm[j] and down without k_perm, so the
  /// tiled MLP reads the intermediate activation in natural order; otherwise the inputs as given.
  struct MlpOperands {
    const ir::Weight* gate;
    const ir::Weight* up;
    const ir::Weight* down;
  };
  /// See MlpOperands.
  MlpOperands fold_mlp_perm(const ir::Weight& gate, const ir::Weight& up, const ir::Weight& down);

  /// Conversions performed (cache misses).
  std::int64_t conversions() const;
  /// Requests answered from the cache.
  std::int64_t hits() const;

private:
  struct Entry {
    std::once_flag once;
    ir::Weight weight;
  };
  template <class F>
  const ir::Weight& memo(const std::string& key, F&& make);

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Entry>> cache_;
  std::int64_t conversions_ = 0, hits_ = 0;
};

} // namespace tpullm::conversion
