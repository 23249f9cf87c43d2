// read_text_files: the checkpoint's tokenizer files, verbatim (text_files.hpp).
#include "tpullm/frontend/text_files.hpp"

#include "tpullm/support/input_file.hpp"

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

} // namespace tpullm::frontend
