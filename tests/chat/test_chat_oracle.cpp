// Every real chat template x every conversation x every variant, byte-equal to Python Jinja2 set
// up as transformers' apply_chat_template sets it up (tests/data/text/chat/expected_jinja2.jsonl,
// written by scripts/gen-chat-oracle.sh). Where Jinja2 raised, ours must raise too.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "chat_test_util.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/text/chat_template.hpp"

using nlohmann::ordered_json;
using tpullm::text::ChatTemplate;

namespace {

// What transformers passes as special-token variables: the strings of tokenizer_config.json
// (an AddedToken object contributes its content), when non-empty.
std::map<std::string, std::string> special_tokens(const ordered_json& cfg) {
  std::map<std::string, std::string> out;
  for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                        "cls_token", "mask_token"}) {
    if (!cfg.contains(k))
      continue;
    const ordered_json& v = cfg[k];
    if (v.is_string())
      out[k] = v.get<std::string>();
    else if (v.is_object() && v.contains("content"))
      out[k] = v["content"].get<std::string>();
  }
  return out;
}

ordered_json load_config(const std::string& target) {
  const std::string path =
      std::string(tpullm_tokenizer_cache_dir()) + "/" + target + "/tokenizer_config.json";
  bool ok = false;
  const std::string text = chat_test::read_file(path, ok);
  if (!ok)
    FAIL("missing " << path << ": run scripts/fetch-tokenizers.sh");
  return ordered_json::parse(text);
}

} // namespace

TEST_CASE("real chat templates render byte-equal to the Jinja2 oracle", "[chat][oracle]") {
  bool ok = false;
  const ordered_json cases =
      ordered_json::parse(chat_test::read_file(chat_test::data_path("cases.json"), ok));
  REQUIRE(ok);
  const auto expected = chat_test::read_jsonl(chat_test::data_path("expected_jinja2.jsonl"));
  // 5 templates x conversations x variants.
  REQUIRE(expected.size() == 5 * cases["conversations"].size() * cases["variants"].size());

  std::map<std::string, ordered_json> convs;
  for (const auto& c : cases["conversations"])
    convs[c["name"].get<std::string>()] = c;

  std::map<std::string, std::pair<ChatTemplate, std::map<std::string, std::string>>> templates;
  std::set<std::string> targets;
  std::size_t texts = 0, errors = 0;
  for (const auto& rec : expected) {
    const std::string target = rec["target"].get<std::string>();
    targets.insert(target);
    if (!templates.count(target)) {
      const ordered_json cfg = load_config(target);
      REQUIRE(cfg.contains("chat_template"));
      templates.emplace(
          target, std::make_pair(ChatTemplate::parse(cfg["chat_template"]), special_tokens(cfg)));
    }
    const auto& [tpl, special] = templates.at(target);
    const ordered_json& conv = convs.at(rec["conv"].get<std::string>());
    const ordered_json& variant = rec["variant"];
    const bool use_tools = conv.value("use_tools", false);
    const bool agp = variant.value("add_generation_prompt", false);
    ordered_json kwargs = variant;
    const ordered_json ctx = ChatTemplate::make_context(
        conv["messages"], use_tools ? cases["tools"] : ordered_json(), agp, special, kwargs);
    INFO(target << " / " << rec["conv"].get<std::string>() << " / " << variant.dump());
    if (rec.contains("text")) {
      ++texts;
      CHECK(tpl.render(ctx) == rec["text"].get<std::string>());
    } else {
      ++errors;
      INFO("Jinja2 raised " << rec["error"].get<std::string>());
      CHECK_THROWS_AS(tpl.render(ctx), tpullm::Error);
    }
  }
  CHECK(targets == std::set<std::string>{"qwen3", "llama3", "llama3_1", "gemma3", "deepseek_v3"});
  CHECK(texts > 300);
  CHECK(errors > 0);
}

TEST_CASE("make_context builds what transformers passes", "[chat]") {
  const ordered_json msgs = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  const ordered_json ctx = ChatTemplate::make_context(
      msgs, ordered_json(), true, {{"bos_token", "<s>"}, {"unk_token", ""}},
      ordered_json::parse(R"({"enable_thinking": false, "add_generation_prompt": false})"));
  CHECK(ctx["messages"] == msgs);
  CHECK(ctx.contains("tools"));
  CHECK(ctx["tools"].is_null());
  CHECK(ctx["bos_token"] == "<s>");
  CHECK_FALSE(ctx.contains("unk_token"));
  CHECK(ctx["enable_thinking"] == false);
  // kwargs are merged on top.
  CHECK(ctx["add_generation_prompt"] == false);
  CHECK_THROWS_AS(
      ChatTemplate::make_context(msgs, ordered_json(), true, {}, ordered_json::parse("[1]")),
      tpullm::Error);
  // The key-sorted overload gives the same context.
  const nlohmann::json sorted = ChatTemplate::make_context(nlohmann::json(msgs), nlohmann::json(),
                                                           true, {}, nlohmann::json());
  CHECK(sorted["add_generation_prompt"] == true);
}
