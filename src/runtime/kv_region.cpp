// The KV cache region, with sliding-window layers' caches as rings (kv_region.hpp).
#include "tpullm/runtime/kv_region.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <utility>
#include <variant>

#include "tpullm/ir/tpu_ops.hpp"

namespace tpullm::runtime {

std::int64_t page_bytes() {
  const long p = ::sysconf(_SC_PAGESIZE);
  return p > 0 ? p : 4096;
}

std::vector<std::int64_t> layer_windows(std::span<const codegen::Program> programs,
                                        std::int64_t layers) {
  std::vector<std::int64_t> windows(static_cast<std::size_t>(std::max<std::int64_t>(layers, 0)), 0);
  for (const auto& p : programs)
    if (p.info.layer >= 0 && p.info.layer < layers)
      for (const auto& in : p.instrs)
        if (const auto* a = std::get_if<ir::tpu::FAttentionOp>(&in.op); a && a->window) {
          auto& w = windows[static_cast<std::size_t>(p.info.layer)];
          w = std::max(w, *a->window);
        }
  return windows;
}

memory::KvRings kv_rings_of(std::span<const codegen::Program> programs, const memory::KvGeometry& g,
                            std::int64_t page) {
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(g.layers, 0));
  std::vector<std::int64_t> rows(n, 0);
  for (const auto& p : programs) {
    if (p.info.layer < 0 || static_cast<std::size_t>(p.info.layer) >= n || !p.info.memory ||
        p.info.memory->kv_row <= 0)
      continue;
    const auto l = static_cast<std::size_t>(p.info.layer);
    // Positions written per conversation: [1, L] for one conversation, [B, 1] for a batch.
    const auto arg = static_cast<std::size_t>(p.positions_arg);
    const bool known =
        p.positions_arg >= 0 && arg < p.args.size() && !p.args[arg].type.shape.empty();
    const std::int64_t written = known ? p.args[arg].type.shape.back() : g.capacity;
    rows[l] = std::max(rows[l], written);
  }
  return memory::plan_kv_rings(g, layer_windows(programs, g.layers), rows, page);
}

namespace {

/// Maps `bytes` of anonymous memory (zero, committed on first touch) at `at` (nullptr: anywhere).
std::byte* map_anonymous(std::byte* at, std::size_t bytes) {
  void* m = ::mmap(at, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (at ? MAP_FIXED : 0), -1, 0);
  return m == MAP_FAILED ? nullptr : static_cast<std::byte*>(m);
}

/// Maps every ring of `g`'s slots over `base` from one memory file; false when the system
/// refuses (the caller then maps the region plainly again).
bool map_rings(std::byte* base, const memory::KvGeometry& g, const memory::KvRings& r) {
  const int fd = ::memfd_create("tpullm-kv-rings", MFD_CLOEXEC);
  if (fd < 0)
    return false;
  const std::int64_t cache = g.capacity * g.row_bytes;
  std::int64_t file = 0;
  for (std::int64_t l = 0; l < g.layers; ++l)
    if (r.rows[static_cast<std::size_t>(l)] > 0)
      file += 2 * g.slots * r.rows[static_cast<std::size_t>(l)] * g.row_bytes;
  bool ok = ::ftruncate(fd, static_cast<off_t>(file)) == 0;
  std::int64_t at = 0; // offset of the next ring in the file
  for (std::int64_t s = 0; ok && s < g.slots; ++s)
    for (std::int64_t l = 0; ok && l < g.layers; ++l) {
      const std::int64_t ring = r.rows[static_cast<std::size_t>(l)] * g.row_bytes;
      if (ring <= 0)
        continue;
      for (int kind = 0; ok && kind < 2; ++kind, at += ring) {
        std::byte* c = base + g.slot_offset(s) + g.cache_offset(l, kind);
        for (std::int64_t off = 0; ok && off < cache; off += ring) {
          const auto len = static_cast<std::size_t>(std::min(ring, cache - off));
          ok = ::mmap(c + off, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                      static_cast<off_t>(at)) != MAP_FAILED;
        }
      }
    }
  ::close(fd); // the mappings keep the file
  return ok;
}

} // namespace

KvRegion::KvRegion(const memory::KvGeometry& g, const memory::KvRings& rings)
    : size_(static_cast<std::size_t>(g.bytes())), geometry_(g) {
  if (size_ == 0)
    return;
  base_ = map_anonymous(nullptr, size_);
  if (!base_)
    throw std::bad_alloc();
  if (!rings.any())
    return;
  if (map_rings(base_, g, rings)) {
    rings_ = rings;
    copy_.assign(static_cast<std::size_t>(g.slots * g.layers), -1);
    return;
  }
  // Some ring was not mapped: the whole region plain again, every position kept.
  if (!map_anonymous(base_, size_)) {
    release();
    throw std::bad_alloc();
  }
}

void KvRegion::settle(std::int64_t slot, std::int64_t layer, std::int64_t pos) {
  const memory::KvGeometry& g = geometry_;
  if (copy_.empty() || slot < 0 || slot >= g.slots || layer < 0 || layer >= g.layers || pos < 0)
    return;
  const std::int64_t ring = rings_.rows[static_cast<std::size_t>(layer)];
  if (ring <= 0)
    return;
  std::int64_t& last = copy_[static_cast<std::size_t>(slot * g.layers + layer)];
  const std::int64_t c = pos / ring;
  if (c == last)
    return;
  last = c;
  // A call at pos reads back to pos - window + 1 > pos - ring and writes below pos + ring.
  const std::int64_t lo = std::max<std::int64_t>(0, (c - 1) * ring);
  const std::int64_t hi = std::min(g.capacity, (c + 2) * ring);
  for (int kind = 0; kind < 2; ++kind) {
    std::byte* cache = base_ + g.slot_offset(slot) + g.cache_offset(layer, kind);
    // On a shared mapping MADV_DONTNEED drops the page table entries, not the file's pages.
    if (lo > 0)
      ::madvise(cache, static_cast<std::size_t>(lo * g.row_bytes), MADV_DONTNEED);
    if (hi < g.capacity)
      ::madvise(cache + hi * g.row_bytes, static_cast<std::size_t>((g.capacity - hi) * g.row_bytes),
                MADV_DONTNEED);
  }
}

KvRegion::~KvRegion() {
  release();
}

void KvRegion::release() {
  if (base_)
    ::munmap(base_, size_);
  base_ = nullptr;
}

KvRegion::KvRegion(KvRegion&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)),
      rings_(std::move(o.rings_)), geometry_(o.geometry_), copy_(std::move(o.copy_)) {}

KvRegion& KvRegion::operator=(KvRegion&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    rings_ = std::move(o.rings_);
    geometry_ = o.geometry_;
    copy_ = std::move(o.copy_);
  }
  return *this;
}

} // namespace tpullm::runtime
