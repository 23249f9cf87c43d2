#pragma once
/// The text side of a checkpoint as it sits beside config.json: tokenizer.json,
/// tokenizer_config.json and generation_config.json, read verbatim (a bundle stores them so it
/// is enough on its own to tokenize and chat).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace tpullm::frontend {

/// The three files' contents; "" for a file the checkpoint does not have.
struct TextFiles {
  std::string tokenizer_json;         ///< tokenizer.json
  std::string tokenizer_config_json;  ///< tokenizer_config.json
  std::string generation_config_json; ///< generation_config.json
  /// True when there is no tokenizer (the other two files alone are not used).
  bool empty() const { return tokenizer_json.empty(); }
};

/// Largest text file read: 256 MiB (the largest real tokenizer.json here is 33 MB).
inline constexpr std::size_t kMaxTokenizerFileBytes = std::size_t{256} << 20;

/// Reads the files of checkpoint directory `dir` that exist (regular files only, each at most
/// kMaxTokenizerFileBytes). Throws Error(io) / Error(invalid_input) naming a file that exists but
/// cannot be read; the contents are not parsed here.
TextFiles read_text_files(const std::filesystem::path& dir);

/// Checks that `files` (a checkpoint's text side) load: the tokenizer parses, its vocabulary
/// fits the model's `vocab` embedding rows, and the chat template (if any) parses. Throws the
/// loaders' Error, or Error(invalid_input) naming `where` (the checkpoint) for a tokenizer
/// larger than the model. Nothing to check when `files` is empty.
void check_text_files(const TextFiles& files, std::int64_t vocab, const std::string& where);

} // namespace tpullm::frontend
