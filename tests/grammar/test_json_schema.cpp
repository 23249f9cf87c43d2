// The JSON Schema subset: each keyword accepted and what it refuses, and the refusals by name.
#include <catch2/catch.hpp>

#include <cstdio>

#include <string>

#include "error_kind.hpp"
#include "tpullm/grammar/grammar.hpp"

using namespace tpullm;
using nlohmann::json;

namespace {

bool matches(const json& schema, std::string_view s) {
  grammar::Matcher m(grammar::grammar_from_json_schema(schema));
  return m.accept_bytes(s) && m.can_end();
}

std::string refusal(const json& schema) {
  try {
    grammar::grammar_from_json_schema(schema);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::unsupported);
    return e.what();
  }
  FAIL("no refusal for " << schema.dump());
  return {};
}

} // namespace

TEST_CASE("schema types", "[grammar][schema]") {
  CHECK(matches({{"type", "string"}}, R"("a\"b\u00e9")"));
  CHECK_FALSE(matches({{"type", "string"}}, R"(abc)"));
  CHECK(matches({{"type", "integer"}}, "-42"));
  CHECK_FALSE(matches({{"type", "integer"}}, "4.2"));
  CHECK_FALSE(matches({{"type", "integer"}}, "01"));
  CHECK_FALSE(matches({{"type", "integer"}}, "12345678901234567")); // at most 16 digits
  CHECK(matches({{"type", "number"}}, "4.25e+10"));
  CHECK_FALSE(matches({{"type", "number"}}, "4."));
  CHECK(matches({{"type", "boolean"}}, "false"));
  CHECK(matches({{"type", "null"}}, "null"));
  CHECK(matches({{"type", {"string", "null"}}}, "null"));
  CHECK(matches({{"type", {"string", "null"}}}, R"("x")"));
  CHECK_FALSE(matches({{"type", {"string", "null"}}}, "1"));
  CHECK(matches(json::object(), R"([1,{"a":null}])"));
}

TEST_CASE("schema objects: properties in order, required, additionalProperties",
          "[grammar][schema]") {
  const json s = {{"type", "object"},
                  {"properties",
                   {{"name", {{"type", "string"}}},
                    {"age", {{"type", "integer"}}},
                    {"ok", {{"type", "boolean"}}}}},
                  {"required", {"name", "ok"}},
                  {"additionalProperties", false}};
  // nlohmann::json orders keys: age, name, ok.
  CHECK(matches(s, R"({"age":3,"name":"x","ok":true})"));
  CHECK(matches(s, R"({ "name": "x", "ok": false })"));
  CHECK(matches(s, R"({"name":"x","ok":false})"));
  CHECK_FALSE(matches(s, R"({"age":3,"ok":true})"));          // name is required
  CHECK_FALSE(matches(s, R"({"name":"x"})"));                 // ok is required
  CHECK_FALSE(matches(s, R"({"name":"x","ok":true,"z":1})")); // no other keys
  CHECK_FALSE(matches(s, R"({"name":"x",,"ok":true})"));
  CHECK_FALSE(matches(s, R"({"name":"x",  "ok":true})")); // at most one space
  CHECK(matches({{"type", "object"}, {"properties", {{"a", {{"type", "null"}}}}}}, "{}"));
  CHECK(matches({{"type", "object"}, {"additionalProperties", false}}, "{}"));
  CHECK_FALSE(matches({{"type", "object"}, {"additionalProperties", false}}, R"({"a":1})"));
  const json map = {{"type", "object"}, {"additionalProperties", {{"type", "integer"}}}};
  CHECK(matches(map, R"({"a":1,"b":2})"));
  CHECK_FALSE(matches(map, R"({"a":"x"})"));
}

TEST_CASE("schema enum, const, anyOf, $ref and $defs", "[grammar][schema]") {
  const json e = {{"enum", {"red", 1, nullptr, json::array({1, 2})}}};
  for (const char* ok : {R"("red")", "1", "null", "[1,2]"})
    CHECK(matches(e, ok));
  CHECK_FALSE(matches(e, R"("blue")"));
  CHECK(matches({{"const", {{"a", 1}}}}, R"({"a":1})"));
  CHECK_FALSE(matches({{"const", "x"}}, R"("y")"));
  const json any = {{"anyOf", {{{"type", "integer"}}, {{"type", "string"}, {"format", "date"}}}}};
  CHECK(matches(any, "7"));
  CHECK(matches(any, R"("2024-02-29")"));
  CHECK_FALSE(matches(any, R"("2024-13-01")"));
  const json tree = json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v", "kids"], "additionalProperties": false}},
    "$ref": "#/$defs/node"})");
  CHECK(matches(tree, R"({"kids":[{"kids":[],"v":2}],"v":1})"));
  CHECK_FALSE(matches(tree, R"({"kids":[{"v":2}],"v":1})"));
  const json self = {{"type", "array"},
                     {"items", {{"anyOf", {{{"type", "integer"}}, {{"$ref", "#"}}}}}}};
  CHECK(matches(self, "[1,[2,[]]]"));
}

