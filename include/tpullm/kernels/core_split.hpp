#pragma once
/// The core-split decision a kernel executes: which dimension is divided and into how many parts.
/// The compiler's Tpu ops carry this; the runtime passes it to the kernel unchanged. One
/// refinement is the kernels' own, because only they know their row-tile height at run time:
/// a planned rows split of a GEMM too short to feed every part runs over columns (skinny_split).
/// Parallel regions run on the worker pool (worker_pool.hpp): the executor's while it runs a
/// program, else one made once per process.

#include <algorithm>
#include <cstdint>
#include <utility>

#include "tpullm/kernels/worker_pool.hpp"

namespace tpullm::kernels {

/// Which logical dimension of a kernel's iteration space is split across cores.
enum class SplitDim : std::uint8_t { none, rows, cols, heads };

/// A core split: `parts` workers, each taking a contiguous range of `dim`.
struct CoreSplit {
  SplitDim dim = SplitDim::none; ///< dimension divided across cores
  int parts = 1;                 ///< number of workers (1 = run on the calling thread)
};

/// Rows split of a GEMM whose rows make fewer than kMinRowTilesPerPart tiles of `align` rows
/// per part are split over columns instead.
inline constexpr std::int64_t kMinRowTilesPerPart = 4;

/// `split` with a rows split of a short activation (M rows in tiles of `align`) turned into a
/// columns split: over rows, a 16-row prompt on 2 cores with 14-row tiles runs 14 rows on one
/// core and 2 on the other, and every core streams the whole weight matrix; over columns each
/// core reads its share of the weights once and all cores do equal work.
inline CoreSplit skinny_split(const CoreSplit& split, std::int64_t M, std::int64_t align) {
  CoreSplit s = split;
  if (s.dim == SplitDim::rows && s.parts > 1 &&
      (M + align - 1) / align < kMinRowTilesPerPart * s.parts)
    s.dim = SplitDim::cols;
  return s;
}

/// Half-open range [begin, end) of `n` items that part `p` of `parts` owns, with chunks
/// rounded to multiples of `align` (the last part takes the remainder).
inline std::pair<std::int64_t, std::int64_t> split_range(std::int64_t n, int p, int parts,
                                                         std::int64_t align = 1) {
  const std::int64_t units = (n + align - 1) / align;
  const std::int64_t per = units / parts, extra = units % parts;
  const std::int64_t ub = p * per + std::min<std::int64_t>(p, extra);
  const std::int64_t ue = ub + per + (p < extra ? 1 : 0);
  return {std::min(n, ub * align), std::min(n, ue * align)};
}

/// Chunks per part a parallel_for deals out: enough that a late worker takes fewer of them.
inline constexpr int kChunksPerPart = 4;

/// Runs `body(begin, end)` over [0, n) split into ranges on the current worker pool
/// (worker_pool.hpp): up to `split.parts` threads take `chunks_per_part` ranges each, handed out
/// one at a time (inline when parts <= 1 or n is small). `align` keeps ranges on vector/tile
/// boundaries; a body with a per-call cost (a GEMM packing its rows) passes chunks_per_part 1.
template <class Body>
void parallel_for(const CoreSplit& split, std::int64_t n, std::int64_t align, Body&& body,
                  int chunks_per_part = kChunksPerPart) {
  const std::int64_t units = (n + align - 1) / std::max<std::int64_t>(align, 1);
  const int parts =
      static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(split.parts, units)));
  if (parts <= 1 || split.dim == SplitDim::none) {
    body(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunks =
      std::min<std::int64_t>(units, std::int64_t{parts} * std::max(1, chunks_per_part));
  current_pool().run(chunks, parts, [&](std::int64_t c, int) {
    auto [b, e] = split_range(n, static_cast<int>(c), static_cast<int>(chunks), align);
    if (b < e)
      body(b, e);
  });
}

/// Runs `body(item)` for every item in [0, items) on up to `parts` threads of the current worker
/// pool, one item at a time (for items of unequal cost, e.g. causal attention tiles).
template <class Body>
void parallel_items(int parts, std::int64_t items, Body&& body) {
  current_pool().run(items, parts, [&](std::int64_t i, int) { body(i); });
}

} // namespace tpullm::kernels
