// The ring rule of sliding-window caches (memory/kv_rings.hpp): a ring is the window plus the
// longest call's rows less one, in whole pages, only where shorter than the capacity and where
// every cache starts on a page; a rollback is kept only while every ring still holds the keys
// the next position sees.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "tpullm/memory/kv_rings.hpp"

using namespace tpullm;

TEST_CASE("a ring is window + rows - 1 positions in whole pages, or none", "[kv-rings]") {
  CHECK(memory::ring_quantum(256, 4096) == 16);
  CHECK(memory::ring_quantum(136, 4096) == 512); // int8 rows of 2 heads x (64 + 4) bytes
  CHECK(memory::ring_quantum(8192, 4096) == 1);
  const memory::KvGeometry g{4, 32768, 256};
  CHECK(memory::ring_rows(4096, 512, g, 4096) == 4608); // 4607 up to a multiple of 16
  CHECK(memory::ring_rows(4096, 1, g, 4096) == 4096);
  CHECK(memory::ring_rows(8, 16, g, 4096) == 32);
  CHECK(memory::ring_rows(0, 512, g, 4096) == 0);     // no window
  CHECK(memory::ring_rows(32768, 512, g, 4096) == 0); // not shorter than the capacity
  CHECK(memory::ring_rows(32000, 768, g, 4096) == 0); // 32767 rounds up to the capacity
  // A damaged bundle's window or call length: no ring, and no sum that overflows.
  CHECK(memory::ring_rows(INT64_MAX, 16, g, 4096) == 0);
  CHECK(memory::ring_rows(8, INT64_MAX, g, 4096) == 0);
  const memory::KvGeometry odd{4, 100, 136}; // 13600 bytes: caches off the pages
  CHECK(memory::ring_rows(8, 4, odd, 4096) == 0);
}

TEST_CASE("plan_kv_rings gives each windowed layer its ring and counts its memory", "[kv-rings]") {
  memory::KvGeometry g{3, 1024, 256, 2};
  const auto r = memory::plan_kv_rings(g, {0, 100, 2000}, {64, 64, 64}, 4096);
  CHECK(r.rows == std::vector<std::int64_t>{0, 176, 0}); // 163 -> 176; 2063 >= 1024: none
  CHECK(r.window == std::vector<std::int64_t>{0, 100, 0});
  CHECK(r.kept(0, 1024) == 1024);
  CHECK(r.kept(1, 1024) == 176);
  CHECK(r.slot_bytes(g) == 2 * (1024 + 176 + 1024) * 256);
  CHECK(r.bytes(g) == 2 * r.slot_bytes(g));
  // In the resident set a ring counts up to three times, never more than the capacity.
  CHECK(r.resident(1, 1024) == 528);
  CHECK(r.resident_bytes(g) == 2 * 2 * (1024 + 528 + 1024) * 256);
  memory::KvRings wide;
  wide.rows = {400};
  wide.window = {300};
  CHECK(wide.resident(0, 1024) == 1024);
  // No ring anywhere: empty, and the plain geometry's bytes.
  const auto none = memory::plan_kv_rings(g, {0, 5000}, {64, 64}, 4096);
  CHECK_FALSE(none.any());
  CHECK(none.rows.empty());
  CHECK(none.bytes(g) == g.bytes());
}

TEST_CASE("a rollback is kept while every ring holds what the next position sees", "[kv-rings]") {
  memory::KvRings r;
  r.rows = {0, 32};
  r.window = {0, 8};
  // Positions below 100 were written: rows hold 68..99. Position k sees k - 7 .. k - 1.
  CHECK(r.keeps(100, 100));
  CHECK(r.keeps(100, 75));       // 68 .. 74 are held
  CHECK_FALSE(r.keeps(100, 74)); // 67 was overwritten by 99
  CHECK(r.keeps(100, 0));        // nothing kept: always
  CHECK(r.keeps(20, 5));         // nothing overwritten yet
  CHECK(r.keeps(32, 5));         // nothing overwritten yet: position 5 sees 0 .. 4
  CHECK_FALSE(r.keeps(33, 5));   // 32 overwrote 0
  CHECK(r.keeps(40, 15));        // 32 .. 39 overwrote 0 .. 7; position 15 sees 8 .. 14
  CHECK_FALSE(r.keeps(40, 14));  // it would see 7
  CHECK(memory::KvRings{}.keeps(1000, 1));
}
