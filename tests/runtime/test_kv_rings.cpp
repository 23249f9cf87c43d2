// Sliding-window layers' KV caches as rings (memory/kv_rings.hpp, runtime/kv_region.hpp): the
// region maps a ring's R positions again and again, so position p and p + R are one row; a
// windowed model answers bit for bit as with every position kept (prompt in segments, decode
// far past R, speculative rollbacks), with less memory behind its caches; a rollback the ring
// cannot honour is refused by Session::truncate and turned into a fresh prefill by the prompt
// cache.
#include "small_compile.hpp"
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <vector>

#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/kernels/sampling.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/kv_region.hpp"
#include "tpullm/runtime/prompt_cache.hpp"
#include "tpullm/runtime/session.hpp"

using namespace tpullm;

namespace {

TEST_CASE("a ring maps position p and p + R of its cache to one row, nothing else", "[kv-rings]") {
  // 2 slots of 3 layers, 256 positions of 128 bytes; layer 1's caches are rings of 64.
  memory::KvGeometry g{3, 256, 128, 2};
  memory::KvRings rings;
  rings.rows = {0, 64, 0};
  rings.window = {0, 24, 0};
  runtime::KvRegion r(g, rings);
  REQUIRE(r.rings().any());
  CHECK(r.size() == static_cast<std::size_t>(g.bytes()));
  CHECK(r.memory_bytes() == 2 * 2 * (256 + 64 + 256) * 128);
  auto row = [&](std::int64_t slot, std::int64_t layer, int kind, std::int64_t pos) {
    return r.data() + g.slot_offset(slot) + g.cache_offset(layer, kind) + pos * g.row_bytes;
  };
  std::memset(row(1, 1, 0, 5), 0x5a, 128);
  for (std::int64_t p : {5 + 64, 5 + 128, 5 + 192}) {
    INFO("position " << p);
    CHECK(std::to_integer<int>(row(1, 1, 0, p)[0]) == 0x5a);
    CHECK(std::to_integer<int>(row(1, 1, 0, p)[127]) == 0x5a);
  }
  // Settling far away drops the page mappings of copies 0 and 1, not the ring's contents.
  r.settle(1, 1, 200);
  r.settle(1, 0, 200); // a layer without a ring: nothing to do
  CHECK(std::to_integer<int>(row(1, 1, 0, 5)[0]) == 0x5a);
  CHECK(std::to_integer<int>(row(1, 1, 0, 5 + 64)[127]) == 0x5a);
  r.settle(1, 1, 0);
  CHECK(std::to_integer<int>(row(1, 1, 0, 5 + 192)[0]) == 0x5a);
  // Other positions, the values cache, the other slot and the plain layers are untouched.
  CHECK(std::to_integer<int>(row(1, 1, 0, 6)[0]) == 0);
  CHECK(std::to_integer<int>(row(1, 1, 1, 5)[0]) == 0);
  CHECK(std::to_integer<int>(row(0, 1, 0, 5)[0]) == 0);
  std::memset(row(0, 0, 0, 5), 0x33, 128);
  CHECK(std::to_integer<int>(row(0, 0, 0, 5 + 64)[0]) == 0);
  CHECK(std::to_integer<int>(row(1, 1, 0, 5)[0]) == 0x5a);
  // Without rings: plain memory, every position's bytes.
  runtime::KvRegion plain(g, {});
  CHECK_FALSE(plain.rings().any());
  CHECK(plain.memory_bytes() == g.bytes());
  // The last partial copy of a ring (capacity not a multiple of R) still aliases.
  memory::KvGeometry g2{1, 96, 128, 1};
  memory::KvRings r2;
  r2.rows = {64};
  r2.window = {8};
  runtime::KvRegion q(g2, r2);
  std::memset(q.data() + 90 * 128, 0x11, 128);
  CHECK(std::to_integer<int>(q.data()[26 * 128]) == 0x11);
  CHECK(std::to_integer<int>(q.data()[(96 + 26) * 128 - 1]) == 0);
}

/// llama-gqa with a window of 8 keys on every layer, segments of up to 16 rows (and 4 / 8 for
/// verify calls), 512 positions: its rings are 8 + 16 - 1 positions in whole pages (32).
struct Windowed {
  frontend::StageParams params = [] {
    auto p = tpullm_test::small_params(512, 16, {128, 512});
    p.prefill_chunks = {4, 8};
    return p;
  }();
  frontend::ModelDesc desc = [] {
    auto d = frontend::load_model(tpullm_test::model_dir("llama-gqa"));
    d.sliding_windows.assign(static_cast<std::size_t>(d.dims.layers), 8);
    return d;
  }();
  codegen::CompiledModel cm = [this] {
    compiler::CompileOptions o;
    o.target.cores = 2;
    return compiler::compile(frontend::build_top_modules(desc, params), o);
  }();
  runtime::SessionDims dims() const {
    return runtime::session_dims(bundle::make_model_info(desc, params, "f32"));
  }
};

/// One executor with its stages and session.
struct Run {
  Run(const Windowed& w, bool rings)
      : exec(runtime::make_executor(w.cm, 2, 1, rings)), stages(*exec),
        session(stages, w.dims(), w.params), cache(session) {}
  std::unique_ptr<runtime::Executor> exec;
  runtime::CompiledStages stages;
  runtime::Session session;
  runtime::PromptCache cache;
};

std::vector<std::int32_t> prompt(std::size_t n, std::int32_t salt) {
  std::vector<std::int32_t> p(n);
  for (std::size_t i = 0; i < n; ++i)
    p[i] = static_cast<std::int32_t>((i * 37 + static_cast<std::size_t>(salt) * 11 + 5) % 500);
  return p;
}

runtime::GenerateOptions greedy(std::int64_t n) {
  runtime::GenerateOptions g;
  g.stop.max_new_tokens = n;
  return g;
}

TEST_CASE("a windowed model answers bit for bit with its caches as rings", "[kv-rings]") {
  const Windowed w;
  Run ring(w, true), full(w, false);
  const auto& rr = ring.exec->kv_rings();
  REQUIRE(rr.any());
  CHECK(rr.rows == std::vector<std::int64_t>(3, 32));
  CHECK(full.exec->kv_rings().rows.empty());
  const std::int64_t capacity = full.exec->kv_geometry().capacity; // 513 in whole pages: 528
  CHECK(capacity == 528);
  CHECK(ring.exec->kv_memory_bytes() * capacity == full.exec->kv_memory_bytes() * 32);

  // A prompt of 100 tokens (segments of 16 and a padded tail), then 300 tokens decoded: far
  // past the ring, every position's keys landing on a row that held older ones.
  const auto pr = prompt(100, 1);
  const auto a = ring.session.prefill(pr, true);
  const auto b = full.session.prefill(pr, true);
  REQUIRE(a.size() == b.size());
  CHECK(a == b);
  auto next = static_cast<std::int32_t>(kernels::argmax(std::span<const float>(b).last(512)));
  for (int step = 0; step < 300; ++step) {
    INFO("decode step " << step);
    const auto la = ring.session.decode(next);
    const auto lb = full.session.decode(next);
    REQUIRE(la == lb);
    next = static_cast<std::int32_t>(kernels::argmax(std::span<const float>(lb)));
  }
  CHECK(ring.session.length() == 400);

  // A rollback within the ring is kept; one past it is refused, and the full cache keeps it.
  CHECK(ring.session.keepable(395) == 395);
  CHECK(ring.session.keepable(40) == 0);
  CHECK(full.session.keepable(40) == 40);
  try {
    ring.session.truncate(40);
    FAIL("a rollback past the ring was kept");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_input);
    CHECK_THAT(std::string(e.what()), Catch::Contains("ring cache no longer holds"));
  }
  CHECK(ring.session.length() == 400);
  ring.session.truncate(395);
  full.session.truncate(395);
  CHECK(ring.session.decode(7) == full.session.decode(7));
}

