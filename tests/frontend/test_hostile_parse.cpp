// Hostile JSON and regexes (issue 40): JSON nested hundreds of thousands deep is one error at
// parse time for every reader (config.json, calibration tables, targets, safetensors headers),
// and a regex from a user or a checkpoint (GPTQModel dynamic, AutoRound extra_config,
// compressed-tensors re:) ends with an error instead of backtracking for hours or overflowing
// the stack.
#include <time.h>
#include <string>

#include <catch2/catch.hpp>

#include "tpullm/conversion/calib_table.hpp"
#include "tpullm/frontend/hf_config.hpp"
#include "tpullm/frontend/quant_config.hpp"
#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/support/json.hpp"
#include "tpullm/support/regex.hpp"
#include "tpullm/target/target.hpp"

using namespace tpullm;
using Catch::Contains;

namespace {

std::string nested(std::size_t depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

// CPU seconds of this thread since `t0` (a loaded machine's wall time says little).
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double seconds_since(double t0) {
  return cpu_now() - t0;
}

} // namespace

TEST_CASE("JSON nesting is bounded before parsing", "[hostile][json]") {
  CHECK(parse_json(nested(kMaxJsonDepth), "ok.json").is_array());
  CHECK(parse_ordered_json(nested(kMaxJsonDepth), "ok.json").is_array());
  REQUIRE_THROWS_WITH(parse_json(nested(kMaxJsonDepth + 1), "deep.json"),
                      Contains("deep.json: JSON nested deeper than 256 levels (at byte 256)"));
  // Half a million levels (well under a 1 MiB request): refused at once, no stack overflow.
  const double t0 = cpu_now();
  const std::string deep = std::string(500000, '[');
  REQUIRE_THROWS_WITH(parse_ordered_json(deep, "body"), Contains("nested deeper than 256"));
  std::string objects;
  for (int i = 0; i < 300000; ++i)
    objects += "{\"a\":";
  REQUIRE_THROWS_WITH(parse_json(objects, "o.json"), Contains("nested deeper than 256"));
  CHECK(seconds_since(t0) < 1.0);
  // Brackets inside strings (escaped quotes included) do not count; errors stay typed.
  const std::string in_string = "[\"" + std::string(1000, '[') + "\\\"" + "]\"]";
  CHECK(parse_json(in_string, "s.json").size() == 1);
  try {
    (void)parse_json("[1,", "t.json");
    FAIL("parsed");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_input);
    CHECK_THAT(e.what(), Contains("t.json: invalid JSON: "));
  }
}

TEST_CASE("every JSON reader refuses over-deep documents", "[hostile][json]") {
  const std::string deep = "{\"a\": " + std::string(400000, '[') + "}";
  REQUIRE_THROWS_WITH(frontend::parse_hf_config(deep, "config.json"),
                      Contains("config.json: JSON nested deeper than 256"));
  REQUIRE_THROWS_WITH(conversion::parse_calib_table(deep, "calib.json"),
                      Contains("calib.json: JSON nested deeper than 256"));
  REQUIRE_THROWS_WITH(target::target_from_json(deep),
                      Contains("target: JSON nested deeper than 256"));
  REQUIRE_THROWS_WITH(frontend::detail::parse_json_strict(deep, "x.safetensors: header"),
                      Contains("JSON nested deeper than 256"));
}

TEST_CASE("user regexes: Python re semantics within bounds", "[hostile][regex]") {
  const UserRegex r("model\\.layers\\.0\\..*", "--keep-float");
  CHECK(r.full_match("model.layers.0.self_attn.q_proj.weight"));
  CHECK_FALSE(r.full_match("xmodel.layers.0.q"));
  const UserRegex p("model\\.layers\\.1", "dynamic");
  CHECK(p.prefix_match("model.layers.1.mlp.up_proj")); // re.match: anchored at the start only
  CHECK_FALSE(p.full_match("model.layers.1.mlp.up_proj"));
  CHECK_FALSE(p.prefix_match("x.model.layers.1"));
  const UserRegex alt("a|ab", "x"); // whole-name matching backtracks into the alternatives
  CHECK(alt.full_match("ab"));
  REQUIRE_THROWS_WITH(UserRegex(std::string(1025, 'a'), "--keep-float"),
                      Contains("--keep-float: regex of 1025 bytes is too long (at most 1024)"));
  REQUIRE_THROWS_WITH(UserRegex(nested(33, '(', ')'), "--keep-float"),
                      Contains("nests parentheses 33 deep (at most 32)"));
  // Parentheses in classes and escaped ones do not count.
  CHECK_NOTHROW(UserRegex("[(]" + nested(32, '(', ')') + "\\(", "x"));
  REQUIRE_THROWS_WITH(UserRegex("(unclosed", "x"), Contains("is not a valid regular expression"));
}

TEST_CASE("catastrophic backtracking ends with the limit's error", "[hostile][regex]") {
  const double t0 = cpu_now();
  const UserRegex r("(.+)+z", "--keep-float");
  REQUIRE_THROWS_WITH(r.full_match("model.layers.0.self_attn.q_proj.weight"),
                      Contains("--keep-float: regex '(.+)+z' hit its match limit on "
                               "'model.layers.0.self_attn.q_proj.weight'"));
  // The 9-character pattern of the issue in a checkpoint's GPTQModel dynamic (re.match) and
  // AutoRound extra_config (fullmatch), and a compressed-tensors target.
  nlohmann::json gptq = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}};
  gptq["dynamic"] = {{"-:(a|aa)+$", nlohmann::json::object()}};
  const auto qc = frontend::parse_quant_config(gptq, "cfg.json");
  REQUIRE_THROWS_WITH(frontend::linear_quant(qc, std::string(60, 'a') + "!"),
                      Contains("hit its match limit"));
  nlohmann::json ar = {{"quant_method", "auto-round"}, {"bits", 4}, {"group_size", 32}};
  ar["extra_config"] = {{"(.*a){20}", {{"bits", 8}}}};
  const auto qa = frontend::parse_quant_config(ar, "cfg.json");
  REQUIRE_THROWS_WITH(frontend::linear_quant(qa, std::string(40, 'a') + "b"), Contains("limit"));
  CHECK(seconds_since(t0) < 1.0);
}

TEST_CASE("a literal alternation is matched by name", "[hostile][regex]") {
  const auto names = literal_alternation("^(?:layers\\.0\\.q|layers\\.1\\.expert\\.2\\.up)$");
  REQUIRE(names);
  CHECK(*names == std::vector<std::string>{"layers.0.q", "layers.1.expert.2.up"});
  CHECK_FALSE(literal_alternation("^(?:layers\\.0\\..*)$"));
  CHECK_FALSE(literal_alternation("^(?:a\\d)$"));
  CHECK_FALSE(literal_alternation("layers\\.0"));
}
