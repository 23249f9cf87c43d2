#pragma once
/// Materialization of module weights into interpreter tensors, once per model: plain weights
/// are widened exactly from their stored bytes, GPTQ / AWQ 4 / 8-bit weights are dequantized to
/// their logical [K, N] float values (exact in f32: a small integer times an f16 scale). A
/// WeightStore shared by the interpreters of every stage module of a model holds each weight
/// once, however many modules (block_i, block_kv_i, every block_cache_i_S, embedding,
/// embedding_cache, lm_head, ...) reference it; with a byte budget it keeps only the most
/// recently used (calibrate), and a table that is only gathered is read by rows
/// (gather_weight_rows) without being widened whole.

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
Tensor dequantize_weight(const ir::Weight& w);

} // namespace detail

/// Materializes `w` as an interpreter tensor of its logical shape:
///  - plain weight (one part "data"): elements widened exactly from the stored dtype; if the
///    stored dtype differs from the declared one, values are rounded to the declared dtype;
///  - quantized weight (u4 + QuantSpec gptq|awq; parts "qweight" i32, "scales" f16, "qzeros" i32,
///    optional "g_idx" i32 for gptq): dequantized [K, N], labelled f32.
/// Both keep the declared layout ([out, in] stays [out, in]): the interpreter's products read
/// either orientation in place, so nothing is transposed. Throws tpullm::Error naming the
/// weight when it has no data or its parts are malformed.
Tensor materialize_weight(const ir::Weight& w);

/// The rows `indices` (integer ids of any shape, each in [0, D)) of `w`, logical shape
/// [D, ...], gathered along axis 0: [indices..., ...], exactly ref::gather(materialize_weight(w),
/// indices, 0), but a plain float weight widens only the rows read (an embedding table of 136 M
/// elements is not widened whole to gather 64 of its rows). Quantized or integer weights are
/// materialized whole first. Throws tpullm::Error for an index out of range or as
/// materialize_weight does.
Tensor gather_weight_rows(const ir::Weight& w, const Tensor& indices);

/// The materialized weights of one model, shared by the interpreters of all its stage modules.
/// A weight is identified by its declared type and the exact bytes it views (part roles,
/// dtypes, shapes, addresses and sizes), not by its name alone: the same checkpoint tensor
/// referenced by several modules is widened once, while two different tensors that happen to
/// share a name never alias. The store keeps the viewed memory alive (it holds the parts'
/// owners), so an address it has seen cannot be reused for other data while it lives.
///
/// Without a budget the store keeps every weight until clear(). With a budget of B bytes it
/// never holds more than B bytes of tensors (8 per element, the tensors still in use
/// elsewhere included): before widening a weight it drops the least recently requested
/// entries that no one else holds (use_count 1), oldest first, until the new one fits; a
/// dropped weight is widened again when next requested. Which entries go depends only on the
/// order of requests, so one thread's run is deterministic; the values never depend on it.
/// Thread-safe.
class WeightStore {
public:
  /// A store without a budget.
  WeightStore() = default;
  /// A store that holds at most `budget_bytes` (> 0) of materialized tensors.
  explicit WeightStore(std::size_t budget_bytes);

  /// The materialized `w` (widened / dequantized when not held). Throws tpullm::Error naming
  /// the weight when it has no data or malformed parts, or, with a budget, when `w` does not
  /// fit beside the weights in use elsewhere (the message names both sizes and the budget).
  std::shared_ptr<const Tensor> get(const ir::Weight& w);
  /// Number of distinct weights held now.
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }
  /// Bytes held by the materialized tensors (8 per element: f64 or int64).
  std::size_t bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }
  /// The most bytes() ever reached (since construction).
  std::size_t peak_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  /// Weights materialized so far, counting each widening again after an eviction.
  std::size_t materializations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return materialized_;
  }
  /// The byte budget (0: none).
  std::size_t budget() const { return budget_; }
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
    std::size_t bytes = 0;
    std::uint64_t last_use = 0; ///< request tick (least recent goes first)
  };
  static std::string key_of(const ir::Weight& w);
  /// Drops unused entries, least recent first, until `need` more bytes fit the budget.
  void make_room(std::size_t need, const std::string& name);

  std::size_t budget_ = 0;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::size_t bytes_ = 0, peak_ = 0, materialized_ = 0;
  std::uint64_t tick_ = 0;
};

} // namespace tpullm::interp
