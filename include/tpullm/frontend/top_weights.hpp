#pragma once
/// Turns ModelDesc weight slots into module weights with framework-agnostic names
/// ("layers.3.q", "embedding", "rope.cos", ...). Data stays in the mapped checkpoint: each
/// ir::WeightPart is a zero-copy view that keeps its file mapped.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/ir/module.hpp"
#include "tpullm/support/rope_tables.hpp"

namespace tpullm::frontend {

/// The IR element type of a checkpoint dtype.
ir::DType to_ir_dtype(DType t);

/// A weight part viewing a checkpoint tensor.
inline ir::WeightPart part_of(const std::string& role, const TensorView& t) {
  return ir::WeightPart{role, to_ir_dtype(t.dtype), t.shape, t.bytes, t.keepalive};
}

/// A plain slot as `@name`: type = the stored shape and dtype.
inline ir::Weight plain_weight(const std::string& name, const WeightRef& ref) {
  const TensorView& t = ref.tensor();
  return ir::Weight{name, ir::TensorType(t.shape, to_ir_dtype(t.dtype)), {part_of("data", t)}};
}

/// A quantized linear as `@name`: logical [K, N] u4/u8 with its QuantSpec (format gptq for v1
/// zeros, gptq_v2 for exact zeros, awq); parts qweight, scales, qzeros (when stored: AWQ
/// without zero points has none) and g_idx (when stored), exactly as in the checkpoint.
/// A compressed-tensors linear (already transposed into the GPTQ layout by describe_model) is
/// gptq_v2 (exact zeros); a symmetric one has no qzeros (zero 2^(bits-1)).
ir::Weight quantized_weight(const std::string& name, const QuantizedWeight& q);

/// ggml blocks as `@name`: logical [rows, cols] (the stored orientation: a linear [N, K] read
/// with transpose_b, a table [vocab, hidden]), dtype u4 or u8 by the container its type
/// repacks into (conversion/ggml_blocks.hpp), QuantSpec format ggml with the type id and the
/// type's group; one part "blocks" viewing the stored bytes.
ir::Weight ggml_weight(const std::string& name, const GgmlWeight& g);

/// Any present slot as `@name`.
inline ir::Weight slot_weight(const std::string& name, const WeightRef& ref) {
  check(ref.present(), ErrorKind::internal, name, "weight slot is absent");
  if (ref.is_ggml())
    return ggml_weight(name, ref.ggml());
  return ref.is_quantized() ? quantized_weight(name, ref.quantized()) : plain_weight(name, ref);
}

/// An owned f32 weight built at compile time (RoPE tables).
ir::Weight owned_f32_weight(const std::string& name, std::vector<std::int64_t> shape,
                            std::vector<float> values);

/// RoPE cos and sin tables for positions [0, seq_length): each [seq_length, head_dim / 2] f32,
/// computed with HF's float32 arithmetic for the model's rope type.
/// Built once per model; copies of the Weights share the same table memory.
struct RopeWeights {
  ir::Weight cos; ///< @rope.cos [seq_length, head_dim / 2]
  ir::Weight sin; ///< @rope.sin [seq_length, head_dim / 2]
};

/// The tables of `d` for positions [0, seq_length).
RopeWeights rope_weights(const ModelDesc& d, std::int64_t seq_length);

} // namespace tpullm::frontend
