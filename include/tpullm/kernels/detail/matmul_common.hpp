#pragma once
/// Shared pieces of the linear kernels (kernels/matmul.hpp): the AVX2 / AVX-512 target
/// attributes, the weight view and argument struct every path takes, the GEMV / GEMM blocking
/// constants and the packed-panel accessors.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/isa_target.hpp"
#include "tpullm/kernels/packed_weights.hpp"

#if TPULLM_X86
#include <immintrin.h>
#endif

namespace tpullm::kernels {

/// How a linear over integer weights may treat its f32 activation x.
///  - exact: x as f32 (the VNNI path splits it into three int8 digits per element, exact to f32
///    rounding); what `verify` checks at 1e-4.
///  - int8: x rounded to int8 with one scale (max|x| / 127) per weight group of each row, then
///    integer dot products, as llama.cpp's Q8_0 / Q8_K activations (lossy: docs/kernels.md has
///    the bounds). Taken by the AVX-512 VNNI kernels and, on the AVX2 path, by the AVX2
///    integer-dot kernels (same results), at every M (detail::vnni_int8_rows for M > 4), unless
///    AMX takes the product; the AVX-512 path without VNNI and the portable one compute exactly.
enum class XPrecision : std::uint8_t { exact, int8 };

} // namespace tpullm::kernels

