// PromptCache: a prompt that repeats what the KV cache holds feeds only the rest (through
// prefill_kv), to the same tokens as feeding that rest by hand; a prompt that departs from the
// cache rolls it back to the common prefix; a prompt that does not fit is refused unchanged; a
// prompt fed from outside (keep_prefix, then record: what a serving slot does) ends as generate().
// A chat that outgrows the cache under --context-overflow truncate-middle answers as a fresh
// chat of the messages it kept (the cache re-fed from the first changed token).
#include "llama_gqa.hpp"
#include "small_compile.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <tuple>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/conversation.hpp"
#include "tpullm/runtime/prompt_cache.hpp"
#include "tpullm/text/chat_template.hpp"
#include "tpullm/text/tokenizer.hpp"

using namespace tpullm;

namespace {

frontend::StageParams params() {
  return tpullm_test::small_params(96, 16, {64, 32});
}

struct Model : tpullm_test::CompiledLlamaGqa {
  Model() : CompiledLlamaGqa(params()) {}
};

/// The model compiled, its stages, one session and the prompt cache over it.
struct Cached : Model {
  std::unique_ptr<runtime::Executor> exec = runtime::make_executor(cm);
  runtime::CompiledStages stages{*exec};
  runtime::Session s{stages, dims(), params()};
  runtime::PromptCache cache{s};
};

runtime::GenerateOptions greedy(std::int64_t n) {
  runtime::GenerateOptions g;
  g.stop.max_new_tokens = n;
  return g;
}

std::vector<std::int32_t> cat(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b,
                              std::size_t take) {
  a.insert(a.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(take));
  return a;
}

} // namespace

