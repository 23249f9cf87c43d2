// The engine's pieces (output of Python values, operators, subscripts and slices, tests, filters,
// string / dict methods, loops and scoping, namespace, macros, whitespace control) against
// Python Jinja2's renders of small templates (tests/data/text/chat/engine_expected.jsonl, by
// scripts/gen-chat-oracle.sh), and the one-line errors of bad templates.
#include <catch2/catch.hpp>

#include <string>

#include "chat_test_util.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/text/chat_template.hpp"

using nlohmann::ordered_json;
using tpullm::ErrorKind;
using tpullm::text::ChatTemplate;

TEST_CASE("engine pieces render as Jinja2 renders them", "[chat][engine]") {
  bool ok = false;
  const ordered_json cases =
      ordered_json::parse(chat_test::read_file(chat_test::data_path("engine_cases.json"), ok));
  REQUIRE(ok);
  const auto expected = chat_test::read_jsonl(chat_test::data_path("engine_expected.jsonl"));
  REQUIRE(expected.size() == cases["cases"].size());
  REQUIRE(expected.size() > 50);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const ordered_json& c = cases["cases"][i];
    const ordered_json& rec = expected[i];
    REQUIRE(c["name"] == rec["name"]);
    INFO(c["name"].get<std::string>() << ": " << c["template"].get<std::string>());
    if (rec.contains("text")) {
      std::string got;
      try {
        got = ChatTemplate::parse(c["template"]).render(cases["context"]);
      } catch (const tpullm::Error& e) {
        FAIL_CHECK("threw " << e.what());
        continue;
      }
      CHECK(got == rec["text"].get<std::string>());
    } else {
      INFO("Jinja2 raised " << rec["error"].get<std::string>());
      CHECK_THROWS_AS(ChatTemplate::parse(c["template"]).render(cases["context"]), tpullm::Error);
    }
  }
}

namespace {

// The error a template gives at parse time (empty when it parses).
tpullm::Error parse_error(const std::string& src) {
  try {
    (void)ChatTemplate::parse(src);
  } catch (const tpullm::Error& e) {
    return e;
  }
  return tpullm::Error(ErrorKind::internal, "", "parsed");
}

bool one_line(const std::string& s) {
  return s.find('\n') == std::string::npos;
}

} // namespace

TEST_CASE("bad templates fail at parse with the construct and its line", "[chat][errors]") {
  struct Bad {
    const char* src;
    ErrorKind kind;
    const char* where;
    const char* needle;
  };
  const Bad bad[] = {
      {"a\n{% if x %}b", ErrorKind::invalid_input, "chat template line 2", "endif"},
      {"{{ x ", ErrorKind::invalid_input, "chat template line 1", "unterminated"},
      {"ok\n\n{% for x in y %}", ErrorKind::invalid_input, "chat template line 3", "endfor"},
      {"{# never closed", ErrorKind::invalid_input, "chat template line 1", "comment"},
      {"{{ 'abc }}", ErrorKind::invalid_input, "chat template line 1", "string"},
      {"{{ 1 + }}", ErrorKind::invalid_input, "chat template line 1", "expected an expression"},
      {"{{ a b }}", ErrorKind::invalid_input, "chat template line 1", "expected '}}'"},
      {"{{ (1 }}", ErrorKind::invalid_input, "chat template line 1", "unterminated"},
      {"{{ (1 ] }}", ErrorKind::invalid_input, "chat template line 1", "expected ')'"},
      {"{{ x ? y }}", ErrorKind::invalid_input, "chat template line 1", "unexpected character"},
      {"x\n{% endif %}", ErrorKind::invalid_input, "chat template line 2", "endif"},
      {"{% frobnicate %}", ErrorKind::invalid_input, "chat template line 1", "frobnicate"},
      {"\n\n{% include 'other.j2' %}", ErrorKind::unsupported, "chat template line 3", "include"},
      {"{% call m() %}x{% endcall %}", ErrorKind::unsupported, "chat template line 1", "call"},
      {"{% filter upper %}x{% endfilter %}", ErrorKind::unsupported, "chat template line 1",
       "filter"},
      {"{% raw %}{{ x }}{% endraw %}", ErrorKind::unsupported, "chat template line 1", "raw"},
      {"{% extends 'base' %}", ErrorKind::unsupported, "chat template line 1", "extends"},
      {"\n{{ x | wordwrap }}", ErrorKind::unsupported, "chat template line 2", "wordwrap"},
      {"{{ x is prime }}", ErrorKind::unsupported, "chat template line 1", "prime"},
      {"{% for x in y recursive %}{% endfor %}", ErrorKind::unsupported, "chat template line 1",
       "recursive"},
      {"{{ 1 < 2 < 3 }}", ErrorKind::unsupported, "chat template line 1", "chained"},
      {"{{ f(*args) }}", ErrorKind::unsupported, "chat template line 1", "*args"},
  };
  for (const Bad& b : bad) {
    INFO(b.src);
    const tpullm::Error e = parse_error(b.src);
    CHECK(e.kind() == b.kind);
    CHECK(e.where() == b.where);
    CHECK(std::string(e.what()).find(b.needle) != std::string::npos);
    CHECK(one_line(e.what()));
  }
  // Hostile nesting is refused, not a stack overflow.
  CHECK(parse_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").kind() ==
        ErrorKind::unsupported);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i)
    chain += " + 1";
  CHECK(parse_error(chain + " }}").kind() == ErrorKind::unsupported);
  std::string deep;
  for (int i = 0; i < 3000; ++i)
    deep += "{% if x %}";
  CHECK(parse_error(deep).kind() == ErrorKind::unsupported);
}

