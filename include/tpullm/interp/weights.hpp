#pragma once
/// Materialization of module weights into interpreter tensors, once per model: plain weights
/// are widened exactly from their stored bytes, GPTQ / AWQ 4 / 8-bit weights are dequantized to
/// their logical [K, N] float values (exact in f32: a small integer times an f16 scale). A
/// WeightStore shared by the interpreters of every stage module of a model holds each weight
/// once, however many modules (block_i, block_kv_i, every block_cache_i_S, embedding,
/// embedding_cache, lm_head, ...) reference it.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tpullm/conversion/weight_convert.hpp"
#include "tpullm/interp/tensor.hpp"
#include "tpullm/ir/module.hpp"

namespace tpullm::interp {

namespace detail {

/// Dequantizes a GPTQ / AWQ weight of logical type [K, N] u4 / u8 to [K, N], labelled f32, through
/// the converter's one unpacking of the checkpoint layouts (conversion::unpack_quant_weight).
inline Tensor dequantize_weight(const ir::Weight& w) {
  check(w.type.quant->format != ir::QuantFormat::packed, ErrorKind::unsupported,
        "weight @" + w.name,
        "the kernel 'packed' layout is not a Top weight format; the interpreter reads gptq and "
        "awq checkpoint layouts");
  const conversion::QuantPlain plain = conversion::unpack_quant_weight(w);
  const std::vector<float> deq = plain.dequantize();
  return Tensor::from_f32({plain.K, plain.N}, deq, ir::DType::f32);
}

} // namespace detail

/// Materializes `w` as an interpreter tensor of its logical shape:
///  - plain weight (one part "data"): elements widened exactly from the stored dtype; if the
///    stored dtype differs from the declared one, values are rounded to the declared dtype;
///  - quantized weight (u4 + QuantSpec gptq|awq; parts "qweight" i32, "scales" f16, "qzeros" i32,
///    optional "g_idx" i32 for gptq): dequantized [K, N], labelled f32.
/// Both keep the declared layout ([out, in] stays [out, in]): the interpreter's products read
/// either orientation in place, so nothing is transposed. Throws tpullm::Error naming the
/// weight when it has no data or its parts are malformed.
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
    t = t.is_float() ? t.cast(w.type.dtype) : Tensor(std::move(t.ints()), w.type.dtype);
  return t;
}

/// The materialized weights of one model, shared by the interpreters of all its stage modules.
/// A weight is identified by its declared type and the exact bytes it views (part roles,
/// dtypes, shapes, addresses and sizes), not by its name alone: the same checkpoint tensor
/// referenced by several modules is widened once, while two different tensors that happen to
/// share a name never alias. The store keeps the viewed memory alive (it holds the parts'
/// owners), so an address it has seen cannot be reused for other data while it lives.
/// Thread-safe.
class WeightStore {
public:
  /// The materialized `w` (widened / dequantized on first request). Throws tpullm::Error
  /// naming the weight when it has no data or malformed parts.
  std::shared_ptr<const Tensor> get(const ir::Weight& w) {
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
  /// Number of distinct weights materialized so far.
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }
  /// Bytes held by the materialized tensors (8 per element: f64 or int64).
  std::size_t bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }
  /// Drops every materialized tensor (tensors still referenced elsewhere stay alive there).
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
    bytes_ = 0;
  }

private:
  struct Entry {
    std::shared_ptr<const Tensor> tensor;
    std::vector<std::shared_ptr<const void>> owners;
  };
  static std::string key_of(const ir::Weight& w) {
    std::string k = w.type.str();
    for (const auto& p : w.parts) {
      char addr[64];
      std::snprintf(addr, sizeof addr, "%p+%zu", static_cast<const void*>(p.bytes.data()),
                    p.bytes.size());
      k +=
          "|" + p.role + ":" + std::string(ir::name(p.dtype)) + ir::shape_str(p.shape) + "@" + addr;
    }
    return k;
  }

  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::size_t bytes_ = 0;
};

} // namespace tpullm::interp
