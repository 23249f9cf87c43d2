// Interval placement strategies (memory/interval_alloc.hpp).
#include "tpullm/memory/interval_alloc.hpp"

#include <algorithm>
#include <numeric>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/sequential_vertex_coloring.hpp>

#include "tpullm/support/error.hpp"

namespace tpullm::memory {

namespace {

std::int64_t align_up(std::int64_t v, std::int64_t a) {
  return (v + a - 1) / a * a;
}

bool live_together(const Interval& a, const Interval& b) {
  return a.start <= b.end && b.start <= a.end;
}

/// Places items in `order`, each at the lowest aligned offset that does not overlap an already
/// placed item whose lifetime intersects its own.
Placement greedy(const std::vector<Interval>& items, const std::vector<std::size_t>& order,
                 std::int64_t alignment, Strategy s) {
  Placement p;
  p.strategy = s;
  p.offsets.assign(items.size(), -1);
  std::vector<std::size_t> placed;
  for (std::size_t i : order) {
    const Interval& it = items[i];
    const std::int64_t size = align_up(it.size, alignment);
    // Occupied ranges of live-together placed items, sorted by offset.
    std::vector<std::pair<std::int64_t, std::int64_t>> busy;
    for (std::size_t j : placed)
      if (live_together(it, items[j]) && items[j].size > 0)
        busy.emplace_back(p.offsets[j], p.offsets[j] + align_up(items[j].size, alignment));
    std::sort(busy.begin(), busy.end());
    std::int64_t off = 0;
    for (const auto& [b, e] : busy) {
      if (off + size <= b)
        break;
      off = std::max(off, e);
    }
    p.offsets[i] = off;
    p.peak = std::max(p.peak, off + size);
    placed.push_back(i);
  }
  return p;
}

/// Interference-graph coloring: items of one color never live together and share one slot as
/// large as their largest member; slots are laid out one after the other.
Placement coloring(const std::vector<Interval>& items, std::int64_t alignment) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS>;
  const std::size_t n = items.size();
  Graph g(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (live_together(items[i], items[j]))
        boost::add_edge(i, j, g);
  std::vector<std::size_t> color(n, 0);
  auto cmap = boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, g));
  if (n > 0) {
    // Largest items first so big buffers get the low colors (and share slots with each other).
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return items[a].size > items[b].size; });
    auto omap = boost::make_iterator_property_map(order.begin(),
                                                  boost::get(boost::vertex_index, g));
    boost::sequential_vertex_coloring(g, omap, cmap);
  }
  const std::size_t colors = n ? *std::max_element(color.begin(), color.end()) + 1 : 0;
  std::vector<std::int64_t> slot(colors, 0), base(colors, 0);
  for (std::size_t i = 0; i < n; ++i)
    slot[color[i]] = std::max(slot[color[i]], align_up(items[i].size, alignment));
  Placement p;
  p.strategy = Strategy::coloring;
  for (std::size_t c = 1; c < colors; ++c)
    base[c] = base[c - 1] + slot[c - 1];
  p.peak = colors ? base[colors - 1] + slot[colors - 1] : 0;
  p.offsets.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    p.offsets[i] = base[color[i]];
  return p;
}

} // namespace

std::string_view strategy_name(Strategy s) {
  switch (s) {
  case Strategy::first_fit:
    return "first-fit";
  case Strategy::best_fit:
    return "best-fit";
  case Strategy::coloring:
    return "coloring";
  }
  return "?";
}

Placement place(const std::vector<Interval>& items, Strategy strategy, std::int64_t alignment) {
  check(alignment > 0 && (alignment & (alignment - 1)) == 0, ErrorKind::internal, "place",
        "alignment must be a power of two, got ", alignment);
  for (const auto& it : items)
    check(it.size >= 0 && it.start <= it.end, ErrorKind::internal, "place",
          "bad interval [", it.start, ", ", it.end, "] of ", it.size, " bytes");
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  switch (strategy) {
  case Strategy::first_fit:
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return items[a].start < items[b].start;
    });
    return greedy(items, order, alignment, strategy);
  case Strategy::best_fit:
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (items[a].size != items[b].size)
        return items[a].size > items[b].size;
      return items[a].start < items[b].start;
    });
    return greedy(items, order, alignment, strategy);
  case Strategy::coloring:
    return coloring(items, alignment);
  }
  return {};
}

Placement place_best(const std::vector<Interval>& items, std::int64_t alignment) {
  Placement best;
  bool first = true;
  for (Strategy s : {Strategy::best_fit, Strategy::first_fit, Strategy::coloring}) {
    Placement p = place(items, s, alignment);
    if (first || p.peak < best.peak)
      best = std::move(p);
    first = false;
  }
  return best;
}

std::int64_t max_live_bytes(const std::vector<Interval>& items, std::int64_t alignment) {
  // Sweep over events: +size at start, -size after end.
  std::vector<std::pair<std::int64_t, std::int64_t>> ev;
  for (const auto& it : items) {
    ev.emplace_back(it.start, align_up(it.size, alignment));
    ev.emplace_back(it.end + 1, -align_up(it.size, alignment));
  }
  std::sort(ev.begin(), ev.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second; // frees first
  });
  std::int64_t live = 0, best = 0;
  for (const auto& [t, d] : ev) {
    live += d;
    best = std::max(best, live);
  }
  return best;
}

std::string check_placement(const std::vector<Interval>& items, const Placement& p) {
  if (p.offsets.size() != items.size())
    return "placement has " + std::to_string(p.offsets.size()) + " offsets for " +
           std::to_string(items.size()) + " items";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (p.offsets[i] < 0 || p.offsets[i] + items[i].size > p.peak)
      return "item " + std::to_string(i) + " lies outside [0, " + std::to_string(p.peak) + ")";
    for (std::size_t j = i + 1; j < items.size(); ++j) {
      if (!live_together(items[i], items[j]) || items[i].size == 0 || items[j].size == 0)
        continue;
      const bool apart = p.offsets[i] + items[i].size <= p.offsets[j] ||
                         p.offsets[j] + items[j].size <= p.offsets[i];
      if (!apart)
        return "items " + std::to_string(i) + " and " + std::to_string(j) +
               " live together and overlap";
    }
  }
  return "";
}

} // namespace tpullm::memory
