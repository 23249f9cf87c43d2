// Where the text tests find their data: the fetched real tokenizer files (the CMake cache
// variable TPULLM_TOKENIZER_CACHE, compiled into one generated translation unit so the other test
// sources stay cacheable) and the oracle's expected outputs (tests/data/text/tok/).
#pragma once

#include <filesystem>
#include <string>

/// The folder holding NAME/tokenizer.json for each real tokenizer (scripts/fetch-tokenizers.sh).
const char* tpullm_tokenizer_cache_dir();
/// ../shared beside the source tree, as configured (tests/text/CMakeLists.txt).
const char* tpullm_shared_dir();

/// The shared oracle folder compiled in (../shared beside the source tree), unless the environment
/// variable TPULLM_SHARED_DIR names another; it may not exist.
std::filesystem::path shared_dir();

/// The folder of one real tokenizer; FAILs the test (naming scripts/fetch-tokenizers.sh) when its
/// tokenizer.json is missing.
std::filesystem::path real_tokenizer_dir(const std::string& name);

/// tests/data/text/tok/ of the source tree.
std::filesystem::path oracle_dir();

/// The seven real tokenizers the oracle covers.
inline const char* const kRealTokenizers[] = {"qwen3",  "llama3",      "llama3_1", "llama2",
                                              "gemma3", "deepseek_v3", "gptoss"};