TEST_CASE("a repeated conversation feeds only its new tokens", "[prompt-cache]") {
  Cached m;
  auto [stages, s, cache] = std::tie(m.stages, m.s, m.cache); // references into m

  const std::vector<std::int32_t> a{1, 5, 9, 2, 7, 3, 8, 4, 6, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  const auto r1 = cache.generate(a, greedy(5));
  CHECK(r1.reused == 0);
  CHECK(r1.result.prompt_tokens == static_cast<std::int64_t>(a.size()));
  REQUIRE(r1.result.tokens.size() == 5);
  CHECK(cache.held() == cat(a, r1.result.tokens, 4));
  CHECK(s.length() == static_cast<std::int64_t>(a.size()) + 4);

  // The client resends everything: prompt, the whole answer, then a new user part.
  const std::vector<std::int32_t> b{20, 21, 22};
  auto second = cat(a, r1.result.tokens, 5);
  second.insert(second.end(), b.begin(), b.end());
  const auto r2 = cache.generate(second, greedy(4));
  CHECK(r2.reused == static_cast<std::int64_t>(a.size()) + 4);
  CHECK(r2.result.prompt_tokens == 4); // the last answer token and the three new ones
  CHECK(cache.held().size() == second.size() + 3);

  // The same steps by hand on a fresh session: bit-identical tokens.
  runtime::Session ref(stages, m.dims(), params());
  const auto h1 = ref.generate(a, greedy(5));
  CHECK(h1.tokens == r1.result.tokens);
  std::vector<std::int32_t> rest{r1.result.tokens.back()};
  rest.insert(rest.end(), b.begin(), b.end());
  CHECK(ref.generate(rest, greedy(4)).tokens == r2.result.tokens);
}

TEST_CASE("a prompt that departs from the cache rolls it back to the common prefix",
          "[prompt-cache]") {
  Cached m;
  auto [stages, s, cache] = std::tie(m.stages, m.s, m.cache); // references into m
  const std::vector<std::int32_t> a{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
  cache.generate(a, greedy(3));
  // Keep the first 9 tokens, then something else.
  std::vector<std::int32_t> b(a.begin(), a.begin() + 9);
  b.insert(b.end(), {40, 41, 42, 43});
  CHECK(cache.reusable(b) == 9);
  const auto r = cache.generate(b, greedy(3));
  CHECK(r.reused == 9);
  CHECK(r.result.prompt_tokens == 4);
  CHECK(cache.held() == cat(b, r.result.tokens, 2));

  runtime::Session ref(stages, m.dims(), params());
  ref.generate(a, greedy(3));
  ref.truncate(9);
  CHECK(ref.generate({40, 41, 42, 43}, greedy(3)).tokens == r.result.tokens);

  // The very same prompt again: everything but its last token is reused.
  CHECK(cache.reusable(b) == static_cast<std::int64_t>(b.size()) - 1);
  CHECK(cache.generate(b, greedy(1)).result.prompt_tokens == 1);
}

TEST_CASE("a prompt that leaves no room for an answer is refused, the cache unchanged",
          "[prompt-cache]") {
  Cached m;
  auto [stages, s, cache] = std::tie(m.stages, m.s, m.cache); // references into m
  const std::vector<std::int32_t> a{7, 7, 7, 7};
  cache.generate(a, greedy(2));
  const auto held = cache.held();
  std::vector<std::int32_t> huge(static_cast<std::size_t>(params().seq_length), 3);
  CHECK_THROWS_AS(cache.generate(huge, greedy(1)), Error);
  CHECK(cache.held() == held);
  CHECK(s.length() == static_cast<std::int64_t>(held.size()));
  CHECK_THROWS_AS(cache.generate({}, greedy(1)), Error);
  CHECK_THROWS_AS(s.truncate(s.length() + 1), Error);
}

TEST_CASE("a prompt fed from outside: keep_prefix, then record what was fed", "[prompt-cache]") {
  // What a serving slot does (segment by segment), against generate() on a twin cache.
  Model m;
  auto exec = runtime::make_executor(m.cm);
  runtime::CompiledStages stages(*exec);
  runtime::Session s(stages, m.dims(), params()), twin_s(stages, m.dims(), params());
  runtime::PromptCache cache(s), twin(twin_s);
  const std::vector<std::int32_t> a{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
  cache.generate(a, greedy(3));
  twin.generate(a, greedy(3));
  std::vector<std::int32_t> b(a.begin(), a.begin() + 9);
  b.insert(b.end(), {40, 41, 42, 43});

  const std::int64_t kept = cache.keep_prefix(b);
  CHECK(kept == 9);
  CHECK(s.length() == 9);
  CHECK(cache.held() == std::vector<std::int32_t>(b.begin(), b.begin() + 9));
  const std::vector<std::int32_t> rest(b.begin() + kept, b.end());
  const auto logits = s.prefill(rest, false);
  cache.record(rest);
  CHECK(cache.held() == b);
  const auto by_hand = runtime::Generation(greedy(1), nullptr, b).step(logits, s.length(), 96);
  CHECK(twin.generate(b, greedy(1)).result.tokens == std::vector<std::int32_t>{by_hand.token});

  // Ids recorded that the session was not fed: the cache would lie about the KV cache.
  CHECK_THROWS_AS(cache.record(std::vector<std::int32_t>{1}), Error);
  CHECK(cache.held() == b);
}

TEST_CASE("a truncated chat answers as a fresh chat of the messages it kept", "[prompt-cache]") {
  // A small byte-level tokenizer (272 ids, inside the model's 512) and a template of our own.
  const auto tok = text::Tokenizer::from_dir(std::filesystem::path(TPULLM_TEST_DATA_DIR) / "text" /
                                             "tok" / "mini" / "bytelevel");
  const auto tmpl = text::ChatTemplate::parse(
      "{% for m in messages %}<|sep|>{{ m.role }}: {{ m.content }}{% endfor %}<|sep|>assistant:");
  Cached a, b;
  runtime::Conversation chat(a.cache, tok, &tmpl, "Be brief.");
  chat.set_context_overflow(runtime::ContextOverflow::truncate_middle);
  const auto g = greedy(6); // room for 6 answer tokens: prompts of at most 90 of the 96
  runtime::TurnResult cut;
  nlohmann::ordered_json before;
  for (int turn = 0; turn < 12 && cut.dropped_messages == 0; ++turn) {
    before = chat.messages();
    cut = chat.say("q" + std::to_string(turn), g, {});
  }
  REQUIRE(cut.dropped_messages > 0); // the 12 turns outgrow 96 positions
  CHECK(cut.dropped_messages % 2 == 0);
  CHECK(cut.generated.prompt_size <= 90);
  CHECK(cut.generated.reused > 0); // the system message's tokens stayed in the cache
  CHECK(cut.generated.reused < cut.generated.prompt_size);
  // The conversation holds the kept messages and the answer; the dropped ones are the oldest.
  auto kept = chat.messages();
  REQUIRE(kept.size() + static_cast<std::size_t>(cut.dropped_messages) == before.size() + 2);
  REQUIRE(before.size() > 1 + static_cast<std::size_t>(cut.dropped_messages)); // a turn kept
  CHECK(kept.at(0) == before.at(0));
  CHECK(kept.at(1) == before.at(1 + static_cast<std::size_t>(cut.dropped_messages)));
  kept.erase(kept.end() - 1);
  runtime::Conversation fresh(b.cache, tok, &tmpl);
  fresh.set_messages(kept);
  const auto ref = fresh.answer(g, {});
  CHECK(ref.generated.reused == 0);
  CHECK(ref.generated.prompt_size == cut.generated.prompt_size);
  CHECK(ref.generated.result.tokens == cut.generated.result.tokens);
  CHECK(ref.text == cut.text);

  // Refused as before under the default policy: the conversation and the cache unchanged.
  runtime::Conversation strict(b.cache, tok, &tmpl, "Be brief.");
  strict.set_messages(before);
  CHECK_THROWS_AS(strict.say(std::string(120, 'x'), g, {}), Error);
  CHECK(strict.messages() == before);
}
