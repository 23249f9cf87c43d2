#pragma once
// The fixed 64-byte header of a bundle file (docs/bundle.md), little-endian:
//   0  char[8]  magic "TPULLMB\0"
//   8  u32      format version
//   12 u32      header bytes (64)
//   16 u64      meta offset      24 u64 meta size
//   32 u64      blob offset      40 u64 blob size
//   48 u64      file size        56 u64 FNV-1a 64 checksum of the metadata bytes

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "tpullm/bundle/bundle.hpp"

namespace tpullm::bundle {

inline constexpr char kMagic[8] = {'T', 'P', 'U', 'L', 'L', 'M', 'B', '\0'};

inline std::uint64_t align_up(std::uint64_t v, std::uint64_t a) {
  return (v + a - 1) / a * a;
}

/// FNV-1a 64 of `b` (the metadata: a few MiB at most).
inline std::uint64_t checksum(std::span<const std::byte> b) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte c : b)
    h = (h ^ static_cast<std::uint64_t>(c)) * 0x100000001b3ull;
  return h;
}

struct Header {
  std::uint32_t version = kFormatVersion;
  std::uint32_t header_bytes = kHeaderBytes;
  std::uint64_t meta_offset = 0, meta_size = 0, blob_offset = 0, blob_size = 0, file_size = 0,
                meta_checksum = 0;

  std::array<std::byte, kHeaderBytes> encode() const {
    std::array<std::byte, kHeaderBytes> o{};
    std::memcpy(o.data(), kMagic, 8);
    put(o, 8, version, 4);
    put(o, 12, header_bytes, 4);
    put(o, 16, meta_offset, 8);
    put(o, 24, meta_size, 8);
    put(o, 32, blob_offset, 8);
    put(o, 40, blob_size, 8);
    put(o, 48, file_size, 8);
    put(o, 56, meta_checksum, 8);
    return o;
  }
  /// Reads a header from the first 64 bytes (the magic is checked by the caller).
  static Header decode(std::span<const std::byte> in) {
    Header h;
    h.version = static_cast<std::uint32_t>(get(in, 8, 4));
    h.header_bytes = static_cast<std::uint32_t>(get(in, 12, 4));
    h.meta_offset = get(in, 16, 8);
    h.meta_size = get(in, 24, 8);
    h.blob_offset = get(in, 32, 8);
    h.blob_size = get(in, 40, 8);
    h.file_size = get(in, 48, 8);
    h.meta_checksum = get(in, 56, 8);
    return h;
  }

private:
  static void put(std::array<std::byte, kHeaderBytes>& o, int at, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      o[static_cast<std::size_t>(at + i)] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
  }
  static std::uint64_t get(std::span<const std::byte> in, int at, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= static_cast<std::uint64_t>(in[static_cast<std::size_t>(at + i)]) << (8 * i);
    return v;
  }
};

} // namespace tpullm::bundle