TEST_CASE("the prompt cache re-feeds from position 0 what a ring no longer holds", "[kv-rings]") {
  const Windowed w;
  Run ring(w, true), full(w, false), fresh(w, true);
  const auto first = prompt(120, 2);
  const auto r1 = ring.cache.generate(first, greedy(80));
  const auto f1 = full.cache.generate(first, greedy(80));
  CHECK(r1.result.tokens == f1.result.tokens);

  // Continuing the conversation keeps everything: nothing is rolled back.
  auto more = first;
  more.insert(more.end(), r1.result.tokens.begin(), r1.result.tokens.end());
  const auto tail = prompt(10, 3);
  more.insert(more.end(), tail.begin(), tail.end());
  const auto r2 = ring.cache.generate(more, greedy(20));
  const auto f2 = full.cache.generate(more, greedy(20));
  CHECK(r2.reused == 199);
  CHECK(f2.reused == 199);
  CHECK(r2.result.tokens == f2.result.tokens);

  // A prompt that departs from the conversation after 50 tokens: the full cache keeps 50, the
  // rings (32 positions) no longer hold what position 50 sees, so the prompt is fed whole, and
  // answers as a fresh session does, bit for bit.
  auto other = std::vector<std::int32_t>(first.begin(), first.begin() + 50);
  const auto tail2 = prompt(30, 4);
  other.insert(other.end(), tail2.begin(), tail2.end());
  const auto r3 = ring.cache.generate(other, greedy(30));
  const auto f3 = full.cache.generate(other, greedy(30));
  const auto n3 = fresh.cache.generate(other, greedy(30));
  CHECK(f3.reused == 50);
  CHECK(r3.reused == 0);
  CHECK(r3.result.tokens == n3.result.tokens);
}

TEST_CASE("speculative rollbacks stay inside the rings: the answer is plain decoding's",
          "[kv-rings]") {
  const Windowed w;
  Run plain(w, false), ring(w, true), full(w, false);
  const auto pr = prompt(40, 5);
  const auto answer = plain.session.generate(pr, greedy(120)).tokens;
  REQUIRE(answer.size() == 120);
  // Drafts of 7 from the plain answer with every third token wrong: rows written and rolled back
  // on every verify call.
  auto g = greedy(120);
  g.speculation.draft_max = 7;
  g.speculation.draft = [&](std::span<const std::int32_t> ctx, int k) {
    std::vector<std::int32_t> d;
    for (std::size_t j = ctx.size() - pr.size();
         j < answer.size() && static_cast<int>(d.size()) < k; ++j)
      d.push_back(d.size() == 2 ? (answer[j] + 1) % 512 : answer[j]);
    return d;
  };
  const auto spec = ring.session.generate(pr, g);
  const auto spec_full = full.session.generate(pr, g);
  CHECK(spec.tokens == answer);
  CHECK(spec.speculation.verify_calls > 10);
  CHECK(spec.speculation.accepted < spec.speculation.drafted);
  // Verify rows round as segments, not as decode steps (f32): the rings hold what every
  // position kept holds, bit for bit.
  CHECK(spec.speculation.verify_calls == spec_full.speculation.verify_calls);
  CHECK(ring.session.length() == full.session.length());
  CHECK(ring.session.decode(answer.back()) == full.session.decode(answer.back()));
}

} // namespace
