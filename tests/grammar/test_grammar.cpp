// The grammar engine: the text format and its refusals, the matcher's language, UTF-8 classes,
// the bounds (stacks, depth), wrap() and json_object_grammar().
#include <catch2/catch.hpp>

#include <string>

#include "error_kind.hpp"
#include "tpullm/grammar/grammar.hpp"

using namespace tpullm;
using grammar::Matcher;

namespace {

// Whether `s` is a whole sentence of `g`.
bool matches(const std::shared_ptr<const grammar::Grammar>& g, std::string_view s) {
  Matcher m(g);
  return m.accept_bytes(s) && m.can_end();
}

// Whether `s` is a prefix of a sentence of `g`.
bool prefix(const std::shared_ptr<const grammar::Grammar>& g, std::string_view s) {
  Matcher m(g);
  return m.accept_bytes(s);
}

std::string message_of(std::string_view text) {
  try {
    grammar::parse_grammar(text);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_input);
    return e.what();
  }
  FAIL("no error for: " << text);
  return {};
}

} // namespace

TEST_CASE("a grammar accepts exactly its language", "[grammar]") {
  const auto g = grammar::parse_grammar(R"(
    # a comment
    root ::= "a" [b-d]+ tail?   # another
    tail ::= "x" | "yz"
  )");
  for (const char* ok : {"ab", "abcd", "abx", "adddyz", "abbbbbbbbbbbbbbbbbbbbb"})
    CHECK(matches(g, ok));
  for (const char* bad : {"", "a", "ax", "abyzx", "abxx", "aby", "ba", "abe"})
    CHECK_FALSE(matches(g, bad));
  CHECK(prefix(g, "a"));
  CHECK(prefix(g, "aby"));
  CHECK_FALSE(prefix(g, "b"));
}

TEST_CASE("a refused byte leaves the matcher where it was", "[grammar]") {
  Matcher m(grammar::parse_grammar(R"(root ::= "ab" "c"?)"));
  CHECK_FALSE(m.can_end());
  CHECK(m.accept_bytes("a"));
  CHECK_FALSE(m.accept_bytes("bx"));
  CHECK(m.accept_bytes("b"));
  CHECK(m.can_end());
  CHECK_FALSE(m.is_complete());
  CHECK(m.accept_bytes("c"));
  CHECK(m.is_complete());
  CHECK_FALSE(m.accept_bytes("c"));
  m.reset();
  CHECK_FALSE(m.can_end());
  CHECK(m.accept_bytes("abc"));
}

TEST_CASE("bounded repetitions count", "[grammar]") {
  const auto g =
      grammar::parse_grammar(R"(root ::= "x"{2,4} "-" [0-9]{3} ("ab"){1,} "." "z"{0,1})");
  CHECK(matches(g, "xx-123ab."));
  CHECK(matches(g, "xxxx-123ababab.z"));
  CHECK_FALSE(matches(g, "x-123ab."));
  CHECK_FALSE(matches(g, "xxxxx-123ab."));
  CHECK_FALSE(matches(g, "xx-12ab."));
  CHECK_FALSE(matches(g, "xx-123."));
  CHECK_FALSE(matches(g, "xx-123ab.zz"));
}

TEST_CASE("character classes are over code points, in UTF-8", "[grammar]") {
  const auto g = grammar::parse_grammar(R"(root ::= [^a\n]+)");
  CHECK(matches(g, "b"));
  CHECK(matches(g, "\xC3\xA9"));                 // é
  CHECK(matches(g, "\xE4\xB8\xAD\xE6\x96\x87")); // 中文
  CHECK(matches(g, "\xF0\x9F\x98\x80"));         // 😀
  CHECK_FALSE(matches(g, "a"));
  CHECK_FALSE(matches(g, "b\n"));
  CHECK_FALSE(prefix(g, "\xFF"));         // never a UTF-8 byte
  CHECK_FALSE(prefix(g, "\xC0\x80"));     // overlong
  CHECK_FALSE(prefix(g, "\xED\xA0\x80")); // a surrogate
  CHECK(prefix(g, "\xF0\x9F"));           // half a character is a prefix
  CHECK_FALSE(matches(g, "\xF0\x9F"));
  const auto r = grammar::parse_grammar(R"(root ::= [α-ω] "\u00e9" "\x41" . [\]\-])");
  CHECK(matches(r, "\xCE\xB2\xC3\xA9"
                   "A"
                   "\xF0\x9F\x98\x80"
                   "]"));
  CHECK(matches(r, "\xCF\x89\xC3\xA9"
                   "Az-"));
  CHECK_FALSE(matches(r, "b\xC3\xA9"
                         "Az]"));
}

