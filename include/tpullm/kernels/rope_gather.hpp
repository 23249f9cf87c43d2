#pragma once
/// Rotary position embedding from precomputed tables gathered by position id.
///
/// Table layout (chosen here, stored as compile-time weights): `cos` and `sin` are each
/// [seq_length, d/2] f32 row-major; entry [p, i] is cos/sin(p * inv_freq[i]) for frequency
/// i in [0, d/2). Both rotation modes index the same tables:
///   halves (HF rotate_half):  pairs (x[i], x[i + d/2])
///   interleaved (GPT-J):      pairs (x[2i], x[2i + 1])
///   x1' = x1 * cos - x2 * sin;  x2' = x2 * cos + x1 * sin.
/// A position outside [0, seq_length) throws Error(invalid_input) (never clamped); a bad shape or
/// span throws Error(internal).
///
/// The tables mirror HF's float32 arithmetic: inv_freq = 1 / theta^(2i/d) rounded to f32,
/// angle = f32(position) * inv_freq in f32, then cos/sin of that angle rounded to f32.

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/support/rope_tables.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Which element pairs rotate together.
enum class RopeMode { halves, interleaved };

/// Non-owning view of the tables (what the runtime passes from mapped weights).
struct RopeTablesView {
  std::span<const float> cos; ///< [seq_length, half_dim]
  std::span<const float> sin; ///< [seq_length, half_dim]
  std::int64_t seq_length = 0;
  std::int64_t half_dim = 0;

  RopeTablesView() = default;
  RopeTablesView(std::span<const float> c, std::span<const float> s, std::int64_t seq,
                 std::int64_t half)
      : cos(c), sin(s), seq_length(seq), half_dim(half) {}
  /// View of owning tables.
  RopeTablesView(const RopeTables& t) // NOLINT: implicit on purpose
      : cos(t.cos), sin(t.sin), seq_length(t.seq_length), half_dim(t.half_dim) {}
};

/// Shape of a rotation: x is [rows, heads, head_dim] row-major, one position per row.
struct RopeShape {
  std::int64_t rows = 0;     ///< L: tokens
  std::int64_t heads = 0;    ///< heads per token
  std::int64_t head_dim = 0; ///< d, even
};

namespace detail {

TPULLM_ALWAYS_INLINE void rope_row_generic(const float* x, float* y, const float* c, const float* s,
                                           std::int64_t heads, std::int64_t half,
                                           bool interleaved) {
  const std::int64_t d = 2 * half;
  for (std::int64_t h = 0; h < heads; ++h) {
    const float* xh = x + h * d;
    float* yh = y + h * d;
    if (interleaved) {
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = xh[2 * i], b = xh[2 * i + 1];
        yh[2 * i] = a * c[i] - b * s[i];
        yh[2 * i + 1] = b * c[i] + a * s[i];
      }
    } else {
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = xh[i], b = xh[i + half];
        yh[i] = a * c[i] - b * s[i];
        yh[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}
TPULLM_TARGET_AVX512 inline void rope_row_avx512(const float* x, float* y, const float* c,
                                                 const float* s, std::int64_t heads,
                                                 std::int64_t half, bool inter) {
  rope_row_generic(x, y, c, s, heads, half, inter);
}
TPULLM_TARGET_AVX2 inline void rope_row_avx2(const float* x, float* y, const float* c,
                                             const float* s, std::int64_t heads, std::int64_t half,
                                             bool inter) {
  rope_row_generic(x, y, c, s, heads, half, inter);
}
inline void rope_row_portable(const float* x, float* y, const float* c, const float* s,
                              std::int64_t heads, std::int64_t half, bool inter) {
  rope_row_generic(x, y, c, s, heads, half, inter);
}

inline void rope_row(Isa isa, const float* x, float* y, const float* c, const float* s,
                     std::int64_t heads, std::int64_t half, bool inter) {
  switch (isa) {
  case Isa::amx:
  case Isa::avx512:
    rope_row_avx512(x, y, c, s, heads, half, inter);
    return;
  case Isa::avx2:
    rope_row_avx2(x, y, c, s, heads, half, inter);
    return;
  case Isa::portable:
    rope_row_portable(x, y, c, s, heads, half, inter);
    return;
  }
}

inline void rope_check(const RopeShape& s, const RopeTablesView& t,
                       std::span<const std::int32_t> pos, const char* what) {
  if (s.rows < 0 || s.heads <= 0 || s.head_dim <= 0 || s.head_dim % 2 != 0)
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": bad shape [" + std::to_string(s.rows) + ", " +
                    std::to_string(s.heads) + ", " + std::to_string(s.head_dim) +
                    "] (head_dim must be even)");
  if (t.half_dim * 2 != s.head_dim)
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": tables have half_dim " + std::to_string(t.half_dim) +
                    ", head_dim is " + std::to_string(s.head_dim));
  const auto tn = static_cast<std::size_t>(t.seq_length * t.half_dim);
  if (t.cos.size() < tn || t.sin.size() < tn)
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": cos/sin spans smaller than [" +
                    std::to_string(t.seq_length) + ", " + std::to_string(t.half_dim) + "]");
  if (pos.size() < static_cast<std::size_t>(s.rows))
    throw_error(ErrorKind::internal, "",
                std::string(what) + ": " + std::to_string(pos.size()) + " position ids for " +
                    std::to_string(s.rows) + " rows");
  for (std::int64_t l = 0; l < s.rows; ++l) {
    const std::int32_t p = pos[static_cast<std::size_t>(l)];
    if (p < 0 || p >= t.seq_length)
      throw_error(ErrorKind::invalid_input, "",
                  std::string(what) + ": position " + std::to_string(p) + " of row " +
                      std::to_string(l) + " is outside the RoPE table [0, " +
                      std::to_string(t.seq_length) + ")");
  }
}

} // namespace detail

