#pragma once
/// The KV cache's geometry, one rule for the planner, the compiler, the executor and the bundle:
/// per conversation (slot) and layer a key cache then a value cache, each `capacity` positions
/// of `row_bytes` (one position's kv_heads x head_dim values of the cache's dtype: f32, f16 or
/// bf16).

#include <cstdint>

#include "tpullm/ir/type.hpp"

namespace tpullm::memory {

/// Bytes of one position of a KV cache of `dtype` with kv_heads x head_dim values: kv_heads *
/// head_dim * (4 or 2), or kv_heads * (head_dim + 4) for i8 (codes and a scale per head row).
inline std::int64_t kv_row_bytes(ir::DType dtype, std::int64_t kv_heads, std::int64_t head_dim) {
  return ir::kv_cache_type({1, 1, kv_heads, head_dim}, dtype).byte_size();
}

/// Bytes of one KV slot of rows [1, S, kv_heads, d] in their type.
inline std::int64_t kv_row_bytes(const ir::TensorType& rows) {
  return rows.with_shape({1, 1, rows.shape.at(2), rows.shape.at(3)}).byte_size();
}

/// Geometry of the KV cache region: `slots` conversations one after the other, each per layer a
/// key then a value cache of `capacity` positions. A conversation's caches are therefore the
/// single-conversation region a stage function was planned for (its addresses need no change),
/// starting at slot_offset(slot); layer l's key cache of slot s is [capacity, kv_heads, d].
struct KvGeometry {
  std::int64_t layers = 0;          ///< decoder layers
  std::int64_t capacity = 0;        ///< positions per cache
  std::int64_t row_bytes = 0;       ///< bytes of one position: kv_row_bytes(dtype, kv_heads, d)
  std::int64_t slots = 1;           ///< conversations (each its own caches)
  ir::DType dtype = ir::DType::f32; ///< element type of the cache: f32, f16, bf16 or i8
  /// Bytes of one conversation's caches (every layer's key and value cache).
  std::int64_t slot_bytes() const { return 2 * layers * capacity * row_bytes; }
  /// Bytes of the whole region.
  std::int64_t bytes() const { return slots * slot_bytes(); }
  /// Byte offset of conversation `slot`'s caches in the region.
  std::int64_t slot_offset(std::int64_t slot) const { return slot * slot_bytes(); }
  /// Byte offset of layer `layer`'s key (kind 0) or value (kind 1) cache inside a slot.
  std::int64_t cache_offset(std::int64_t layer, int kind) const {
    return (2 * layer + kind) * capacity * row_bytes;
  }
};

} // namespace tpullm::memory
