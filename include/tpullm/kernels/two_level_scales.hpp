#pragma once
/// Two-level scales for packed quantized weights (packed_weights.hpp, "Two-level scales"): a
/// weight whose group scales (and mins) are an f32 per super-block times a small integer per
/// group, as ggml's K-quants store them (Q4_K: d * sc with sc in [0, 63] per 32 rows, d one f16
/// per 256 rows), keeps them in that form: an int8 code per group and column and an f32 per
/// super-block and column, instead of an f32 per group and column. The kernels form the f32
/// product in each group's epilogue, so the arithmetic is that of the one-level form bit for bit.

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "tpullm/kernels/packed_weights.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// `w` (a quantized PackedWeights in one level: an f32 scale, and min, per group) with its
/// scales stored in two levels. scale_codes: [G, N] row-major int8; super_scales: [K / super_rows,
/// N] row-major f32; min_codes / super_mins likewise for the scale-and-min formats (empty for the
/// others). super_rows must be a multiple of w.group_size that divides K (per-channel weights and
/// zero-point formats have no two-level form). Every product super[g * group_size / super_rows][n]
/// * code[g][n], formed in f32, must equal w's scale (min) of group g, column n bit for bit: the
/// two-level form holds the same numbers. Throws Error(invalid_input) naming what differs.
inline PackedWeights with_two_level_scales(PackedWeights w, std::int64_t super_rows,
                                           std::span<const std::int8_t> scale_codes,
                                           std::span<const float> super_scales,
                                           std::span<const std::int8_t> min_codes = {},
                                           std::span<const float> super_mins = {}) {
  const std::string what = "two-level scales";
  auto fail = [&](const std::string& why) { throw_error(ErrorKind::invalid_input, what, why); };
  if (!is_quantized(w.format) || has_zeros(w.format) || w.two_level())
    fail("need a quantized weight without zero points whose scales are one f32 per group");
  if (w.group_size == w.K)
    fail("a per-channel weight (one group) has no two-level form");
  if (super_rows == 0 || !super_rows_fit(w.format, w.K, w.group_size, super_rows))
    fail("super_rows = " + std::to_string(super_rows) + " must be a multiple of group_size = " +
         std::to_string(w.group_size) + " that divides K = " + std::to_string(w.K));
  const bool mins = has_mins(w.format);
  const std::int64_t G = w.groups(), S = w.K / super_rows, N = w.N;
  const auto gn = static_cast<std::size_t>(G * N), sn = static_cast<std::size_t>(S * N);
  if (scale_codes.size() != gn || super_scales.size() != sn)
    fail("expected " + std::to_string(gn) + " scale codes [G, N] and " + std::to_string(sn) +
         " super-block scales [K / super_rows, N], got " + std::to_string(scale_codes.size()) +
         " and " + std::to_string(super_scales.size()));
  if (mins ? (min_codes.size() != gn || super_mins.size() != sn)
           : (!min_codes.empty() || !super_mins.empty()))
    fail(mins ? "expected " + std::to_string(gn) + " min codes and " + std::to_string(sn) +
                    " super-block mins"
              : "a format without mins takes no min codes");

  // (make_packed's zeroed data array is never touched: w's codes move in.)
  PackedWeights out = detail::make_packed(w.format, w.K, N, w.group_size, super_rows);
  out.data = std::move(w.data);
  out.k_perm = std::move(w.k_perm);
  const auto same = [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t p = n / kPanelCols, c = n % kPanelCols;
    for (std::int64_t s = 0; s < S; ++s) {
      const auto at = static_cast<std::size_t>((p * S + s) * kPanelCols + c);
      out.scales[at] = super_scales[static_cast<std::size_t>(s * N + n)];
      if (mins)
        out.mins[at] = super_mins[static_cast<std::size_t>(s * N + n)];
    }
    for (std::int64_t g = 0; g < G; ++g) {
      const auto at = static_cast<std::size_t>((p * G + g) * kPanelCols + c);
      out.scale_codes[at] = scale_codes[static_cast<std::size_t>(g * N + n)];
      if (mins)
        out.min_codes[at] = min_codes[static_cast<std::size_t>(g * N + n)];
      const bool ok = same(out.scale_of(p, g, c), w.scale_of(p, g, c)) &&
                      (!mins || same(out.min_of(p, g, c), w.min_of(p, g, c)));
      if (!ok)
        fail("group " + std::to_string(g) + ", column " + std::to_string(n) +
             ": super-block value times code is not the group's " +
             (same(out.scale_of(p, g, c), w.scale_of(p, g, c)) ? "min" : "scale") + " (" +
             std::to_string(out.scale_of(p, g, c)) + " vs " + std::to_string(w.scale_of(p, g, c)) +
             ")");
    }
  }
  return out;
}

} // namespace tpullm::kernels