/// Out-of-place rotation: y = rope(x). x, y: [L, heads, d] row-major (y may alias x);
/// position_ids: [L] int32 in [0, seq_length); tables: cos/sin [seq_length, d/2].
inline void rope_apply(std::span<const float> x, std::span<float> y,
                       std::span<const std::int32_t> position_ids, const RopeTablesView& tables,
                       const RopeShape& shape, RopeMode mode, const CoreSplit& split = {}) {
  detail::rope_check(shape, tables, position_ids, "rope_apply");
  const std::int64_t row = shape.heads * shape.head_dim;
  if (x.size() < static_cast<std::size_t>(shape.rows * row) ||
      y.size() < static_cast<std::size_t>(shape.rows * row))
    throw_error(ErrorKind::internal, "",
                "rope_apply: x (" + std::to_string(x.size()) + ") or y (" +
                    std::to_string(y.size()) +
                    ") smaller than L*heads*d = " + std::to_string(shape.rows * row));
  const Isa isa = active_isa();
  const std::int64_t half = tables.half_dim;
  const bool inter = mode == RopeMode::interleaved;
  parallel_for(split, shape.rows, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t l = b; l < e; ++l) {
      const std::int64_t p = position_ids[static_cast<std::size_t>(l)];
      detail::rope_row(isa, x.data() + l * row, y.data() + l * row, tables.cos.data() + p * half,
                       tables.sin.data() + p * half, shape.heads, half, inter);
    }
  });
}

/// In-place rotation of x: [L, heads, d] row-major.
inline void rope_apply(std::span<float> x, std::span<const std::int32_t> position_ids,
                       const RopeTablesView& tables, const RopeShape& shape, RopeMode mode,
                       const CoreSplit& split = {}) {
  rope_apply(std::span<const float>(x), x, position_ids, tables, shape, mode, split);
}

/// Rotates k and writes it straight into its KV-cache slot.
/// k: [L, kv_heads, d] row-major (un-rotated); cache: [S_cap, kv_heads, d] row-major;
/// position_ids: [L]; slots: [L] cache rows to write (empty = the row's position).
/// Throws Error(invalid_input) for a position outside the table or a slot outside [0, S_cap).
inline void rope_to_kv_cache(std::span<const float> k, std::span<float> cache,
                             std::int64_t cache_capacity,
                             std::span<const std::int32_t> position_ids,
                             std::span<const std::int32_t> slots, const RopeTablesView& tables,
                             const RopeShape& shape, RopeMode mode, const CoreSplit& split = {}) {
  detail::rope_check(shape, tables, position_ids, "rope_to_kv_cache");
  const std::int64_t row = shape.heads * shape.head_dim;
  if (k.size() < static_cast<std::size_t>(shape.rows * row))
    throw_error(ErrorKind::internal, "",
                "rope_to_kv_cache: k has " + std::to_string(k.size()) +
                    " elements, needs L*kv_heads*d = " + std::to_string(shape.rows * row));
  if (cache_capacity < 0 || cache.size() < static_cast<std::size_t>(cache_capacity * row))
    throw_error(ErrorKind::internal, "",
                "rope_to_kv_cache: cache has " + std::to_string(cache.size()) +
                    " elements, needs S_cap*kv_heads*d = " + std::to_string(cache_capacity * row));
  if (!slots.empty() && slots.size() < static_cast<std::size_t>(shape.rows))
    throw_error(ErrorKind::internal, "",
                "rope_to_kv_cache: " + std::to_string(slots.size()) + " slots for " +
                    std::to_string(shape.rows) + " rows");
  for (std::int64_t l = 0; l < shape.rows; ++l) {
    const std::int64_t s = slots.empty() ? position_ids[static_cast<std::size_t>(l)]
                                         : slots[static_cast<std::size_t>(l)];
    if (s < 0 || s >= cache_capacity)
      throw_error(ErrorKind::invalid_input, "",
                  "rope_to_kv_cache: cache slot " + std::to_string(s) + " of row " +
                      std::to_string(l) +
                      " is outside [0, S_cap=" + std::to_string(cache_capacity) + ")");
  }
  const Isa isa = active_isa();
  const std::int64_t half = tables.half_dim;
  const bool inter = mode == RopeMode::interleaved;
  parallel_for(split, shape.rows, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t l = b; l < e; ++l) {
      const std::int64_t p = position_ids[static_cast<std::size_t>(l)];
      const std::int64_t s = slots.empty() ? p : slots[static_cast<std::size_t>(l)];
      detail::rope_row(isa, k.data() + l * row, cache.data() + s * row,
                       tables.cos.data() + p * half, tables.sin.data() + p * half, shape.heads,
                       half, inter);
    }
  });
}

} // namespace tpullm::kernels
