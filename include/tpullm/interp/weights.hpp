#pragma once
/// Materialization of module weights into interpreter tensors, once per model: plain weights
/// are widened exactly from their stored bytes, GPTQ / AWQ 4-bit weights are dequantized to
/// their logical [K, N] float values (exact in f32: a 4-bit integer times an f16 scale). A
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

/// Dequantizes a GPTQ / AWQ weight of logical type [K, N] u4 to [K, N], labelled f32.
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
  return Tensor::from_f32({K, N}, deq, ir::DType::f32);
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
