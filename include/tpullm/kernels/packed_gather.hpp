#pragma once
/// Embedding lookup from a packed weight: a tied checkpoint's embedding is its lm_head weight,
/// so the bundle stores the table once, as the lm_head's packed W: [K = H, N = V] (any format of
/// kernels/packed_weights.hpp), and the gather reads token v's embedding as column v of W.
///
/// Column n lives in panel n / 32 at lane n % 32 of each of its Kp stored rows, so a gather
/// touches one 64-byte line per row group of one panel: Kp * row_bytes bytes of cache lines per
/// token, a few tens of KB for the models we run, next to the hundreds of MB a decode step reads.

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/embedding_gather.hpp"
#include "tpullm/kernels/packed_weights.hpp"
#include "tpullm/support/float16.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

namespace detail {

/// Column n of w (K values, original row order) written to dst[0, K).
inline void packed_column(const PackedWeights& w, std::int64_t n, float* dst) {
  const std::int64_t K = w.K, Kp = w.stored_rows(), G = w.groups();
  const std::int64_t p = n / kPanelCols, c = n % kPanelCols;
  const std::uint8_t* panel = w.data.data() + p * Kp * row_bytes(w.format);
  const std::uint8_t* zeros = w.zeros.empty() ? nullptr : w.zeros.data() + p * G * kPanelCols + c;
  const std::int32_t* perm = w.k_perm.empty() ? nullptr : w.k_perm.data();
  const auto put = [&](std::int64_t j, float v) { dst[perm ? perm[j] : j] = v; };
  const auto scale = [&](std::int64_t j) { return w.scale_of(p, j / w.group_size, c); };
  const auto min = [&](std::int64_t j) { return w.min_of(p, j / w.group_size, c); };
  switch (w.format) {
  case WeightFormat::f32:
    for (std::int64_t j = 0; j < K; ++j) {
      float v;
      std::memcpy(&v, panel + j * 128 + 4 * c, 4);
      put(j, v);
    }
    return;
  case WeightFormat::f16:
  case WeightFormat::bf16: {
    // f16: columns in order; bf16: word j holds columns j and j + 16 (low, high half).
    const std::int64_t off = w.format == WeightFormat::f16 ? 2 * c
                             : c < 16                      ? 4 * c
                                                           : 4 * (c - 16) + 2;
    const bool is_bf16 = w.format == WeightFormat::bf16;
    for (std::int64_t j = 0; j < K; ++j) {
      std::uint16_t h;
      std::memcpy(&h, panel + j * 64 + off, 2);
      put(j, is_bf16 ? bf16_to_f32(h) : f16_to_f32(h));
    }
    return;
  }
  case WeightFormat::int8:
    for (std::int64_t j = 0; j < K; ++j) {
      const auto q = static_cast<std::int8_t>(panel[(j / 4) * 128 + 4 * c + j % 4]);
      put(j, static_cast<float>(q) * scale(j));
    }
    return;
  case WeightFormat::int8_asym:
    for (std::int64_t j = 0; j < K; ++j) {
      const int u = panel[(j / 4) * 128 + 4 * c + j % 4];
      put(j, static_cast<float>(u - zeros[(j / w.group_size) * kPanelCols]) * scale(j));
    }
    return;
  case WeightFormat::int8_min:
    for (std::int64_t j = 0; j < K; ++j) {
      const int u = panel[(j / 4) * 128 + 4 * c + j % 4];
      put(j, static_cast<float>(u) * scale(j) - min(j));
    }
    return;
  case WeightFormat::int4_min:
    for (std::int64_t j = 0; j < K; ++j) {
      const std::uint8_t b = panel[(j / 8) * 128 + 4 * c + (j % 8) % 4];
      const int u = (j % 8 >= 4) ? (b >> 4) : (b & 0x0F);
      put(j, static_cast<float>(u) * scale(j) - min(j));
    }
    return;
  case WeightFormat::int4_sym:
  case WeightFormat::int4_asym: {
    const bool asym = w.format == WeightFormat::int4_asym;
    for (std::int64_t j = 0; j < K; ++j) {
      const std::uint8_t b = panel[(j / 8) * 128 + 4 * c + (j % 8) % 4];
      const int u = (j % 8 >= 4) ? (b >> 4) : (b & 0x0F);
      const int z = asym ? zeros[(j / w.group_size) * kPanelCols] : 8;
      put(j, static_cast<float>(u - z) * scale(j));
    }
    return;
  }
  case WeightFormat::int6_sym:
  case WeightFormat::int6_min: {
    const bool with_mins = w.format == WeightFormat::int6_min;
    for (std::int64_t j = 0; j < K; ++j) {
      const int u = detail::block_code6(panel + (j / 16) * 16 * row_bytes(w.format), j % 16, c);
      put(j, with_mins ? static_cast<float>(u) * scale(j) - min(j)
                       : static_cast<float>(u - 32) * scale(j));
    }
    return;
  }
  }
  throw_error(ErrorKind::internal, "",
              "packed_embedding_gather: format " + std::string(format_name(w.format)) +
                  " has no gather");
}

} // namespace detail

/// out[l, :] = column ids[l] of W, widened to f32: the embedding of token ids[l] when W is the
/// tied lm_head weight. ids: [L] int32; w: packed [K = H, N = V]; out: [L, H] f32 row-major.
/// Throws Error(invalid_input) for an id outside [0, V), Error(internal) for a short `out` or a
/// format without a gather.
inline void packed_embedding_gather(std::span<const std::int32_t> ids, const PackedWeights& w,
                                    std::span<float> out, const CoreSplit& split = {}) {
  const std::int64_t H = w.K, V = w.N;
  // The row-major gather's checks: ids in [0, V), out holding L * H (the table is W itself).
  detail::embedding_check(ids, static_cast<std::size_t>(V * H), out.size(), {V, H});
  // A run of one id is gathered once and copied: a prompt's padding (id 0 up to
  // max_input_length, 496 of 512 rows for a 16-token prompt) cost a 1B model's 16-token prefill
  // a tenth of its time in column gathers (docs/kernels.md round 21).
  parallel_for(split, static_cast<std::int64_t>(ids.size()), 1,
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t l = b; l < e; ++l) {
                   float* row = out.data() + l * H;
                   const auto i = static_cast<std::size_t>(l);
                   if (l > b && ids[i] == ids[i - 1])
                     std::memcpy(row, row - H, static_cast<std::size_t>(H) * sizeof(float));
                   else
                     detail::packed_column(w, ids[i], row);
                 }
               });
}

} // namespace tpullm::kernels
