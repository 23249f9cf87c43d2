// Replays a libFuzzer target over files (or directories of files) given on the command line,
// so that the seed corpus and past crashes run as a plain CTest test with any compiler.
//   tpullm-fuzz-replay TARGET FILE_OR_DIR...
// Every fuzz_<name>.cpp is compiled into this binary with its LLVMFuzzerTestOneInput renamed to
// tpullm_fuzz_<name> (tests/fuzz/CMakeLists.txt writes the list into fuzz_targets.inc).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#define TPULLM_FUZZ_TARGET(name)                                                                   \
  extern "C" int tpullm_fuzz_##name(const std::uint8_t* data, std::size_t size);
#include "fuzz_targets.inc"
#undef TPULLM_FUZZ_TARGET

namespace {

using Entry = int (*)(const std::uint8_t*, std::size_t);

struct Target {
  std::string_view name;
  Entry entry;
};

constexpr Target kTargets[] = {
#define TPULLM_FUZZ_TARGET(name) {#name, &tpullm_fuzz_##name},
#include "fuzz_targets.inc"
#undef TPULLM_FUZZ_TARGET
};

} // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  Entry entry = nullptr;
  for (const Target& t : kTargets)
    if (argc > 1 && t.name == argv[1])
      entry = t.entry;
  if (!entry) {
    std::fprintf(stderr, "usage: tpullm-fuzz-replay TARGET FILE_OR_DIR... (TARGET one of:");
    for (const Target& t : kTargets)
      std::fprintf(stderr, " %.*s", static_cast<int>(t.name.size()), t.name.data());
    std::fprintf(stderr, ")\n");
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file())
          files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else { // a mistyped corpus path must fail the test, not replay one empty input
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "replay: no input files\n");
    return 2;
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", f.c_str());
      return 2;
    }
    const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    entry(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
  }
  std::printf("replay: %zu inputs ok\n", files.size());
  return 0;
}
