#pragma once
/// The text side a bundle carries (tokenizer.json, tokenizer_config.json, generation_config.json
/// as compiled in): the tokenizer, the chat template when there is one, and the ids that end an
/// answer. A bundle alone is enough to chat: the checkpoint directory is never read again.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/text/chat_template.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::runtime {

/// See the file comment.
struct TextSide {
  text::Tokenizer tokenizer;                       ///< the model's tokenizer
  std::optional<text::ChatTemplate> chat_template; ///< tokenizer_config.json's chat_template
  std::vector<std::int32_t> stop_ids;              ///< see conversation.hpp stop_ids()
};

/// The special-token strings a chat template sees (bos_token, eos_token, pad_token, unk_token:
/// those the tokenizer config sets), as transformers passes them to apply_chat_template.
std::map<std::string, std::string> template_special_tokens(const text::Tokenizer& tok);

/// The text side of an opened bundle. Throws Error(unsupported) naming `what` (the bundle's
/// path) when the bundle was compiled from a checkpoint without tokenizer.json.
TextSide load_text_side(const bundle::Bundle& b, const std::string& what);

} // namespace tpullm::runtime
