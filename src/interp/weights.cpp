// Out-of-line definitions of tpullm/interp/weights.hpp (compiled once into tpullm_core).
#include "tpullm/interp/weights.hpp"

namespace tpullm::interp::detail {

Tensor dequantize_weight(const ir::Weight& w) {
  check(w.type.quant->format != ir::QuantFormat::packed, ErrorKind::unsupported,
        "weight @" + w.name,
        "the kernel 'packed' layout is not a Top weight format; the interpreter reads gptq and "
        "awq checkpoint layouts");
  const conversion::QuantPlain plain = conversion::unpack_quant_weight(w);
  const std::vector<float> deq = plain.dequantize();
  return Tensor::from_f32({plain.K, plain.N}, deq, ir::DType::f32);
}

} // namespace tpullm::interp::detail

namespace tpullm::interp {

Tensor materialize_weight(const ir::Weight& w) {
  const std::string where = "weight @" + w.name;
  check(w.has_data(), ErrorKind::invalid_input, where,
        "has no data (module parsed from text?); the interpreter needs weight bytes");
  if (w.type.quant)
    return detail::dequantize_weight(w);
  const ir::WeightPart& p = w.part("data");
  check(num_elements(p.shape) == w.type.num_elements(), ErrorKind::invalid_input, where,
        "stored shape ", ir::shape_str(p.shape), " does not match the declared ", w.type.str());
  check(ir::is_float(p.dtype) == ir::is_float(w.type.dtype), ErrorKind::unsupported, where,
        "stored ", ir::name(p.dtype), " cannot be read as declared ", w.type.str());
  Tensor t;
  try {
    t = Tensor::from_bytes(w.type.shape, p.dtype, p.bytes);
  } catch (const Error& e) {
    throw e.within(where);
  }
  if (p.dtype != w.type.dtype)
    t = t.is_float() ? t.cast(w.type.dtype) : Tensor(std::move(t.ints()), w.type.dtype);
  return t;
}

auto WeightStore::get(const ir::Weight& w) -> std::shared_ptr<const Tensor> {
  const std::string key = key_of(w);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it != entries_.end())
    return it->second.tensor;
  Entry e;
  e.tensor = std::make_shared<const Tensor>(materialize_weight(w));
  for (const auto& p : w.parts)
    e.owners.push_back(p.owner);
  bytes_ += static_cast<std::size_t>(e.tensor->numel()) * 8;
  return entries_.emplace(key, std::move(e)).first->second.tensor;
}

auto WeightStore::key_of(const ir::Weight& w) -> std::string {
  std::string k = w.type.str();
  for (const auto& p : w.parts) {
    char addr[64];
    std::snprintf(addr, sizeof addr, "%p+%zu", static_cast<const void*>(p.bytes.data()),
                  p.bytes.size());
    k += "|" + p.role + ":" + std::string(ir::name(p.dtype)) + ir::shape_str(p.shape) + "@" + addr;
  }
  return k;
}

} // namespace tpullm::interp
