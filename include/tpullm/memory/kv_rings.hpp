#pragma once
/// Sliding-window layers' KV caches kept as rings: one rule for the executor (which maps them),
/// the session (which may roll a conversation back only as far as a ring still holds) and the
/// memory checks.
///
/// A layer with a sliding window of W keys never reads a key more than W - 1 positions behind
/// the query. Its cache keeps its planned layout (position p at slot p of [capacity, kv_heads,
/// d], memory/kv_geometry.hpp), so the planner, the stage functions and the kernels do not
/// change; but the executor backs the cache with only R positions of memory, mapped again and
/// again along the capacity: position p and p + R share one physical row. A call writes its L
/// rows before its attention reads, so writing position x destroys x - R; the keys a call's
/// rows see (back to its first row's position - W + 1) survive when R >= W + L - 1. That is
/// the ring size, rounded up to whole pages (the unit of a mapping).

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "tpullm/memory/kv_geometry.hpp"

namespace tpullm::memory {

/// The page the compiler rounds a windowed model's cache capacity to, so that each cache starts
/// on a page (x86-64's; a machine with larger pages keeps every position, as without rings).
inline constexpr std::int64_t kRingPage = 4096;

/// Positions of `row_bytes` each that fill whole pages of `page` bytes: the smallest q > 0 with
/// q * row_bytes a multiple of page.
inline std::int64_t ring_quantum(std::int64_t row_bytes, std::int64_t page) {
  return row_bytes > 0 && page > 0 ? page / std::gcd(row_bytes, page) : 1;
}

/// The ring of one layer whose window is `window` keys and whose calls write at most `max_rows`
/// positions at once: window + max_rows - 1 positions rounded up to whole pages; 0 (the whole
/// capacity is kept) without a window, when the ring would not be shorter than the capacity, or
/// when a cache of `g` does not start on a page boundary (capacity * row_bytes not a multiple of
/// `page`).
inline std::int64_t ring_rows(std::int64_t window, std::int64_t max_rows, const KvGeometry& g,
                              std::int64_t page) {
  if (window <= 0 || max_rows <= 0 || g.row_bytes <= 0 || page <= 0 || window >= g.capacity ||
      max_rows >= g.capacity || (g.capacity * g.row_bytes) % page != 0)
    return 0; // (a window or call as long as the cache keeps everything; no sum can overflow)
  const std::int64_t q = ring_quantum(g.row_bytes, page);
  const std::int64_t rows = (window + max_rows - 1 + q - 1) / q * q;
  return rows < g.capacity ? rows : 0;
}

/// The rings of a KV geometry's layers (empty vectors: none).
struct KvRings {
  std::vector<std::int64_t> rows;   ///< per layer: positions of memory behind its cache (0: all)
  std::vector<std::int64_t> window; ///< per layer: its sliding window in keys (0: none)

  /// True when at least one layer's cache is a ring.
  bool any() const {
    return std::any_of(rows.begin(), rows.end(), [](std::int64_t r) { return r > 0; });
  }
  /// Positions of memory behind layer `layer`'s caches (its ring, or `capacity`).
  std::int64_t kept(std::int64_t layer, std::int64_t capacity) const {
    const auto i = static_cast<std::size_t>(layer);
    return i < rows.size() && rows[i] > 0 ? rows[i] : capacity;
  }
  /// Whether a conversation may be rolled back to keep positions [0, keep) and go on at
  /// position `keep`, when no position at or past `written` was ever written into its caches
  /// (since they were last reset): every ring still holds the keys a query at `keep` sees
  /// before itself (positions keep - window + 1 .. keep - 1). A key y is lost once a position
  /// y + R was written, and every write is below `written`. Always true without rings.
  bool keeps(std::int64_t written, std::int64_t keep) const {
    if (keep <= 0)
      return true;
    for (std::size_t l = 0; l < rows.size(); ++l) {
      if (rows[l] <= 0)
        continue;
      const std::int64_t first_seen = std::max<std::int64_t>(0, keep - window[l] + 1);
      if (first_seen < written - rows[l]) // overwritten by a position in [first_seen + R, written)
        return false;
    }
    return true;
  }
  /// Bytes of memory behind one conversation's caches of `g` (every layer's keys and values).
  std::int64_t slot_bytes(const KvGeometry& g) const {
    std::int64_t positions = 0;
    for (std::int64_t l = 0; l < g.layers; ++l)
      positions += kept(l, g.capacity);
    return 2 * positions * g.row_bytes;
  }
  /// Bytes of memory behind the whole region of `g` (every slot).
  std::int64_t bytes(const KvGeometry& g) const { return g.slots * slot_bytes(g); }
  /// What the region of `g` may count in the process's resident set at most: a ring's pages
  /// count once per mapping they were touched through, and the executor keeps three copies'
  /// page tables (KvRegion::settle), so three times its memory, at most the capacity. What a
  /// budget on the resident set (--memory-budget, bench's peak check) must count.
  std::int64_t resident_bytes(const KvGeometry& g) const {
    std::int64_t positions = 0;
    for (std::int64_t l = 0; l < g.layers; ++l)
      positions += resident(l, g.capacity);
    return g.slots * 2 * positions * g.row_bytes;
  }
  /// Positions layer `layer`'s caches may count in the resident set (see resident_bytes).
  std::int64_t resident(std::int64_t layer, std::int64_t capacity) const {
    return std::min(3 * kept(layer, capacity), capacity);
  }
};

/// The rings of `g`'s layers: layer l with window `windows[l]` (0: none) whose calls write at
/// most `max_rows[l]` positions at once gets ring_rows(windows[l], max_rows[l], g, page).
/// Vectors shorter than g.layers leave the missing layers without a ring.
inline KvRings plan_kv_rings(const KvGeometry& g, const std::vector<std::int64_t>& windows,
                             const std::vector<std::int64_t>& max_rows, std::int64_t page) {
  KvRings r;
  r.rows.assign(static_cast<std::size_t>(std::max<std::int64_t>(g.layers, 0)), 0);
  r.window.assign(r.rows.size(), 0);
  for (std::size_t l = 0; l < r.rows.size(); ++l) {
    const std::int64_t w = l < windows.size() ? windows[l] : 0;
    const std::int64_t m = l < max_rows.size() ? max_rows[l] : 0;
    r.rows[l] = ring_rows(w, m, g, page);
    r.window[l] = r.rows[l] > 0 ? w : 0;
  }
  if (!r.any())
    return {};
  return r;
}

} // namespace tpullm::memory
