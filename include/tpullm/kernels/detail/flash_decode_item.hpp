#pragma once
/// The arguments of one flash-decoding work item and the constants the per-ISA items share
/// (flash_decode.hpp cuts the work; flash_decode_avx512.hpp / flash_decode_avx2.hpp /
/// flash_decode.hpp's portable body run an item).

#include <cstdint>

namespace tpullm::kernels::detail {

/// Keys below which a chunk is not split further (the merge and the fork would cost more).
inline constexpr std::int64_t kFdMinChunkKeys = 256;
/// Most key chunks of one row (one per core; past 64 cores, blocks of kv heads).
inline constexpr std::int64_t kFdMaxChunks = 64;
/// Keys per block of the decode loop.
inline constexpr std::int64_t kFdBlock = 16;
#ifndef TPULLM_FD_PREFETCH_BLOCKS
#define TPULLM_FD_PREFETCH_BLOCKS 4
#endif
/// Software prefetch distance of the decode loop, in blocks.
inline constexpr std::int64_t kFdPrefetchBlocks = TPULLM_FD_PREFETCH_BLOCKS;
#ifndef TPULLM_FD_PREFETCH
#define TPULLM_FD_PREFETCH 0
#endif
/// Whether the decode loop prefetches its blocks kFdPrefetchBlocks ahead (-DTPULLM_FD_PREFETCH=1).
inline constexpr bool kFdPrefetch = TPULLM_FD_PREFETCH;

/// One work item's arguments. qs: [q_heads, d] scaled by scale * log2(e); qp: the same rows
/// padded with zeros to dp = d rounded up to 16 ([q_heads, dp]); k, v: the cache [S, H, d];
/// m, l: [q_heads]; o: [q_heads, d] (this item's chunk slot; only rows of heads [h0, h1)
/// written). Keys [j0, j1), j0 a multiple of kFdBlock.
template <class KV>
struct FdItem {
  const float* qs = nullptr;
  const float* qp = nullptr;
  const KV* k = nullptr;
  const KV* v = nullptr;
  std::int64_t H = 0, G = 0, d = 0, dp = 0;
  std::int64_t h0 = 0, h1 = 0, j0 = 0, j1 = 0;
  float* m = nullptr;
  float* l = nullptr;
  float* o = nullptr;
};

/// p rounded up to a 64-byte boundary (the buffers it points into have 16 floats of slack).
inline float* fd_align64(float* p) {
  return reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(p) + 63) & ~std::uintptr_t{63});
}

} // namespace tpullm::kernels::detail