namespace tpullm::kernels::detail {

/// A sub-matrix of packed weights: packed rows [k0, k1) (group-aligned) of panels [p0, p1).
struct WeightView {
  const PackedWeights* w = nullptr;
  std::int64_t k0 = 0, k1 = 0, p0 = 0, p1 = 0;
  std::int64_t cols() const { return std::min(w->N, p1 * kPanelCols) - p0 * kPanelCols; }
};

/// Arguments shared by every path. x rows have stride ldx and x column 0 is packed row k0; y rows
/// have stride ldy and y column 0 is weight column p0 * 32. y = (accumulate ? y : 0) + x · W[k0:k1,
/// cols] + bias.
struct XDigits;

struct LinearArgs {
  const float* x = nullptr;
  std::int64_t ldx = 0;
  WeightView v;
  const float* bias = nullptr; ///< [cols] or null
  float* y = nullptr;
  std::int64_t ldy = 0;
  std::int64_t M = 0;
  bool accumulate = false;
  const float* xsum = nullptr; ///< [M][G_view]: per-row, per-group sums of x (quantized only)
  std::int64_t xsum_ld = 0;
  const XDigits* xd = nullptr; ///< digit-decomposed x for the VNNI GEMV (int8 / int4), or null
  XPrecision xprec = XPrecision::exact; ///< int8: x's digits may be one (kernels::XPrecision)
};

inline constexpr std::int64_t kGemvMaxRows = 4;
/// Linears of kGemvMaxRows < M <= kGemvBlockMaxRows rows (a speculative verify call's, a short
/// prompt's) also run the GEMV kernels where no tile path (AMX, VDPBF16PS) takes them: blocks of
/// panels of about kGemvBlockBytes, each read from DRAM by its first 4 rows and from L2 by the
/// next ones. The GEMM (14-row register strips, weights dequantized into L1 tiles) measured
/// 2.3-6x a single row's time at 8 rows (bench linear/qwen2.5-0.5b/.../M:8).
inline constexpr std::int64_t kGemvBlockMaxRows = 16;
/// Float row blocks run 8 rows per pass over their panels (each weight vector decoded once for
/// 16 FMAs instead of 8) on AVX-512 while the 8 rows of x stay within L2 beside the panels:
/// K <= kGemvRows8MaxK. Same sums per row as 4-row passes (one accumulator set each).
inline constexpr std::int64_t kGemvRows8MaxK = 5120;
#ifndef TPULLM_GEMV_BLOCK_BYTES
#define TPULLM_GEMV_BLOCK_BYTES (256 << 10)
#endif
/// Bytes of weight panels a row-blocked GEMV (kGemvBlockMaxRows) runs its row blocks over.
inline constexpr std::int64_t kGemvBlockBytes = TPULLM_GEMV_BLOCK_BYTES;
#ifndef TPULLM_VNNI_INT8_MAX_ROWS
#define TPULLM_VNNI_INT8_MAX_ROWS 4096
#endif
/// XPrecision::int8 runs linears of up to this many rows on the VNNI kernels (x rounded to one
/// int8 digit; blocks of kVnniRowBlock rows, each panel read once per 4 rows of a block) instead
/// of the f32 GEMM (measured faster at every prompt length up to 512 on AVX-512 VNNI: 1.1-1.4x at
/// 512 rows, 1.4-2.5x at 16-256; docs/kernels.md round 8). AMX, where it applies, still takes the
/// product.
inline constexpr std::int64_t kVnniInt8MaxRows = TPULLM_VNNI_INT8_MAX_ROWS;
/// Rows of x the VNNI kernels take over a panel range at once (their digits stay in L2).
inline constexpr std::int64_t kVnniRowBlock = 64;
/// Test hook: when true, the AVX2 int8-activation GEMV (matmul_gemv_int8_avx2.hpp) uses
/// VPMADDUBSW even where the CPU has AVX-VNNI (so tests and benchmarks cover both there).
inline bool& avx_vnni_gemv_disabled() {
  static bool disabled = false;
  return disabled;
}
#ifndef TPULLM_GEMV_BYTES_PER_THREAD
#define TPULLM_GEMV_BYTES_PER_THREAD (64 << 10)
#endif
/// A GEMV forks one more thread per this many weight bytes (up to the split's parts): below it
/// the fork / join costs more than the second core's bandwidth saves.
inline constexpr std::int64_t kGemvBytesPerThread = TPULLM_GEMV_BYTES_PER_THREAD;
#ifndef TPULLM_GEMV_PREFETCH
#define TPULLM_GEMV_PREFETCH 4096
#endif
/// Software prefetch distance (bytes) of the GEMV weight stream, every cache line.
inline constexpr std::int64_t kGemvPf = TPULLM_GEMV_PREFETCH;
#ifndef TPULLM_GEMV_STREAMS
#define TPULLM_GEMV_STREAMS 4
#endif
/// Panels a single-row GEMV reads at once (interleaved DRAM streams per thread).
inline constexpr int kGemvStreams = TPULLM_GEMV_STREAMS;
#ifndef TPULLM_GEMV_STREAM_BYTES
#define TPULLM_GEMV_STREAM_BYTES 256
#endif
/// Bytes the float-format GEMVs read from each of their streams per step (4 cache lines, as the
/// read ceiling's streams do).
inline constexpr std::int64_t kGemvStreamBytes = TPULLM_GEMV_STREAM_BYTES;
#ifndef TPULLM_GEMV_STREAM_PREFETCH
#define TPULLM_GEMV_STREAM_PREFETCH 1024
#endif
/// Software prefetch distance (bytes, in each stream) of the AVX-512 float-format GEMV: 1 KiB as
/// the read ceiling's best pattern (the AVX2 one keeps kGemvPf, which measured faster there).
inline constexpr std::int64_t kGemvStreamPf = TPULLM_GEMV_STREAM_PREFETCH;
#ifndef TPULLM_GEMV_VNNI_PREFETCH
#define TPULLM_GEMV_VNNI_PREFETCH 1024
#endif
/// Software prefetch distance (bytes, in each of its streams) of the single-row VNNI GEMV (int8 /
/// int4 / 6-bit codes): 1 KiB, against kGemvPf's 4 KiB before. Decode of the 0.5B Q4_0 and w4a16
/// bundles ran 2.5-3.4% faster with it, alternated step by step in one process (docs/kernels.md
/// round 14). Why is not measured (no performance counters in the VM): fewer lines in flight per
/// stream, 64 in all at 4 streams, may fit the miss queues where 256 did not.
inline constexpr std::int64_t kGemvVnniPf = TPULLM_GEMV_VNNI_PREFETCH;
#ifndef TPULLM_GEMV_STREAMS_VNNI
#define TPULLM_GEMV_STREAMS_VNNI 4
#endif
/// Panels the single-row VNNI GEMV (int8 / int4) reads at once.
inline constexpr int kGemvStreamsVnni = TPULLM_GEMV_STREAMS_VNNI;
inline constexpr std::int64_t kKc = 256;
#ifndef TPULLM_GEMM_MC
#define TPULLM_GEMM_MC 336
#endif
inline constexpr std::int64_t kMcMax = TPULLM_GEMM_MC;
inline constexpr std::int64_t kNb = 8; ///< panels per L2-resident C block in the GEMM

/// Two f32 buffers of one kernel, 64-byte aligned, each grown on demand and reused across calls
/// without clearing (every element a call reads it wrote first). A kernel that needs them keeps
/// its own pair per thread: gemm_scratch here, mlp_scratch (mlp.hpp), moe_scratch (moe.hpp).
/// Allocated per call instead, buffers of 128 KiB and more are fresh mappings whose pages fault
/// in on every call (docs/kernels.md round 21).
struct ScratchPair {
  AlignedArray<float> first, second;
  /// `first` holding at least n elements.
  float* a(std::size_t n) { return grow(first, n); }
  /// `second` holding at least n elements.
  float* b(std::size_t n) { return grow(second, n); }

private:
  static float* grow(AlignedArray<float>& v, std::size_t n) {
    if (v.size() < n)
      v = AlignedArray<float>(n);
    return v.data();
  }
};
/// The GEMM's packed x strips (a) and dequantized weight block (b) of this thread.
inline ScratchPair& gemm_scratch() {
  thread_local ScratchPair s;
  return s;
}

/// Rows per accumulation segment of a view: the group size for quantized formats, the whole
/// view otherwise. Segment gi covers packed rows [k0 + gi * step, min(k1, k0 + (gi + 1) * step)).
inline std::int64_t segment_rows(const WeightView& v) {
  return is_quantized(v.w->format) ? v.w->group_rows() : std::max<std::int64_t>(1, v.k1 - v.k0);
}

/// A weight's group indexing computed once per kernel call (PackedWeights' accessors divide on
/// every call): one-level scales, zeros and mins of group g of panel p start at element
/// (p * G + g) * kPanelCols of their arrays; the view's row k is in group k / group_rows.
struct GroupIndex {
  std::int64_t G;          ///< groups per panel (w.groups())
  std::int64_t group_rows; ///< rows per group in storage (w.group_rows())
  bool two_level;          ///< scales (and mins) in two levels: index them with two_level_at
  explicit GroupIndex(const PackedWeights& w)
      : G(w.groups()), group_rows(w.group_rows()), two_level(w.two_level()) {}
};

/// Room for one group's 32 scales (or mins) formed from two-level scales.
struct alignas(64) GroupParams {
  float v[kPanelCols];
};

/// Offsets of group g of panel p in a two-level weight: its super-block row of `scales` / `mins`
/// (floats) and its codes in `scale_codes` / `min_codes`.
struct TwoLevelAt {
  std::int64_t super, code;
};
inline TwoLevelAt two_level_at(const PackedWeights& w, std::int64_t p, std::int64_t g) {
  return {(p * w.scale_rows() + g * w.group_size / w.super_rows) * kPanelCols,
          (p * w.groups() + g) * kPanelCols};
}

/// Forms the 32 products super * code of a two-level group into `out`: for the portable path and
/// the AMX epilogue (GCC may leave this loop scalar; the AVX2 / AVX-512 paths form the products
/// in registers with group_params_avx2 / group_params_avx512).
[[gnu::always_inline]] inline const float*
two_level_params(const float* super, const std::int8_t* code, GroupParams& out) {
#pragma GCC unroll 32
  for (int c = 0; c < kPanelCols; ++c)
    out.v[c] = super[c] * static_cast<float>(code[c]);
  return out.v;
}

/// Group g of panel p's 32 parameters from `f32` (one level) or, two-level, formed into `buf`
/// as f32 super-block row times the group's codes.
[[gnu::always_inline]] inline const float* group_params(const PackedWeights& w,
                                                        const AlignedArray<float>& f32,
                                                        const AlignedArray<std::int8_t>& codes,
                                                        std::int64_t p, std::int64_t g,
                                                        GroupParams& buf) {
  if (!w.two_level())
    return f32.data() + (p * w.groups() + g) * kPanelCols;
  const TwoLevelAt at = two_level_at(w, p, g);
  return two_level_params(f32.data() + at.super, codes.data() + at.code, buf);
}

/// The 32 scales (64-byte aligned) of group g of panel p: a pointer into w.scales, or, for
/// two-level scales, `buf` holding each column's super-block scale times the group's code.
[[gnu::always_inline]] inline const float* panel_scales(const PackedWeights& w, std::int64_t p,
                                                        std::int64_t g, GroupParams& buf) {
  return group_params(w, w.scales, w.scale_codes, p, g, buf);
}
inline const std::uint8_t* panel_zeros(const PackedWeights& w, std::int64_t p, std::int64_t g) {
  return w.zeros.data() + (p * w.groups() + g) * kPanelCols;
}
/// The 32 scales of panel p of a per-channel weight (one group, so one level: W8A8's int8).
inline const float* per_channel_scales(const PackedWeights& w, std::int64_t p) {
  return w.scales.data() + p * kPanelCols;
}

/// The 32 mins of group g of panel p (scale-and-min formats), as panel_scales.
[[gnu::always_inline]] inline const float* panel_mins(const PackedWeights& w, std::int64_t p,
                                                      std::int64_t g, GroupParams& buf) {
  return group_params(w, w.mins, w.min_codes, p, g, buf);
}
inline const std::uint8_t* panel_row(const PackedWeights& w, std::int64_t p, std::int64_t k) {
  return w.data.data() + (p * w.stored_rows() + k) * row_bytes(w.format);
}

} // namespace tpullm::kernels::detail
