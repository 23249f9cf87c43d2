#pragma once
/// Where a value's bytes live once memory is planned. Buffers belong to values, not to types
/// (so type equality never depends on placement). Regions:
///   input   caller-provided span of argument `slot` (no copy)
///   output  caller-provided span of result `slot` (the producer writes there directly)
///   kv      the persistent KV cache: per layer a key and a value cache [capacity, kv_heads, d]
///   arena   one activation arena shared by every function (one runs at a time)
///   local   a core's local memory (the scratch of a layer group's tiles), per tile
///   weight  the constant weight blob (offsets assigned when a bundle is written)
/// A kv buffer with pos_stride > 0 starts at offset + position_ids[0] * pos_stride: the rows of
/// new tokens land at their positions, so the cache is updated in place and never copied.

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "tpullm/ir/attributes.hpp"

namespace tpullm::ir {

/// Memory regions of a planned function (see the file comment).
enum class Region : std::uint8_t { input, output, kv, arena, local, weight };
template <>
struct EnumNames<Region> {
  static constexpr std::array<std::pair<Region, std::string_view>, 6> items = {
      {{Region::input, "input"},
       {Region::output, "output"},
       {Region::kv, "kv"},
       {Region::arena, "arena"},
       {Region::local, "local"},
       {Region::weight, "weight"}}};
};

/// The storage of one value.
struct Buffer {
  Region region = Region::arena;
  std::int64_t slot = 0;       ///< argument / result index (input / output regions)
  std::int64_t offset = 0;     ///< bytes from the region's (or the slot's) start
  std::int64_t size = 0;       ///< bytes
  std::int64_t pos_stride = 0; ///< kv: bytes added per position_ids[0] (0 = static address)
  bool view = false; ///< shares the bytes of the op's first operand (no storage of its own)
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("region", s.region);
    f("slot", s.slot);
    f("offset", s.offset);
    f("size", s.size);
    f("pos_stride", s.pos_stride);
    f("view", s.view);
  }
  /// End of the static byte range [offset, offset + size).
  std::int64_t end() const { return offset + size; }
  friend bool operator==(const Buffer&, const Buffer&) = default;
};

/// True when two buffers' static byte ranges in the same region (and slot) intersect.
inline bool overlaps(const Buffer& a, const Buffer& b) {
  return a.region == b.region && a.slot == b.slot && a.offset < b.end() && b.offset < a.end() &&
         a.size > 0 && b.size > 0;
}

} // namespace tpullm::ir