TEST_CASE("render-time failures are one-line errors with the line", "[chat][errors]") {
  const auto render_error = [](const std::string& src, const ordered_json& ctx) {
    try {
      (void)ChatTemplate::parse(src).render(ctx);
    } catch (const tpullm::Error& e) {
      return e;
    }
    return tpullm::Error(ErrorKind::internal, "", "rendered");
  };
  const ordered_json ctx = {{"n", 3}, {"s", "x"}};
  tpullm::Error e = render_error("a\nb\n{{ raise_exception('Roles must alternate') }}", ctx);
  CHECK(e.kind() == ErrorKind::invalid_input);
  CHECK(e.where() == "chat template line 3");
  CHECK(e.message().find("Roles must alternate") != std::string::npos);

  e = render_error("{{ raise_exception('two\\nlines') }}", ctx);
  CHECK(one_line(e.what()));
  CHECK(e.message().find("two\\nlines") != std::string::npos);

  e = render_error("\n{{ missing.attr }}", ctx);
  CHECK(e.where() == "chat template line 2");
  CHECK(e.message().find("'missing' is undefined") != std::string::npos);

  e = render_error("{{ s.zfill(3) }}", ctx);
  CHECK(e.kind() == ErrorKind::unsupported);
  CHECK(e.message().find("zfill") != std::string::npos);

  e = render_error("{{ 'é'.upper() }}", ctx);
  CHECK(e.kind() == ErrorKind::unsupported);

  e = render_error("{{ 'x' * 100000000000 }}", ctx);
  CHECK(e.kind() == ErrorKind::invalid_input);
  CHECK(e.message().find("too large") != std::string::npos);

  e = render_error("{% for i in range(1000000) %}{% endfor %}", ctx);
  CHECK(e.message().find("range") != std::string::npos);

  e = render_error("{% macro m(x) %}{{ m(x) }}{% endmacro %}{{ m(1) }}", ctx);
  CHECK(e.message().find("nested too deeply") != std::string::npos);

  // 100000 iterations of a 400-node expression: far beyond the step budget.
  std::string sum = "1";
  for (int k = 0; k < 200; ++k)
    sum += " + 1";
  e = render_error("{% for i in range(100000) %}{% if " + sum + " %}{% endif %}{% endfor %}", ctx);
  CHECK(e.message().find("ran too long") != std::string::npos);

  // Jinja2 renders this "[[]]" at once; an empty repeat must not loop.
  CHECK(ChatTemplate::parse("[{{ [] * 10000000000000 }}{{ '' * 10000000000000 }}]").render(ctx) ==
        "[[]]");

  CHECK_THROWS_AS(ChatTemplate::parse("{{ x }}").render(ordered_json::array()), tpullm::Error);
  CHECK(one_line(e.what()));
}

TEST_CASE("key order: ordered contexts keep it, sorted ones sort", "[chat]") {
  const ChatTemplate t =
      ChatTemplate::parse("{{ d|tojson }}|{% for k, v in d|items %}{{ k }}{% endfor %}");
  const ordered_json ordered = {{"d", {{"zeta", 1}, {"alpha", 2}}}};
  // Expected as Python json.dumps / dict order give them for {"zeta": 1, "alpha": 2}.
  CHECK(t.render(ordered) == R"({"zeta": 1, "alpha": 2}|zetaalpha)");
  const nlohmann::json sorted = {{"d", {{"zeta", 1}, {"alpha", 2}}}};
  CHECK(t.render(sorted) == R"({"alpha": 2, "zeta": 1}|alphazeta)");
  CHECK(t.source().find("tojson") != std::string::npos);
}
