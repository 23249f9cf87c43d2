#pragma once
/// The KV cache's geometry, one rule for the planner, the compiler, the executor and the bundle:
/// per layer a key cache then a value cache, each `capacity` slots of `row_bytes` (one position's
/// kv_heads x head_dim f32 values).

#include <cstdint>

#include "tpullm/ir/type.hpp"

namespace tpullm::memory {

/// Bytes of one KV slot of rows [1, S, kv_heads, d] (f32): kv_heads * d * 4.
inline std::int64_t kv_row_bytes(const ir::TensorType& rows) {
  return ir::byte_size(ir::DType::f32, rows.shape.at(2) * rows.shape.at(3));
}

/// Geometry of the KV cache region: per layer a key then a value cache of `capacity` slots.
struct KvGeometry {
  std::int64_t layers = 0;    ///< decoder layers
  std::int64_t capacity = 0;  ///< slots per cache (positions it holds)
  std::int64_t row_bytes = 0; ///< bytes of one slot: kv_heads * head_dim * 4
  /// Bytes of the whole region.
  std::int64_t bytes() const { return 2 * layers * capacity * row_bytes; }
  /// Byte offset of layer `layer`'s key (kind 0) or value (kind 1) cache in the region.
  std::int64_t cache_offset(std::int64_t layer, int kind) const {
    return (2 * layer + kind) * capacity * row_bytes;
  }
};

} // namespace tpullm::memory
