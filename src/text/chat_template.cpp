// ChatTemplate: the public face of the Jinja-subset engine (jinja_*.cpp).
#include "tpullm/text/chat_template.hpp"

#include "jinja_ast.hpp"

namespace tpullm::text {

ChatTemplate ChatTemplate::parse(std::string source) {
  ChatTemplate t;
  t.impl_ = std::make_shared<const jinja::Template>(jinja::parse_template(std::move(source)));
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 const RenderLimits& limits) const {
  if (!impl_)
    throw Error(ErrorKind::internal, "chat template", "render() of a template never parsed");
  return jinja::render_template(*impl_, context, limits);
}

std::string ChatTemplate::render(const nlohmann::json& context, const RenderLimits& limits) const {
  return render(nlohmann::ordered_json(context), limits);
}

namespace {

template <class J>
J build_context(const J& messages, const J& tools, bool add_generation_prompt,
                const std::map<std::string, std::string>& special_tokens, const J& kwargs) {
  J ctx = J::object();
  ctx["messages"] = messages;
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [k, v] : special_tokens)
    if (!v.empty())
      ctx[k] = v;
  if (!kwargs.is_null() && !kwargs.is_object())
    throw Error(ErrorKind::invalid_input, "chat template", "template kwargs must be a JSON object");
  if (kwargs.is_object())
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it)
      ctx[it.key()] = it.value();
  return ctx;
}

} // namespace

nlohmann::json ChatTemplate::make_context(const nlohmann::json& messages,
                                          const nlohmann::json& tools, bool add_generation_prompt,
                                          const std::map<std::string, std::string>& special_tokens,
                                          const nlohmann::json& kwargs) {
  return build_context(messages, tools, add_generation_prompt, special_tokens, kwargs);
}

nlohmann::ordered_json
ChatTemplate::make_context(const nlohmann::ordered_json& messages,
                           const nlohmann::ordered_json& tools, bool add_generation_prompt,
                           const std::map<std::string, std::string>& special_tokens,
                           const nlohmann::ordered_json& kwargs) {
  return build_context(messages, tools, add_generation_prompt, special_tokens, kwargs);
}

const std::string& ChatTemplate::source() const {
  static const std::string empty;
  return impl_ ? impl_->source : empty;
}

} // namespace tpullm::text
