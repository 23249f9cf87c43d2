#pragma once
/// Static placement of buffers with known live ranges into one region (the activation arena, or
/// a core's local memory): offsets such that no two buffers live at the same time overlap.
/// Liveness is separate from placement: callers give intervals, strategies give offsets. Several
/// strategies run and the smallest peak wins; the max-live lower bound says how far from
/// optimal that is (no placement can beat it).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpullm::memory {

/// A buffer to place: live over op indices [start, end] (inclusive), `size` bytes.
struct Interval {
  std::int64_t start = 0;
  std::int64_t end = 0;
  std::int64_t size = 0;
};

/// Placement strategies.
enum class Strategy {
  first_fit, ///< in order of start time, each at the lowest offset free over its lifetime
  best_fit,  ///< largest first, each at the lowest offset free over its lifetime
  coloring,  ///< interference graph (Boost.Graph), smallest-last coloring; one slot per color
};

/// Spelling of a strategy ("first-fit", "best-fit", "coloring").
std::string_view strategy_name(Strategy s);

/// Offsets of one placement and the region size it needs.
struct Placement {
  std::vector<std::int64_t> offsets; ///< one per interval, multiples of the alignment
  std::int64_t peak = 0;             ///< bytes of the region (max offset + size, aligned)
  Strategy strategy = Strategy::best_fit;
};

/// Places `items` with `strategy`; sizes are rounded up to `alignment` (a power of two).
Placement place(const std::vector<Interval>& items, Strategy strategy, std::int64_t alignment);

/// Runs every strategy and returns the placement with the smallest peak (ties: the first).
Placement place_best(const std::vector<Interval>& items, std::int64_t alignment);

/// The max over time of the sum of live (aligned) sizes: no placement needs less.
std::int64_t max_live_bytes(const std::vector<Interval>& items, std::int64_t alignment);

/// Empty when no two simultaneously live items overlap and every item lies in [0, peak);
/// otherwise a description of the first violation.
std::string check_placement(const std::vector<Interval>& items, const Placement& p);

} // namespace tpullm::memory
