// Placement strategies on random interval sets: no two simultaneously live buffers overlap,
// every buffer lies inside the region, and no strategy beats the max-live lower bound. The
// checks here are written independently of memory::check_placement (a brute-force sweep over
// time), and check_placement itself must catch a planted overlap.
#include <catch2/catch.hpp>

#include <random>

#include "tpullm/memory/interval_alloc.hpp"

using namespace tpullm::memory;

namespace {

std::vector<Interval> random_intervals(std::mt19937_64& rng, int n, std::int64_t horizon) {
  std::uniform_int_distribution<std::int64_t> t(0, horizon - 1), len(0, horizon / 4);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<Interval> v;
  for (int i = 0; i < n; ++i) {
    const std::int64_t s = t(rng);
    // Sizes mix large, small and odd ones (alignment rounding must hold up).
    const std::int64_t size = pick(rng) < 2    ? 1 + t(rng) * 4096
                              : pick(rng) == 0 ? 0
                                               : 1 + t(rng) * 37;
    v.push_back({s, std::min(horizon - 1, s + len(rng)), size});
  }
  return v;
}

std::int64_t align_up(std::int64_t v, std::int64_t a) {
  return (v + a - 1) / a * a;
}

/// Brute force: at every time step, the live buffers are pairwise disjoint.
bool overlaps_at_some_time(const std::vector<Interval>& items, const Placement& p,
                           std::int64_t horizon) {
  for (std::int64_t t = 0; t < horizon; ++t) {
    std::vector<std::pair<std::int64_t, std::int64_t>> live;
    for (std::size_t i = 0; i < items.size(); ++i)
      if (items[i].start <= t && t <= items[i].end && items[i].size > 0)
        live.emplace_back(p.offsets[i], p.offsets[i] + items[i].size);
    std::sort(live.begin(), live.end());
    for (std::size_t k = 1; k < live.size(); ++k)
      if (live[k].first < live[k - 1].second)
        return true;
  }
  return false;
}

} // namespace

TEST_CASE("every placement strategy is valid on random interval sets", "[memory][property]") {
  std::mt19937_64 rng(20261130);
  const std::int64_t horizon = 64, align = 64;
  for (int trial = 0; trial < 200; ++trial) {
    const auto items = random_intervals(rng, 1 + trial % 40, horizon);
    const std::int64_t bound = max_live_bytes(items, align);
    for (Strategy s : {Strategy::first_fit, Strategy::best_fit, Strategy::coloring}) {
      INFO("trial " << trial << " strategy " << strategy_name(s));
      const Placement p = place(items, s, align);
      REQUIRE(p.offsets.size() == items.size());
      for (std::size_t i = 0; i < items.size(); ++i) {
        CHECK(p.offsets[i] % align == 0);
        CHECK(p.offsets[i] + align_up(items[i].size, align) <= p.peak);
      }
      CHECK_FALSE(overlaps_at_some_time(items, p, horizon));
      CHECK(check_placement(items, p).empty());
      CHECK(p.peak >= bound);
    }
    const Placement best = place_best(items, align);
    for (Strategy s : {Strategy::first_fit, Strategy::best_fit, Strategy::coloring})
      CHECK(best.peak <= place(items, s, align).peak);
  }
}

TEST_CASE("the placement checker catches overlaps and out-of-region buffers", "[memory]") {
  const std::vector<Interval> items{{0, 5, 100}, {3, 8, 100}, {9, 9, 50}};
  Placement p = place(items, Strategy::best_fit, 64);
  REQUIRE(check_placement(items, p).empty());
  CHECK(p.offsets[2] == 0); // dead-by-then buffers are reused
  Placement bad = p;
  bad.offsets[1] = bad.offsets[0] + 32; // live together, overlapping
  CHECK_THAT(check_placement(items, bad), Catch::Contains("overlap"));
  bad = p;
  bad.peak = 64;
  CHECK_THAT(check_placement(items, bad), Catch::Contains("outside"));
}

TEST_CASE("reuse: a chain of short-lived buffers needs only two slots", "[memory]") {
  std::vector<Interval> chain;
  for (int i = 0; i < 10; ++i)
    chain.push_back({i, i + 1, 1000});
  for (Strategy s : {Strategy::first_fit, Strategy::best_fit, Strategy::coloring})
    CHECK(place(chain, s, 64).peak == 2 * 1024);
  CHECK(max_live_bytes(chain, 64) == 2 * 1024);
}
