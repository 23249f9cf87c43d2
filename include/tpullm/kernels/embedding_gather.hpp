#pragma once
/// Embedding lookup: token ids [L] (int32) gather rows of a [V, H] table into f32 [L, H].
/// Tables may be f32, bf16, f16, or int8 with one f32 scale per row (value = q * scale[v]).
/// An id outside [0, V) throws Error(invalid_input) naming the id, its index and V (a token from
/// outside); a bad shape or span throws Error(internal) (the runtime's plan is checked before).

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/vec_math.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Embedding table shape: `vocab` rows of `hidden` elements, row-major.
struct EmbeddingShape {
  std::int64_t vocab = 0;  ///< V
  std::int64_t hidden = 0; ///< H
};

namespace detail {

inline void embedding_check(std::span<const std::int32_t> ids, std::size_t table, std::size_t out,
                            const EmbeddingShape& s) {
  if (s.vocab <= 0 || s.hidden <= 0)
    throw_error(ErrorKind::internal, "",
                "embedding_gather: bad table shape [" + std::to_string(s.vocab) + ", " +
                    std::to_string(s.hidden) + "]");
  if (table < static_cast<std::size_t>(s.vocab * s.hidden))
    throw_error(ErrorKind::internal, "",
                "embedding_gather: table has " + std::to_string(table) + " elements, shape needs " +
                    std::to_string(s.vocab * s.hidden));
  if (out < ids.size() * static_cast<std::size_t>(s.hidden))
    throw_error(ErrorKind::internal, "",
                "embedding_gather: out has " + std::to_string(out) + " elements, needs L*H = " +
                    std::to_string(ids.size() * static_cast<std::size_t>(s.hidden)));
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= s.vocab)
      throw_error(ErrorKind::invalid_input, "",
                  "embedding_gather: token id " + std::to_string(ids[i]) + " at position " +
                      std::to_string(i) + " is outside [0, V=" + std::to_string(s.vocab) + ")");
}

TPULLM_ALWAYS_INLINE void dequant_i8_generic(const std::int8_t* q, float scale, float* dst,
                                             std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    dst[i] = static_cast<float>(q[i]) * scale;
}
TPULLM_TARGET_AVX512 inline void dequant_i8_avx512(const std::int8_t* q, float s, float* d,
                                                   std::int64_t n) {
  dequant_i8_generic(q, s, d, n);
}
TPULLM_TARGET_AVX2 inline void dequant_i8_avx2(const std::int8_t* q, float s, float* d,
                                               std::int64_t n) {
  dequant_i8_generic(q, s, d, n);
}

} // namespace detail

/// out[l, :] = table[ids[l], :] widened to f32. ids: [L] int32; table: [V, H] row-major of
/// f32/bf16/f16; out: [L, H] f32 row-major. Throws Error(invalid_input) for an id outside [0, V).
template <class T>
void embedding_gather(std::span<const std::int32_t> ids, std::span<const T> table,
                      std::span<float> out, const EmbeddingShape& shape,
                      const CoreSplit& split = {}) {
  static_assert(is_float_storage_v<T>, "table must be float, bf16_t or f16_t");
  detail::embedding_check(ids, table.size(), out.size(), shape);
  const Isa isa = active_isa();
  const std::int64_t H = shape.hidden;
  parallel_for(split, static_cast<std::int64_t>(ids.size()), 1,
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t l = b; l < e; ++l)
                   detail::convert_row(table.data() + ids[static_cast<std::size_t>(l)] * H,
                                       out.data() + l * H, H, isa);
               });
}

/// Int8 table with a per-row scale: out[l, :] = q[ids[l], :] * scales[ids[l]].
/// ids: [L] int32; q: [V, H] int8 row-major; scales: [V] f32; out: [L, H] f32 row-major.
inline void embedding_gather_i8(std::span<const std::int32_t> ids, std::span<const std::int8_t> q,
                                std::span<const float> scales, std::span<float> out,
                                const EmbeddingShape& shape, const CoreSplit& split = {}) {
  detail::embedding_check(ids, q.size(), out.size(), shape);
  if (scales.size() < static_cast<std::size_t>(shape.vocab))
    throw_error(ErrorKind::internal, "",
                "embedding_gather_i8: scales has " + std::to_string(scales.size()) +
                    " elements, needs V = " + std::to_string(shape.vocab));
  const Isa isa = active_isa();
  const std::int64_t H = shape.hidden;
  parallel_for(split, static_cast<std::int64_t>(ids.size()), 1,
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t l = b; l < e; ++l) {
                   const std::int64_t v = ids[static_cast<std::size_t>(l)];
                   const std::int8_t* src = q.data() + v * H;
                   const float s = scales[static_cast<std::size_t>(v)];
                   float* dst = out.data() + l * H;
                   switch (isa) {
                   case Isa::amx:
                   case Isa::avx512:
                     detail::dequant_i8_avx512(src, s, dst, H);
                     break;
                   case Isa::avx2:
                     detail::dequant_i8_avx2(src, s, dst, H);
                     break;
                   case Isa::portable:
                     detail::dequant_i8_generic(src, s, dst, H);
                     break;
                   }
                 }
               });
}

} // namespace tpullm::kernels