TEST_CASE("a chain of $refs is bounded, not a stack overflow", "[grammar][schema]") {
  const auto chain = [](int n) {
    json defs = json::object();
    for (int i = 0; i < n; ++i)
      defs["a" + std::to_string(i)] = {{"$ref", "#/$defs/a" + std::to_string(i + 1)}};
    defs["a" + std::to_string(n)] = {{"type", "integer"}};
    return json{{"$defs", defs}, {"$ref", "#/$defs/a0"}};
  };
  CHECK(matches(chain(200), "42"));
  CHECK_THAT(refusal(chain(20000)), Catch::Contains("chained deeper than 256"));
}

TEST_CASE("a huge enum shares its prefixes: every value matches, nothing else",
          "[grammar][schema]") {
  // 1000 values behind one common prefix: one parse per value would pass kMaxStacks.
  json values = json::array();
  for (int i = 0; i < 1000; ++i) {
    const std::string digits = std::to_string(i);
    values.push_back("item_" + std::string(4 - digits.size(), '0') + digits);
  }
  const json e = {{"enum", values}};
  for (int i = 0; i < 1000; i += 37)
    CHECK(matches(e, "\"" + values[static_cast<std::size_t>(i)].get<std::string>() + "\""));
  CHECK(matches(e, R"("item_0999")"));
  CHECK_FALSE(matches(e, R"("item_1000")"));
  CHECK_FALSE(matches(e, R"("item_099")"));
  CHECK_FALSE(matches(e, R"("item_")"));
  // A value that is a prefix of another, values that differ inside a multi-byte character
  // (é and è share their first byte), and values of other types beside them.
  const json p = {{"enum", {"a", "ab", "abc", "é", "è", 12, 1, nullptr}}};
  for (const char* ok : {R"("a")", R"("ab")", R"("abc")", R"("é")", R"("è")", "12", "1", "null"})
    CHECK(matches(p, ok));
  for (const char* no : {R"("abcd")", R"("b")", R"("ê")", "123", "2", R"("")"})
    CHECK_FALSE(matches(p, no));
}

TEST_CASE("schema arrays: items, minItems, maxItems", "[grammar][schema]") {
  const json a = {
      {"type", "array"}, {"items", {{"type", "integer"}}}, {"minItems", 2}, {"maxItems", 3}};
  CHECK(matches(a, "[1,2]"));
  CHECK(matches(a, "[ 1, 2, 3 ]"));
  CHECK_FALSE(matches(a, "[1]"));
  CHECK_FALSE(matches(a, "[1,2,3,4]"));
  CHECK_FALSE(matches(a, R"([1,"x"])"));
  CHECK(matches({{"type", "array"}}, R"([])"));
  CHECK(matches({{"type", "array"}, {"maxItems", 0}}, R"([])"));
  CHECK_FALSE(matches({{"type", "array"}, {"maxItems", 0}}, R"([1])"));
}