TEST_CASE("bad grammar text is refused with its line and column", "[grammar]") {
  CHECK_THAT(message_of("root ::= \"a\"\nfoo ::= bar"),
             Catch::Contains("line 2 col 9") && Catch::Contains("'bar' is not defined"));
  CHECK_THAT(message_of("root ::= \"abc"), Catch::Contains("unterminated string"));
  CHECK_THAT(message_of("root ::= [abc"), Catch::Contains("unterminated character class"));
  CHECK_THAT(message_of("root ::= (\"a\""), Catch::Contains("unbalanced '('"));
  CHECK_THAT(message_of("root ::= \"a\" )"), Catch::Contains("unbalanced ')'"));
  // Hostile nesting is refused by a bound, not by a stack overflow: 256 groups parse, 20,000
  // do not.
  const auto nest = [](int n) {
    return "root ::= " + std::string(static_cast<std::size_t>(n), '(') + "\"a\"" +
           std::string(static_cast<std::size_t>(n), ')');
  };
  CHECK_NOTHROW(grammar::parse_grammar(nest(256)));
  CHECK_THAT(message_of(nest(20000)), Catch::Contains("groups nested deeper than 256"));
  CHECK_THAT(message_of("start ::= \"a\""), Catch::Contains("no rule named 'root'"));
  CHECK_THAT(message_of("root ::= \"a\"\nroot ::= \"b\""), Catch::Contains("defined twice"));
  CHECK_THAT(message_of("root ::= \"\\q\""), Catch::Contains("unknown escape"));
  CHECK_THAT(message_of("root ::= \"a\"{3,2}"), Catch::Contains("n < m"));
  CHECK_THAT(message_of("root ::= \"a\"{5000}"), Catch::Contains("repetition count"));
  CHECK_THAT(message_of("root ::= [z-a]"), Catch::Contains("end before its start"));
  CHECK_THAT(message_of("root ::= \"a\" ::= "), Catch::Contains("unexpected character ':'"));
  CHECK_THAT(message_of("root ::= @"), Catch::Contains("line 1 col 10"));
  CHECK_THAT(message_of("root ::= [^\\x00-\\U0010FFFF]"), Catch::Contains("no character"));
}

TEST_CASE("left recursion and repetitions of the empty string are refused by name", "[grammar]") {
  CHECK_THAT(message_of("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""),
             Catch::Contains("left recursion in rule 'expr'"));
  CHECK_THAT(message_of("root ::= a\na ::= b? \"x\"\nb ::= a \"y\" | \"\""),
             Catch::Contains("left recursion"));
  CHECK_THAT(message_of("root ::= (\"a\"?)*"),
             Catch::Contains("repetition of an expression that can match the empty string in "
                             "rule 'root'"));
  // Right recursion is fine.
  const auto g = grammar::parse_grammar("root ::= \"(\" root \")\" | \"\"");
  CHECK(matches(g, "((()))"));
  CHECK_FALSE(matches(g, "(()"));
}

TEST_CASE("the matcher bounds its stacks and its depth", "[grammar]") {
  // Every "x" doubles the parses (a "y" or a "z" owed): refused past kMaxStacks.
  Matcher m(grammar::parse_grammar(R"(root ::= "x" root "y" | "x" root "z" | "")"));
  CHECK_THROWS_KIND(m.accept_bytes(std::string(20, 'x')), unsupported);
  // Nesting deeper than kMaxDepth is dropped: the byte that would open it is refused.
  Matcher deep(grammar::json_object_grammar());
  CHECK(deep.accept_bytes("{\"a\":"));
  int opened = 0;
  while (opened < 1000 && deep.accept_bytes("["))
    ++opened;
  CHECK(opened > 50);
  CHECK(opened < 1000);
}

TEST_CASE("the names made for groups never clash with the text's", "[grammar]") {
  const auto g = grammar::parse_grammar("root ::= (\"a\" | \"b\")* root-1\nroot-1 ::= \"c\"");
  CHECK(matches(g, "abac"));
  CHECK(matches(grammar::parse_grammar(g->text()), "abac"));
}

TEST_CASE("Grammar::text() reads back to the same language", "[grammar]") {
  const auto g = grammar::parse_grammar(R"(root ::= ("a" | [x-z\n"]){1,3} "\u00e9"? tail
tail ::= [^\]] | "\\")");
  const auto back = grammar::parse_grammar(g->text());
  for (const char* s :
       {"a\xC3\xA9q", "xyz\\", "\"\n]", "a]", "", "aaaa!", "ab!", "z\xC3\xA9\xC3\xA9"})
    CHECK(matches(g, s) == matches(back, s));
}

TEST_CASE("json_object_grammar accepts any JSON object and nothing else", "[grammar]") {
  const auto g = grammar::json_object_grammar();
  for (const char* ok : {R"({})", R"({ })", R"({"a":1})",
                         R"({"a": [1, 2.5e-3, -0, true, null, {"b": "x\"\\\u00e9"}]})",
                         R"({"k":{},"l":[],"m":"\u4e2d"})", "{\"s\":\"\xE4\xB8\xAD\"}"})
    CHECK(matches(g, ok));
  for (const char* bad :
       {R"([1])", R"("a")", R"({"a"})", R"({"a":})", R"({a:1})", R"({"a":01})", R"({"a":1,})",
        R"({"a":tru})", "{\"a\":\"\x01\"}", R"({"a":1}})", R"({  "a":1})"})
    CHECK_FALSE(matches(g, bad));
}

TEST_CASE("wrap puts literal text around a grammar", "[grammar]") {
  const auto inner = grammar::parse_grammar(R"(root ::= "{" [a-z]+ "}")");
  const auto g = grammar::wrap("<tool_call>\n", inner, "\n</tool_call>");
  CHECK(matches(g, "<tool_call>\n{abc}\n</tool_call>"));
  CHECK_FALSE(matches(g, "{abc}"));
  CHECK_FALSE(matches(g, "<tool_call>\n{}\n</tool_call>"));
  // Wrapping twice keeps the names apart.
  const auto twice = grammar::wrap("[", g, "]");
  CHECK(matches(twice, "[<tool_call>\n{x}\n</tool_call>]"));
  CHECK(matches(grammar::parse_grammar(twice->text()), "[<tool_call>\n{x}\n</tool_call>]"));
  CHECK_THROWS_KIND(grammar::wrap("\xFF", inner, ""), invalid_input);
}
