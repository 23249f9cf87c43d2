// Conversation: chat turns and completions in text over a PromptCache (conversation.hpp).
#include "tpullm/runtime/conversation.hpp"

#include <algorithm>
#include <optional>

#include "tpullm/runtime/text_side.hpp"

namespace tpullm::runtime {

std::vector<std::int32_t> stop_ids(const text::Tokenizer& tok,
                                   const std::vector<std::int64_t>& model_eos) {
  std::vector<std::int32_t> ids(tok.config().eos_token_ids.begin(),
                                tok.config().eos_token_ids.end());
  for (auto e : model_eos)
    if (e >= 0 && e < tok.vocab_size())
      ids.push_back(static_cast<std::int32_t>(e));
  for (const char* piece : {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|return|>",
                            "<\xEF\xBD\x9C"
                            "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"})
    if (auto id = tok.token_to_id(piece); id && tok.is_special(*id))
      ids.push_back(*id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Conversation::Conversation(PromptCache& cache, const text::Tokenizer& tok,
                           const text::ChatTemplate* tmpl, std::string system,
                           nlohmann::ordered_json template_kwargs)
    : cache_(cache), tok_(tok), tmpl_(tmpl), system_(std::move(system)),
      kwargs_(std::move(template_kwargs)) {
  check(kwargs_.is_object(), ErrorKind::invalid_input, "template kwargs", "must be an object");
  reset();
}

void Conversation::reset() {
  messages_ = nlohmann::ordered_json::array();
  if (!system_.empty())
    messages_.push_back({{"role", "system"}, {"content", system_}});
  cache_.reset();
}

std::vector<std::int32_t> render_chat(const text::Tokenizer& tok, const text::ChatTemplate& tmpl,
                                      const nlohmann::ordered_json& messages,
                                      const nlohmann::ordered_json& tools,
                                      const nlohmann::ordered_json& template_kwargs,
                                      const text::RenderLimits& limits) {
  const auto special = template_special_tokens(tok);
  const auto ctx =
      text::ChatTemplate::make_context(messages, tools, true, special, template_kwargs);
  // The template writes the BOS and every special token itself: none are added (as transformers'
  // apply_chat_template(tokenize=True) does).
  return tok.encode(tmpl.render(ctx, limits), false);
}

std::vector<std::int32_t> Conversation::render(const nlohmann::ordered_json& messages) const {
  check(tmpl_ != nullptr, ErrorKind::unsupported, "chat",
        "no chat template: ", tok_.config().no_chat_template_reason(), " (use a raw prompt)");
  return render_chat(tok_, *tmpl_, messages, tools_, kwargs_);
}

std::vector<std::int32_t> Conversation::render_with(const std::string& user) const {
  auto m = messages_;
  m.push_back({{"role", "user"}, {"content", user}});
  return render(m);
}

TurnResult Conversation::run(const std::vector<std::int32_t>& prompt,
                             const GenerateOptions& options, const TextSink& sink) {
  Generation gen(options, &tok_, prompt);
  TurnResult out;
  out.generated = cache_.generate(prompt, gen, [&](const GenerationStep& s) {
    if (sink && !s.text.empty())
      sink(s.text);
  });
  out.text = gen.text();
  return out;
}

TurnResult Conversation::answer(const GenerateOptions& options, const TextSink& sink) {
  auto prompt = render(messages_);
  std::optional<Truncation> cut;
  if (overflow_ == ContextOverflow::truncate_middle)
    cut = truncate_to_fit(messages_, prompt, cache_.session().params().seq_length,
                          options.stop.max_new_tokens,
                          [&](const nlohmann::ordered_json& m) { return render(m); });
  if (cut) {
    prompt = cut->prompt;
    if (on_truncate_)
      on_truncate_(*cut);
  }
  check(cache_.fits(prompt), ErrorKind::invalid_input, "chat", "the conversation would take ",
        prompt.size(),
        " tokens and leave no room for an answer in the compiled sequence length; "
        "reset to start over");
  auto r = run(prompt, options, sink);
  if (cut) { // the kept messages replace the conversation only once the answer is there
    messages_ = std::move(cut->messages);
    r.dropped_messages = cut->dropped_messages;
    r.dropped_tokens = cut->dropped_tokens;
  }
  messages_.push_back({{"role", "assistant"}, {"content", r.text}});
  return r;
}

TurnResult Conversation::say(const std::string& user, const GenerateOptions& options,
                             const TextSink& sink) {
  messages_.push_back({{"role", "user"}, {"content", user}});
  try {
    return answer(options, sink);
  } catch (...) {
    messages_.erase(messages_.end() - 1); // the conversation is as it was before the turn
    throw;
  }
}

void Conversation::set_tools(nlohmann::ordered_json tools) {
  check(tools.is_null() || tools.is_array(), ErrorKind::invalid_input, "tools",
        "must be a JSON array (or null)");
  tools_ = std::move(tools);
}

void Conversation::set_messages(nlohmann::ordered_json messages) {
  check(messages.is_array(), ErrorKind::invalid_input, "messages", "must be a JSON array");
  for (const auto& m : messages)
    check(m.is_object() && m.contains("role") && m["role"].is_string(), ErrorKind::invalid_input,
          "messages", "each message must be an object with a string \"role\"");
  messages_ = std::move(messages);
}

TurnResult Conversation::complete(const std::string& prompt, const GenerateOptions& options,
                                  const TextSink& sink) {
  return run(tok_.encode(prompt, true), options, sink);
}

} // namespace tpullm::runtime
