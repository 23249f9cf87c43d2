// A chat template's work budget (issue 40): a template inside the engine's older limits (steps,
// value size, range, recursion) could still copy tens of GB per render; now the bytes of values
// a render builds are bounded, lists are capped, values cannot nest past 512 levels, and a
// render stops at the next step once its cancellation flag is set.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "tpullm/support/error.hpp"
#include "tpullm/text/chat_template.hpp"

using Catch::Contains;
using nlohmann::ordered_json;
using tpullm::Error;
using tpullm::text::ChatTemplate;
using tpullm::text::RenderCancelled;
using tpullm::text::RenderLimits;

namespace {

std::string render_error(const std::string& src, const ordered_json& ctx = ordered_json::object(),
                         const RenderLimits& limits = {}) {
  try {
    (void)ChatTemplate::parse(src).render(ctx, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "(rendered)";
}

} // namespace

TEST_CASE("a render's work is bounded in bytes", "[chat][budget]") {
  // 3000 appends of 10 kB: 18k steps and a 30 MB result, inside the step and size limits, but
  // about 45 GB of copying. It stops at the budget instead.
  const std::string growing = "{%- set ns = namespace(s='') -%}"
                              "{%- for i in range(3000) -%}{%- set ns.s = ns.s ~ ('x' * 10000) -%}"
                              "{%- endfor -%}{{ ns.s | length }}";
  CHECK_THAT(render_error(growing),
             Contains("chat template line 1: the template built more than") &&
                 Contains("bytes of values (its work budget)"));
  // Nested loops over a list, each building a string: the same.
  const std::string nested_loops =
      "{%- set big = 'y' * 100000 -%}{%- for i in range(1000) -%}{%- for j in range(100) -%}"
      "{%- set t = big ~ j -%}{%- endfor -%}{%- endfor -%}";
  CHECK_THAT(render_error(nested_loops), Contains("work budget"));
  // A long conversation is within budget: it grows with the context (16x its size).
  ordered_json ctx = {{"messages", ordered_json::array()}};
  for (int i = 0; i < 64; ++i)
    ctx["messages"].push_back({{"role", "user"}, {"content", std::string(64 << 10, 'm')}});
  const std::string chat = "{%- for m in messages -%}{{ m.role ~ ': ' ~ m.content ~ '\\n' }}"
                           "{%- if loop.last %}{{ messages[-1].content | length }}{% endif -%}"
                           "{%- endfor -%}";
  RenderLimits small;
  small.max_work_bytes = 1 << 20;
  CHECK(ChatTemplate::parse(chat).render(ctx, small).size() > (64u << 16));
}

TEST_CASE("template lists and value nesting are capped", "[chat][budget]") {
  CHECK_THAT(render_error("{{ ([0] * 1048576 + [1]) | length }}"),
             Contains("list too large (more than 1048576 items)"));
  CHECK_THAT(render_error("{{ ([0] * 2000000) | length }}"), Contains("repeated value too large"));
  CHECK_THAT(render_error("{%- set ns = namespace(l=[]) -%}{%- for i in range(600) -%}"
                          "{%- set ns.l = [ns.l] -%}{%- endfor -%}{{ ns.l | length }}"),
             Contains("a value nested deeper than 512 levels"));
  CHECK_THAT(render_error("{%- set s = 'a' * 10000 -%}{{ s.replace('a', s) | length }}"),
             Contains("str.replace() result too large"));
}

TEST_CASE("a render stops when it is cancelled", "[chat][budget]") {
  std::atomic<bool> cancel{true};
  RenderLimits limits;
  limits.cancel = &cancel;
  const ChatTemplate t = ChatTemplate::parse("{{ 'hi' }}");
  REQUIRE_THROWS_AS(t.render(ordered_json::object(), limits), RenderCancelled);
  cancel = false;
  CHECK(t.render(ordered_json::object(), limits) == "hi");
  // A long render (unbounded steps and bytes here) interrupted from another thread.
  limits.max_steps = INT64_MAX;
  limits.max_work_bytes = UINT64_MAX / 64;
  const ChatTemplate slow = ChatTemplate::parse(
      "{%- for i in range(100000) -%}{%- for j in range(100000) -%}{%- endfor -%}{%- endfor -%}");
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel = true;
  });
  CHECK_THROWS_AS(slow.render(ordered_json::object(), limits), RenderCancelled);
  stopper.join();
}
