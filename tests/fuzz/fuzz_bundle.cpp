// libFuzzer target: arbitrary bytes as a bundle file. The metadata checksum is recomputed when
// the header's sections are in range, so mutations reach the FlatBuffers verifier and every
// check behind it instead of stopping at the checksum. A bundle must either be refused with
// tpullm::Error or open and run one prefill and one decode step (or refuse those with Error);
// anything else (crash, sanitizer report, another exception) is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tpullm/runtime/engine.hpp"

namespace {

std::uint64_t get64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

/// Rewrites the header's metadata checksum (FNV-1a 64, docs/bundle.md) when the range is valid.
void fix_checksum(std::vector<std::uint8_t>& b) {
  if (b.size() < 64 || std::memcmp(b.data(), "TPULLMB", 8) != 0)
    return;
  const std::uint64_t off = get64(b.data() + 16), size = get64(b.data() + 24);
  if (off > b.size() || size > b.size() - off)
    return;
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint64_t i = 0; i < size; ++i)
    h = (h ^ b[off + i]) * 0x100000001b3ull;
  for (int i = 0; i < 8; ++i)
    b[56 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h >> (8 * i));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> bytes(data, data + size);
  fix_checksum(bytes);
  // An anonymous in-memory file: opened through /proc like any path a user would give.
  const int fd = ::memfd_create("fuzz.bundle", 0);
  if (fd < 0)
    return 0;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0)
      break;
    done += static_cast<std::size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    tpullm::runtime::Engine engine(path, 1);
    try {
      auto& s = engine.session();
      (void)s.prefill({1}, false);
      (void)s.decode(0);
    } catch (const tpullm::Error&) {
    }
  } catch (const tpullm::Error&) {
  }
  ::close(fd);
  return 0;
}
