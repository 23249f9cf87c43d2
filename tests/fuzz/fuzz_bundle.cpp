// libFuzzer target: arbitrary bytes as a bundle file. The metadata checksum is recomputed when
// the header's sections are in range, so mutations reach the FlatBuffers verifier and every
// check behind it instead of stopping at the checksum. A bundle must either be refused with
// tpullm::Error or open and run one prefill and one decode step (or refuse those with Error);
// anything else (crash, sanitizer report, another exception) is a bug. The weight blob is
// reached too: a mutated weight must fail Bundle::verify_weights() (CRC-32C per chunk), and the
// same bytes behind rewritten, matching checksums must still load and run or be refused.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/support/crc32c.hpp"

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

/// An anonymous in-memory file holding `bytes`, opened through /proc like any path a user
/// would give; -1 when memfd is unavailable.
int memfd_with(const std::vector<std::uint8_t>& bytes) {
  const int fd = ::memfd_create("fuzz.bundle", 0);
  if (fd < 0)
    return -1;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0)
      break;
    done += static_cast<std::size_t>(n);
  }
  return fd;
}

std::string fd_path(int fd) {
  return "/proc/self/fd/" + std::to_string(fd);
}

/// When `b` opened, rewrites the weight checksums stored in its metadata to those of the blob as
/// it now is (found by their stored bytes, then the metadata checksum fixed again), so that
/// mutations of the weights themselves reach the runtime. False when nothing was rewritten.
bool fix_weight_checksums(std::vector<std::uint8_t>& bytes, const tpullm::bundle::Bundle& b) {
  const std::uint64_t meta_off = get64(bytes.data() + 16), meta_size = get64(bytes.data() + 24);
  const std::uint64_t blob_off = get64(bytes.data() + 32), blob_size = get64(bytes.data() + 40);
  const auto& stored = b.weight_checksums();
  const std::uint64_t chunk = b.weight_chunk_bytes();
  if (stored.empty() || chunk == 0)
    return false;
  std::vector<std::uint8_t> old_bytes(stored.size() * 4), new_bytes(stored.size() * 4);
  bool differ = false;
  for (std::size_t k = 0; k < stored.size(); ++k) {
    const std::uint64_t begin = k * chunk, n = std::min<std::uint64_t>(chunk, blob_size - begin);
    const std::uint32_t c =
        tpullm::crc32c({reinterpret_cast<const std::byte*>(bytes.data() + blob_off + begin), n});
    differ = differ || c != stored[k];
    for (int i = 0; i < 4; ++i) {
      old_bytes[k * 4 + static_cast<std::size_t>(i)] =
          static_cast<std::uint8_t>(stored[k] >> (8 * i));
      new_bytes[k * 4 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(c >> (8 * i));
    }
  }
  if (!differ)
    return false;
  auto* meta = bytes.data() + meta_off;
  auto* at = std::search(meta, meta + meta_size, old_bytes.begin(), old_bytes.end());
  if (at == meta + meta_size)
    return false;
  std::copy(new_bytes.begin(), new_bytes.end(), at);
  fix_checksum(bytes);
  return true;
}

/// Runs one prefill and one decode step of an opened bundle (refusals with Error are fine).
void exercise(std::shared_ptr<const tpullm::bundle::Bundle> b) {
  tpullm::runtime::BundleSession engine(std::move(b), 1);
  try {
    auto& s = engine.session();
    (void)s.prefill({1}, false);
    (void)s.decode(0);
  } catch (const tpullm::Error&) {
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> bytes(data, data + size);
  fix_checksum(bytes);
  const int fd = memfd_with(bytes);
  if (fd < 0)
    return 0;
  try {
    auto b = tpullm::bundle::Bundle::open(fd_path(fd));
    bool weights_ok = true;
    try {
      (void)b->verify_weights();
    } catch (const tpullm::Error&) {
      weights_ok = false; // a mutated weight: detected, as it must be
    }
    try {
      if (weights_ok) {
        exercise(b);
      } else if (fix_weight_checksums(bytes, *b)) {
        // The same mutated weights behind matching checksums: they must load, verify and run
        // (or be refused with Error), never crash.
        const int fd2 = memfd_with(bytes);
        if (fd2 >= 0) {
          try {
            auto b2 = tpullm::bundle::Bundle::open(fd_path(fd2));
            (void)b2->verify_weights(); // the rewritten checksums must match
            exercise(b2);
          } catch (const tpullm::Error&) {
          }
          ::close(fd2);
        }
      }
    } catch (const tpullm::Error&) {
    }
  } catch (const tpullm::Error&) {
  }
  ::close(fd);
  return 0;
}
