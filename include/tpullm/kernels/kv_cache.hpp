#pragma once
/// In-place KV-cache row write: the new rows of one layer's k (or v) are copied into their slots
/// of the preallocated cache, so history is never copied (decode's "Concat as address merge").

#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

#include "tpullm/kernels/core_split.hpp"

namespace tpullm::kernels {

/// Cache geometry: [capacity, kv_heads, head_dim] row-major.
struct KvCacheShape {
  std::int64_t capacity = 0; ///< S_cap: slots
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t row_elems() const { return kv_heads * head_dim; }
};

/// cache[start + l, :, :] = rows[l, :, :] for l in [0, L).
/// rows: [L, kv_heads, d] row-major; cache: [S_cap, kv_heads, d] row-major; T any trivially
/// copyable element (f32, bf16_t, f16_t, int8). Throws std::out_of_range unless
/// 0 <= start and start + L <= S_cap, std::invalid_argument for undersized spans.
template <class T>
void kv_cache_write(std::span<const T> rows, std::int64_t L, std::span<T> cache,
                    const KvCacheShape& shape, std::int64_t start, const CoreSplit& split = {}) {
  if (shape.capacity < 0 || shape.kv_heads <= 0 || shape.head_dim <= 0 || L < 0)
    throw std::invalid_argument(
        "kv_cache_write: bad shape [S_cap=" + std::to_string(shape.capacity) +
        ", kv_heads=" + std::to_string(shape.kv_heads) + ", d=" + std::to_string(shape.head_dim) +
        "], L=" + std::to_string(L));
  const std::int64_t row = shape.row_elems();
  if (start < 0 || start > shape.capacity || L > shape.capacity - start)
    throw std::out_of_range("kv_cache_write: slots [" + std::to_string(start) + ", " +
                            std::to_string(start + L) + ") are outside the cache [0, " +
                            std::to_string(shape.capacity) + ")");
  if (rows.size() < static_cast<std::size_t>(L * row))
    throw std::invalid_argument("kv_cache_write: rows has " + std::to_string(rows.size()) +
                                " elements, L*kv_heads*d = " + std::to_string(L * row));
  if (cache.size() < static_cast<std::size_t>(shape.capacity * row))
    throw std::invalid_argument(
        "kv_cache_write: cache has " + std::to_string(cache.size()) +
        " elements, S_cap*kv_heads*d = " + std::to_string(shape.capacity * row));
  parallel_for(split, L, 1, [&](std::int64_t b, std::int64_t e) {
    if (e > b)
      std::memmove(cache.data() + (start + b) * row, rows.data() + b * row,
                   static_cast<std::size_t>((e - b) * row) * sizeof(T));
  });
}

} // namespace tpullm::kernels
