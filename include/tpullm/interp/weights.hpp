#pragma once
/// Materialization of module weights into interpreter tensors: plain weights are widened
/// exactly from their stored bytes, GPTQ / AWQ 4-bit weights are dequantized to their logical
/// [K, N] float values (exact in f32: a 4-bit integer times an f16 scale).

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tpullm/conversion/quant_repack.hpp"
#include "tpullm/interp/tensor.hpp"
#include "tpullm/ir/module.hpp"

namespace tpullm::interp {

namespace detail {

/// The elements of part `p` of weight `w` as T (p.dtype must be `want`), copied (unaligned ok).
template <class T>
std::vector<T> part_as(const ir::Weight& w, const ir::WeightPart& p, ir::DType want) {
  const std::string where = "weight @" + w.name;
  check(p.dtype == want, ErrorKind::unsupported, where, "part '", p.role, "' is ",
        ir::name(p.dtype), ", expected ", ir::name(want));
  const std::int64_t n = num_elements(p.shape);
  check(static_cast<std::int64_t>(p.bytes.size()) == n * static_cast<std::int64_t>(sizeof(T)),
        ErrorKind::invalid_input, where, "part '", p.role, "' ", ir::shape_str(p.shape), " has ",
        p.bytes.size(), " bytes, expected ", n * static_cast<std::int64_t>(sizeof(T)));
  std::vector<T> v(static_cast<std::size_t>(n));
  if (n > 0)
    std::memcpy(v.data(), p.bytes.data(), p.bytes.size());
  return v;
}

/// Dequantizes a GPTQ / AWQ weight of logical type [K, N] u4 to [K, N] f32.
inline Tensor dequantize_weight(const ir::Weight& w) {
  const std::string where = "weight @" + w.name;
  const ir::QuantSpec& q = *w.type.quant;
  check(w.type.rank() == 2, ErrorKind::invalid_input, where,
        "a quantized weight must be [K, N], got ", w.type.str());
  check(w.type.dtype == ir::DType::u4, ErrorKind::unsupported, where,
        "only 4-bit (u4) quantized weights are supported, got ", w.type.str());
  const std::int64_t K = w.type.shape[0], N = w.type.shape[1];
  const std::int64_t group = q.group_size == 0 ? K : q.group_size;
  const auto qweight = part_as<std::int32_t>(w, w.part("qweight"), ir::DType::i32);
  const auto scales = part_as<std::uint16_t>(w, w.part("scales"), ir::DType::f16);
  // Without stored zeros the weight is symmetric around 8.
  std::vector<std::int32_t> qzeros;
  const bool gptq = q.format == ir::QuantFormat::gptq;
  if (const auto* z = w.find_part("qzeros")) {
    qzeros = part_as<std::int32_t>(w, *z, ir::DType::i32);
  } else {
    check(!q.zero_point, ErrorKind::invalid_input, where,
          "quant spec has zero_point but the weight has no 'qzeros' part");
    check(K % group == 0 && N % 8 == 0, ErrorKind::invalid_input, where, "K=", K,
          " must be a multiple of group ", group, " and N=", N, " of 8");
    qzeros.assign(static_cast<std::size_t>(K / group * N / 8),
                  gptq ? std::int32_t{0x77777777}
                       : std::int32_t{static_cast<std::int32_t>(0x88888888u)});
  }
  conversion::Int4Plain plain;
  try {
    switch (q.format) {
    case ir::QuantFormat::gptq: {
      std::vector<std::int32_t> g_idx;
      if (const auto* g = w.find_part("g_idx"))
        g_idx = part_as<std::int32_t>(w, *g, ir::DType::i32);
      plain = conversion::unpack_gptq(qweight, qzeros, scales, g_idx, K, N, group, /*v1*/ 1);
      break;
    }
    case ir::QuantFormat::awq:
      plain = conversion::unpack_awq(qweight, qzeros, scales, K, N, group);
      break;
    case ir::QuantFormat::packed:
      throw_error(ErrorKind::unsupported, where,
                  "the kernel 'packed' layout is not a Top weight format; the interpreter reads "
                  "gptq and awq checkpoint layouts");
    }
  } catch (const std::invalid_argument& e) {
    throw_error(ErrorKind::invalid_input, where, e.what());
  }
  const std::vector<float> deq = plain.dequantize();
  return Tensor::from_floats({K, N}, std::vector<double>(deq.begin(), deq.end()), ir::DType::f32);
}

} // namespace detail

/// Materializes `w` as an interpreter tensor of its logical shape:
///  - plain weight (one part "data"): elements widened exactly from the stored dtype; if the
///    stored dtype differs from the declared one, values are rounded to the declared dtype;
///  - quantized weight (u4 + QuantSpec gptq|awq; parts "qweight" i32, "scales" f16, "qzeros" i32,
///    optional "g_idx" i32 for gptq): dequantized [K, N], labelled f32.
/// Throws tpullm::Error naming the weight when it has no data or its parts are malformed.
inline Tensor materialize_weight(const ir::Weight& w) {
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
    t = t.is_float() ? t.cast(w.type.dtype)
                     : Tensor::from_ints(w.type.shape, t.ints(), w.type.dtype);
  return t;
}

/// Materialized weights of one module, cached by name so each is widened / dequantized once.
class WeightCache {
public:
  /// `module` must outlive the cache.
  explicit WeightCache(const ir::Module& module) : module_(&module) {}

  /// The materialized weight @name (throws naming it when unknown or without data).
  std::shared_ptr<const Tensor> get(const std::string& name) {
    auto it = cache_.find(name);
    if (it != cache_.end())
      return it->second;
    const ir::Weight* w = module_->find_weight(name);
    check(w != nullptr, ErrorKind::invalid_input, "weight @" + name, "is not in module @",
          module_->name());
    auto t = std::make_shared<const Tensor>(materialize_weight(*w));
    cache_.emplace(name, t);
    return t;
  }
  /// Number of weights materialized so far.
  std::size_t size() const { return cache_.size(); }
  /// Drops every cached tensor.
  void clear() { cache_.clear(); }

private:
  const ir::Module* module_;
  std::map<std::string, std::shared_ptr<const Tensor>> cache_;
};

} // namespace tpullm::interp
