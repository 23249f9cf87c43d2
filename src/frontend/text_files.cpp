// read_text_files: the checkpoint's tokenizer files, verbatim, and check_text_files: that they
// load (text_files.hpp).
#include "tpullm/frontend/text_files.hpp"

#include "tpullm/support/input_file.hpp"
#include "tpullm/text/chat_template.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::frontend {

TextFiles read_text_files(const std::filesystem::path& dir) {
  TextFiles t;
  auto read = [&](const char* name, std::string& into) {
    const auto p = dir / name;
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(p, ec)))
      return;
    into = read_regular_file(p, kMaxTokenizerFileBytes);
  };
  read("tokenizer.json", t.tokenizer_json);
  read("tokenizer_config.json", t.tokenizer_config_json);
  read("generation_config.json", t.generation_config_json);
  return t;
}

void check_text_files(const TextFiles& files, std::int64_t vocab, const std::string& where) {
  if (files.empty())
    return;
  const auto tok = text::Tokenizer::from_json(files.tokenizer_json, files.tokenizer_config_json,
                                              files.generation_config_json);
  check(tok.vocab_size() <= vocab, ErrorKind::invalid_input, where, "tokenizer.json has ",
        tok.vocab_size(), " tokens, more than the model's ", vocab,
        " embedding rows (a tokenizer of another model?)");
  if (!tok.config().chat_template.empty())
    (void)text::ChatTemplate::parse(tok.config().chat_template);
}

} // namespace tpullm::frontend
