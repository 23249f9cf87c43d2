#pragma once
// Shared by the chat-template tests: reading the committed oracle files and the fetched
// tokenizer_config.json files.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_data_dir.hpp"

/// The folder scripts/fetch-tokenizers.sh fills (CMake cache variable TPULLM_TOKENIZER_CACHE).
const char* tpullm_tokenizer_cache_dir();

namespace chat_test {

/// Whole file as bytes; empty and `ok` false when it cannot be read.
inline std::string read_file(const std::string& path, bool& ok) {
  std::ifstream f(path, std::ios::binary);
  ok = static_cast<bool>(f);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// tests/data/text/chat/<name>.
inline std::string data_path(const std::string& name) {
  return std::string(TPULLM_TEST_DATA_DIR) + "/text/chat/" + name;
}

/// One JSON value per line, insertion-ordered.
inline std::vector<nlohmann::ordered_json> read_jsonl(const std::string& path) {
  bool ok = false;
  std::istringstream in(read_file(path, ok));
  std::vector<nlohmann::ordered_json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      out.push_back(nlohmann::ordered_json::parse(line));
  return out;
}

} // namespace chat_test
