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
inline ir::DType to_ir_dtype(DType t) {
  switch (t) {
  case DType::f64:
    return ir::DType::f64;
  case DType::f32:
    return ir::DType::f32;
  case DType::f16:
    return ir::DType::f16;
  case DType::bf16:
    return ir::DType::bf16;
  case DType::i64:
    return ir::DType::i64;
  case DType::i32:
    return ir::DType::i32;
  case DType::i8:
    return ir::DType::i8;
  case DType::u8:
    return ir::DType::u8;
  case DType::i16:
  case DType::boolean:
    break;
  }
  throw_error(ErrorKind::unsupported, "", "checkpoint dtype ", dtype_name(t),
              " has no IR element type");
}

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
inline ir::Weight quantized_weight(const std::string& name, const QuantizedWeight& q) {
  ir::QuantSpec spec;
  if (q.format == QuantFormat::awq) {
    spec.format = ir::QuantFormat::awq;
    check(q.zero_offset == 0, ErrorKind::unsupported, q.qweight.where(), "zero offset ",
          q.zero_offset, " is not an AWQ GEMM layout (AWQ stores zeros exactly)");
  } else if (q.format == QuantFormat::compressed) {
    spec.format = ir::QuantFormat::gptq_v2;
  } else {
    check(q.zero_offset == 0 || q.zero_offset == 1, ErrorKind::unsupported, q.qweight.where(),
          "zero offset ", q.zero_offset,
          " is not supported (gptq: stored zero = zero - 1; gptq_v2: exact)");
    spec.format = q.zero_offset == 1 ? ir::QuantFormat::gptq : ir::QuantFormat::gptq_v2;
  }
  spec.group_size = q.group_size;
  spec.zero_point = q.qzeros.has_value();
  spec.act_order = !q.g_idx_trivial;
  check(q.bits == 4 || (q.bits == 8 && q.format != QuantFormat::awq), ErrorKind::unsupported,
        q.qweight.where(), q.bits, "-bit AWQ weights are not supported (AWQ GEMM is 4-bit)");
  check(q.qzeros.has_value() || q.format != QuantFormat::gptq, ErrorKind::invalid_input,
        q.qweight.where(), "a GPTQ weight needs its qzeros tensor");
  ir::Weight w{name,
               ir::TensorType({q.in_features, q.out_features},
                              q.bits == 8 ? ir::DType::u8 : ir::DType::u4, spec),
               {}};
  w.parts.push_back(part_of("qweight", q.qweight));
  w.parts.push_back(part_of("scales", q.scales));
  if (q.qzeros)
    w.parts.push_back(part_of("qzeros", *q.qzeros));
  if (q.g_idx)
    w.parts.push_back(part_of("g_idx", *q.g_idx));
  return w;
}

/// Any present slot as `@name`.
inline ir::Weight slot_weight(const std::string& name, const WeightRef& ref) {
  check(ref.present(), ErrorKind::internal, name, "weight slot is absent");
  return ref.is_quantized() ? quantized_weight(name, ref.quantized()) : plain_weight(name, ref);
}

/// An owned f32 weight built at compile time (RoPE tables).
inline ir::Weight owned_f32_weight(const std::string& name, std::vector<std::int64_t> shape,
                                   std::vector<float> values) {
  auto data = std::make_shared<std::vector<float>>(std::move(values));
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data->data()),
                                   data->size() * sizeof(float));
  ir::TensorType type(shape, ir::DType::f32);
  return ir::Weight{name, type, {ir::WeightPart{"data", ir::DType::f32, shape, bytes, data}}};
}

/// RoPE cos and sin tables for positions [0, seq_length): each [seq_length, head_dim / 2] f32,
/// computed with HF's float32 arithmetic for the model's rope type.
/// Built once per model; copies of the Weights share the same table memory.
struct RopeWeights {
  ir::Weight cos; ///< @rope.cos [seq_length, head_dim / 2]
  ir::Weight sin; ///< @rope.sin [seq_length, head_dim / 2]
};

/// The tables of `d` for positions [0, seq_length).
inline RopeWeights rope_weights(const ModelDesc& d, std::int64_t seq_length) {
  kernels::RopeScaling s;
  switch (d.rope.type) {
  case RopeType::default_:
    s.kind = kernels::RopeScaling::Kind::none;
    break;
  case RopeType::linear:
    s.kind = kernels::RopeScaling::Kind::linear;
    break;
  case RopeType::llama3:
    s.kind = kernels::RopeScaling::Kind::llama3;
    break;
  }
  s.factor = d.rope.factor;
  s.low_freq_factor = d.rope.low_freq_factor;
  s.high_freq_factor = d.rope.high_freq_factor;
  s.original_max_position_embeddings = d.rope.original_max_position_embeddings;
  auto t = kernels::build_rope_tables(seq_length, d.dims.head_dim, d.rope.theta, s);
  const std::vector<std::int64_t> shape{seq_length, d.dims.head_dim / 2};
  return {owned_f32_weight("rope.cos", shape, std::move(t.cos)),
          owned_f32_weight("rope.sin", shape, std::move(t.sin))};
}

} // namespace tpullm::frontend
