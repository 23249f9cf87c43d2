// tokenizer_config.json + generation_config.json -> TokenizerConfig.
#include "json_fields.hpp"
#include "tokenizer_impl.hpp"
#include "tpullm/support/json.hpp"

namespace tpullm::text::detail {
namespace {

json parse_text(std::string_view text, const char* file) {
  return parse_json(text, file, "not valid JSON");
}

// A special token written as a string or as an AddedToken object {"content": ...}.
std::string token_string(const json& j, const char* key, const char* file) {
  const json& v = member(j, key);
  if (v.is_null())
    return "";
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && member(v, "content").is_string())
    return v["content"].get<std::string>();
  throw_error(ErrorKind::invalid_input, file, key, ": expected a string or {\"content\": ...}");
}

std::optional<bool> opt_bool(const json& j, const char* key, const char* file) {
  const json& v = member(j, key);
  if (v.is_null())
    return std::nullopt;
  if (!v.is_boolean())
    throw_error(ErrorKind::invalid_input, file, key, ": expected true or false");
  return v.get<bool>();
}

std::int32_t token_id(const json& v, const char* file, const char* key) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX)
    throw_error(ErrorKind::invalid_input, file, key, ": expected a token id");
  return static_cast<std::int32_t>(v.get<std::int64_t>());
}

} // namespace

TokenizerConfig parse_config(std::string_view tokenizer_config, std::string_view generation_config,
                             const Tokenizer& tok) {
  constexpr const char* kCfg = "tokenizer_config.json";
  constexpr const char* kGen = "generation_config.json";
  TokenizerConfig c;
  const json cfg = tokenizer_config.empty() ? json::object() : parse_text(tokenizer_config, kCfg);
  const json gen = generation_config.empty() ? json::object() : parse_text(generation_config, kGen);
  if (!cfg.is_object())
    throw_error(ErrorKind::invalid_input, kCfg, "expected a JSON object");
  if (!gen.is_object())
    throw_error(ErrorKind::invalid_input, kGen, "expected a JSON object");
  c.bos_token = token_string(cfg, "bos_token", kCfg);
  c.eos_token = token_string(cfg, "eos_token", kCfg);
  c.pad_token = token_string(cfg, "pad_token", kCfg);
  c.unk_token = token_string(cfg, "unk_token", kCfg);
  c.add_bos_token = opt_bool(cfg, "add_bos_token", kCfg);
  c.add_eos_token = opt_bool(cfg, "add_eos_token", kCfg);
  c.clean_up_tokenization_spaces =
      opt_bool(cfg, "clean_up_tokenization_spaces", kCfg).value_or(false);
  const json& tpl = member(cfg, "chat_template");
  if (tpl.is_string()) {
    c.chat_template = tpl.get<std::string>();
  } else if (tpl.is_array()) {
    for (const json& t : tpl) {
      if (!member(t, "name").is_string() || !member(t, "template").is_string())
        throw_error(ErrorKind::invalid_input, kCfg,
                    "chat_template: expected a list of {\"name\", \"template\"}");
      c.named_chat_templates[t["name"].get<std::string>()] = t["template"].get<std::string>();
    }
    if (const auto it = c.named_chat_templates.find("default"); it != c.named_chat_templates.end())
      c.chat_template = it->second;
  } else if (!tpl.is_null()) {
    throw_error(ErrorKind::invalid_input, kCfg, "chat_template: expected a string or a list");
  }

  const json& eos = member(gen, "eos_token_id");
  if (eos.is_array()) {
    for (const json& e : eos)
      c.eos_token_ids.push_back(token_id(e, kGen, "eos_token_id"));
  } else if (!eos.is_null()) {
    c.eos_token_ids.push_back(token_id(eos, kGen, "eos_token_id"));
  } else if (!c.eos_token.empty()) {
    if (const auto id = tok.token_to_id(c.eos_token))
      c.eos_token_ids.push_back(*id);
  }
  if (const json& bos = member(gen, "bos_token_id"); !bos.is_null())
    c.bos_token_id = token_id(bos, kGen, "bos_token_id");
  else if (!c.bos_token.empty())
    c.bos_token_id = tok.token_to_id(c.bos_token);
  for (const char* key : {"temperature", "top_p", "top_k", "repetition_penalty", "do_sample"})
    if (const json& v = member(gen, key); !v.is_null())
      c.generation_defaults[key] = v;
  return c;
}

} // namespace tpullm::text::detail

namespace tpullm::text {

std::string TokenizerConfig::no_chat_template_reason() const {
  if (named_chat_templates.empty())
    return "tokenizer_config.json has no chat_template";
  std::string names;
  for (const auto& [name, body] : named_chat_templates)
    names += (names.empty() ? "" : ", ") + name;
  return "tokenizer_config.json's chat_template is a list of named templates (" + names +
         ") without one named \"default\", the one that is rendered (as transformers' "
         "apply_chat_template does when no template name is given)";
}

} // namespace tpullm::text
