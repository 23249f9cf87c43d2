// load_text_side: the tokenizer and chat template stored in a bundle (text_side.hpp).
#include "tpullm/runtime/text_side.hpp"

#include "tpullm/runtime/conversation.hpp"

namespace tpullm::runtime {

std::map<std::string, std::string> template_special_tokens(const text::Tokenizer& tok) {
  std::map<std::string, std::string> special;
  const auto& c = tok.config();
  for (const auto& [k, v] : {std::pair{"bos_token", &c.bos_token},
                             {"eos_token", &c.eos_token},
                             {"pad_token", &c.pad_token},
                             {"unk_token", &c.unk_token}})
    if (!v->empty())
      special[k] = *v;
  return special;
}

TextSide load_text_side(const bundle::Bundle& b, const std::string& what) {
  const auto& t = b.model().text;
  check(!t.tokenizer_json.empty(), ErrorKind::unsupported, what,
        "this bundle has no tokenizer (its checkpoint had no tokenizer.json); use --prompt-ids");
  TextSide s{text::Tokenizer::from_json(t.tokenizer_json, t.tokenizer_config_json,
                                        t.generation_config_json),
             std::nullopt,
             {}};
  if (!s.tokenizer.config().chat_template.empty())
    s.chat_template = text::ChatTemplate::parse(s.tokenizer.config().chat_template);
  s.stop_ids = stop_ids(s.tokenizer, b.model().eos_token_ids);
  return s;
}

} // namespace tpullm::runtime
