// Out-of-line definitions of tpullm/frontend/top_weights.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/top_weights.hpp"

#include "tpullm/conversion/ggml_blocks.hpp"

namespace tpullm::frontend {

ir::DType to_ir_dtype(DType t) {
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

ir::Weight quantized_weight(const std::string& name, const QuantizedWeight& q) {
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

ir::Weight ggml_weight(const std::string& name, const GgmlWeight& g) {
  const conversion::GgmlPacking pk = conversion::ggml_packing(g.type);
  ir::QuantSpec spec;
  spec.format = ir::QuantFormat::ggml;
  spec.ggml_type = static_cast<std::uint32_t>(g.type);
  spec.group_size = pk.group_size;
  spec.zero_point = pk.has_mins;
  ir::Weight w{name,
               ir::TensorType({g.rows, g.cols}, pk.bits == 8 ? ir::DType::u8 : ir::DType::u4,
                              spec),
               {}};
  w.parts.push_back(ir::WeightPart{"blocks",
                                   ir::DType::u8,
                                   {static_cast<std::int64_t>(g.bytes.size())},
                                   g.bytes,
                                   g.keepalive});
  return w;
}

ir::Weight owned_f32_weight(const std::string& name, std::vector<std::int64_t> shape,
                            std::vector<float> values) {
  auto data = std::make_shared<std::vector<float>>(std::move(values));
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data->data()),
                                   data->size() * sizeof(float));
  ir::TensorType type(shape, ir::DType::f32);
  return ir::Weight{name, type, {ir::WeightPart{"data", ir::DType::f32, shape, bytes, data}}};
}

RopeWeights rope_weights(const ModelDesc& d, std::int64_t seq_length) {
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
  case RopeType::yarn:
    s.kind = kernels::RopeScaling::Kind::yarn;
    break;
  case RopeType::dynamic: // the default frequencies up to max_position_embeddings (hf_config.hpp)
    s.kind = kernels::RopeScaling::Kind::none;
    break;
  }
  s.factor = d.rope.factor;
  s.low_freq_factor = d.rope.low_freq_factor;
  s.high_freq_factor = d.rope.high_freq_factor;
  s.original_max_position_embeddings = d.rope.original_max_position_embeddings;
  s.freq_factors = d.rope_freq_factors;
  s.attention_factor = d.rope.attention_factor;
  s.beta_fast = d.rope.beta_fast;
  s.beta_slow = d.rope.beta_slow;
  s.truncate = d.rope.truncate;
  auto t = kernels::build_rope_tables(seq_length, d.dims.head_dim, d.rope.theta, s);
  const std::vector<std::int64_t> shape{seq_length, d.dims.head_dim / 2};
  return {owned_f32_weight("rope.cos", shape, std::move(t.cos)),
          owned_f32_weight("rope.sin", shape, std::move(t.sin))};
}

} // namespace tpullm::frontend
