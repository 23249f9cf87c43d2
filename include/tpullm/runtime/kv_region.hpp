#pragma once
/// The executor's KV cache region in memory (memory/kv_geometry.hpp): every position of every
/// cache at its planned address, zero and committed page by page on first use. A layer whose
/// cache is a ring (memory/kv_rings.hpp) has R positions of memory behind it, mapped again and
/// again along its capacity, so that position p and p + R are one row.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tpullm/codegen/program.hpp"
#include "tpullm/memory/kv_geometry.hpp"
#include "tpullm/memory/kv_rings.hpp"

namespace tpullm::runtime {

/// Bytes of a memory page here (the unit of a ring's mapping).
std::int64_t page_bytes();

/// Per layer of `layers`, the sliding window of its attention: the largest FAttention `window`
/// of any of its programs in `programs` (0: full attention).
std::vector<std::int64_t> layer_windows(std::span<const codegen::Program> programs,
                                        std::int64_t layers);

/// The rings the programs `programs` planned for `g` allow: per layer, the sliding window of its
/// attention (the FAttention `window` of any of its programs) and the most positions one of its
/// programs writes per conversation (position_ids' last dimension), with pages of `page` bytes.
memory::KvRings kv_rings_of(std::span<const codegen::Program> programs, const memory::KvGeometry& g,
                            std::int64_t page = page_bytes());

/// See the file comment.
class KvRegion {
public:
  KvRegion() = default;
  /// The region of `g` (every slot) with `rings`' layers mapped as rings. When the rings cannot
  /// be mapped (the system refuses a mapping), the region keeps every position instead and
  /// rings() is empty: never a ring the session does not know of. Throws std::bad_alloc when
  /// even that cannot be mapped.
  KvRegion(const memory::KvGeometry& g, const memory::KvRings& rings);
  ~KvRegion();
  KvRegion(KvRegion&& o) noexcept;
  KvRegion& operator=(KvRegion&& o) noexcept;
  KvRegion(const KvRegion&) = delete;
  KvRegion& operator=(const KvRegion&) = delete;

  /// First byte of the region (slot 0, layer 0's keys).
  std::byte* data() { return base_; }
  /// Bytes of address space of the region (KvGeometry::bytes()).
  std::size_t size() const { return size_; }
  /// The rings mapped (empty: every cache keeps every position).
  const memory::KvRings& rings() const { return rings_; }
  /// Bytes of memory behind the region (KvRings::bytes: every position's without rings).
  std::int64_t memory_bytes() const { return rings_.bytes(geometry_); }
  /// Tells the region that conversation `slot`'s layer `layer` runs at position `pos` now: when
  /// that enters another copy of the layer's ring, the page mappings of the copies away from it
  /// (all but the previous, this and the next) are dropped. The data stays in the ring; only
  /// this process's page tables shrink, so that its resident set counts a ring at most three
  /// times instead of once per copy ever touched. No-op for a layer without a ring.
  void settle(std::int64_t slot, std::int64_t layer, std::int64_t pos);

private:
  void release();
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  memory::KvRings rings_;
  memory::KvGeometry geometry_;
  std::vector<std::int64_t> copy_; ///< [slot][layer]: the ring copy last settled at (-1: none)
};

} // namespace tpullm::runtime