TEST_CASE("schema strings: pattern, format, lengths", "[grammar][schema]") {
  const json p = {{"type", "string"}, {"pattern", "^[A-Z]{2}-\\d{3}(x|yz)?$"}};
  CHECK(matches(p, R"("AB-123")"));
  CHECK(matches(p, R"("AB-123yz")"));
  CHECK_FALSE(matches(p, R"("Ab-123")"));
  CHECK_FALSE(matches(p, R"("AB-1234")"));
  const json q = {{"type", "string"}, {"pattern", "a\"b"}}; // unanchored; a quote is escaped
  CHECK(matches(q, R"("xxa\"byy")"));
  CHECK_FALSE(matches(q, R"("ab")"));
  const json cls = {{"type", "string"}, {"pattern", "^[ -~]+$"}};
  CHECK(matches(cls, R"("a \"b\\ c")"));
  CHECK_FALSE(matches(cls, "\"a\\u00e9\""));
  const json u = {{"type", "string"}, {"pattern", "^caf\\u00e9 [\\u00e0-\\u00ff]+$"}};
  CHECK(matches(u, "\"caf\xC3\xA9 \xC3\xA0\xC3\xBF\""));
  CHECK_FALSE(matches(u, "\"cafe \xC3\xA0\""));
  CHECK_THAT(refusal({{"type", "string"}, {"pattern", "\\ud800"}}), Catch::Contains("surrogate"));
  CHECK(matches({{"type", "string"}, {"format", "uuid"}},
                R"("123e4567-e89b-12d3-a456-426614174000")"));
  CHECK(matches({{"type", "string"}, {"format", "date-time"}}, R"("2024-01-31T23:59:60Z")") ==
        false);
  CHECK(matches({{"type", "string"}, {"format", "date-time"}}, R"("2024-01-31T23:59:59.5+02:00")"));
  CHECK(matches({{"type", "string"}, {"format", "ipv4"}}, R"("192.168.0.255")"));
  CHECK_FALSE(matches({{"type", "string"}, {"format", "ipv4"}}, R"("256.1.1.1")"));
  const json len = {{"type", "string"}, {"minLength", 2}, {"maxLength", 3}};
  CHECK(matches(len, R"("ab")"));
  CHECK(matches(len, R"("a\nc")"));
  CHECK_FALSE(matches(len, R"("a")"));
  CHECK_FALSE(matches(len, R"("abcd")"));
}

TEST_CASE("what is outside the schema subset is refused by name", "[grammar][schema]") {
  CHECK_THAT(refusal({{"allOf", json::array()}}),
             Catch::Contains("'allOf' is not supported at /allOf"));
  CHECK_THAT(refusal({{"oneOf", json::array()}}), Catch::Contains("'oneOf'"));
  CHECK_THAT(refusal({{"not", json::object()}}), Catch::Contains("'not'"));
  CHECK_THAT(
      refusal({{"type", "object"}, {"properties", {{"x", {{"type", "number"}, {"minimum", 0}}}}}}),
      Catch::Contains("'minimum' is not supported at /properties/x/minimum"));
  CHECK_THAT(refusal({{"type", "array"}, {"prefixItems", json::array()}}),
             Catch::Contains("'prefixItems'"));
  CHECK_THAT(refusal({{"type", "string"}, {"format", "email"}}), Catch::Contains("email"));
  CHECK_THAT(refusal({{"$ref", "other.json#/x"}}), Catch::Contains("other.json"));
  CHECK_THAT(refusal({{"type", "string"}, {"pattern", "(?=a)"}}), Catch::Contains("'pattern'"));
  CHECK_THAT(refusal({{"type", "string"}, {"pattern", "\\bword"}}), Catch::Contains("'pattern'"));
  CHECK_THAT(refusal({{"type", "object"},
                      {"properties", {{"a", json::object()}}},
                      {"additionalProperties", true}}),
             Catch::Contains("additionalProperties"));
  CHECK_THAT(refusal({{"type", "integer"}, {"items", json::object()}}), Catch::Contains("'items'"));
  CHECK_THAT(refusal({{"type", "array"}, {"maxItems", 5000}}), Catch::Contains("maxItems"));
  // Malformed schemas are invalid input.
  CHECK_THROWS_KIND(grammar::grammar_from_json_schema({{"type", "integr"}}), invalid_input);
  CHECK_THROWS_KIND(grammar::grammar_from_json_schema({{"enum", json::array()}}), invalid_input);
  CHECK_THROWS_KIND(grammar::grammar_from_json_schema({{"$ref", "#/$defs/none"}}), invalid_input);
  CHECK_THROWS_KIND(grammar::grammar_from_json_schema(
                        {{"type", "object"}, {"properties", json::object()}, {"required", {"a"}}}),
                    invalid_input);
  // Annotations are ignored.
  CHECK(matches({{"type", "boolean"}, {"description", "d"}, {"title", "t"}, {"$schema", "x"}},
                "true"));
}
