// A bundle whose weight part names are damaged behind a valid checksum is refused with a
// tpullm::Error naming the weight and the missing part (Weight::part used to throw
// std::out_of_range from inside Bundle::open's `catch (const Error&)`, which then escaped as an
// "internal error").
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"

using namespace tpullm;
namespace fs = std::filesystem;

namespace {

/// FNV-1a over the metadata, as the bundle header's checksum (docs/bundle.md).
std::uint64_t fnv(const char* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<unsigned char>(p[i])) * 0x100000001b3ull;
  return h;
}

} // namespace

TEST_CASE("a damaged weight part name is refused as invalid input, not an internal error",
          "[bundle][errors]") {
  const auto desc =
      frontend::load_model(fs::path(TPULLM_TEST_DATA_DIR) / "models" / "qwen3-headdim");
  frontend::StageParams sp;
  sp.seq_length = 64;
  sp.max_input_length = 16;
  sp.decode_chunks = {32};
  compiler::CompileOptions o;
  o.target.cores = 2;
  const auto cm = compiler::compile(frontend::build_top_modules(desc, sp), o);
  std::ostringstream os;
  bundle::write_bundle(cm, bundle::make_model_info(desc, sp, "f32"), os);
  std::string bytes = os.str();
  // Header: metadata size at byte 24, checksum of the metadata at byte 56, metadata from 64.
  std::uint64_t meta_size = 0;
  std::memcpy(&meta_size, bytes.data() + 24, 8);
  // Every FlatBuffers string "data" (length 4, then the bytes) becomes "dXta".
  const std::string role("\x04\x00\x00\x00"
                         "data",
                         8);
  int renamed = 0;
  for (std::size_t at = bytes.find(role, 64); at != std::string::npos && at < 64 + meta_size;
       at = bytes.find(role, at + 1)) {
    bytes[at + 5] = 'X';
    ++renamed;
  }
  REQUIRE(renamed > 0);
  const std::uint64_t sum = fnv(bytes.data() + 64, meta_size);
  std::memcpy(bytes.data() + 56, &sum, 8);
  const fs::path path =
      fs::temp_directory_path() / ("tpullm-test-part-" + std::to_string(::getpid()) + ".bundle");
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  try {
    (void)bundle::Bundle::open(path);
    FAIL("opened a bundle whose weights lost their 'data' part");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.kind() == ErrorKind::invalid_input);
    CHECK_THAT(std::string(e.what()), Catch::Contains("has no part 'data'"));
  }
  std::error_code ec;
  fs::remove(path, ec);
}
