// Helpers of tokenizer_files.hpp.
#include "tokenizer_files.hpp"

#include <cstdlib>

#include <catch2/catch.hpp>

#include "test_data_dir.hpp"

std::filesystem::path real_tokenizer_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(tpullm_tokenizer_cache_dir()) / name;
  if (!std::filesystem::is_regular_file(dir / "tokenizer.json"))
    FAIL("missing " << (dir / "tokenizer.json").string()
                    << ": run scripts/fetch-tokenizers.sh (install-deps.sh runs it)");
  return dir;
}

std::filesystem::path shared_dir() {
  const char* env = std::getenv("TPULLM_SHARED_DIR");
  return std::filesystem::path(env && *env ? env : tpullm_shared_dir());
}

std::filesystem::path oracle_dir() {
  return std::filesystem::path(TPULLM_TEST_DATA_DIR) / "text" / "tok";
}
