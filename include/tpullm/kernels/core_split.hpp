#pragma once
/// The core-split decision a kernel executes: which dimension is divided and into how many parts.
/// The compiler's Tpu ops carry this; the runtime passes it to the kernel unchanged, so what was
/// planned is what runs. Parallel regions use OpenMP, whose thread pool is created once per
/// process.

#include <algorithm>
#include <cstdint>
#include <utility>

#include <omp.h>

namespace tpullm::kernels {

/// Which logical dimension of a kernel's iteration space is split across cores.
enum class SplitDim : std::uint8_t { none, rows, cols, heads };

/// A core split: `parts` workers, each taking a contiguous range of `dim`.
struct CoreSplit {
  SplitDim dim = SplitDim::none; ///< dimension divided across cores
  int parts = 1;                 ///< number of workers (1 = run on the calling thread)
};

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

/// Runs `body(begin, end)` over [0, n) split into `split.parts` ranges on OpenMP threads
/// (inline when parts <= 1 or n is small). `align` keeps ranges on vector/tile boundaries.
template <class Body>
void parallel_for(const CoreSplit& split, std::int64_t n, std::int64_t align, Body&& body) {
  const int parts = static_cast<int>(std::max<std::int64_t>(
      1, std::min<std::int64_t>(split.parts, (n + align - 1) / std::max<std::int64_t>(align, 1))));
  if (parts <= 1 || split.dim == SplitDim::none) {
    body(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int p = 0; p < parts; ++p) {
    auto [b, e] = split_range(n, p, parts, align);
    if (b < e)
      body(b, e);
  }
}

} // namespace tpullm::kernels
