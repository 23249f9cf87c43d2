#pragma once
/// How the float-format GEMVs (matmul_gemv_streams_avx512.hpp / _avx2.hpp) cut a panel's K range
/// into interleaved DRAM streams.

#include "tpullm/kernels/detail/matmul_common.hpp"

namespace tpullm::kernels::detail {

/// Rows [k0, k1) of a panel cut into S streams for the float GEMVs: streams 0..S-2 take L rows
/// each (a multiple of U, the rows per stream per step), the last the rest (L plus fewer than
/// S * U rows, read alone after the interleaved steps). Each stream's prefetch runs PF
/// bytes ahead and, past its end, on into the same stream of the next panel, so a thread's S
/// streams stay prefetched across panels as the read ceiling's streams are.
struct GemvStreamPlan {
  std::int64_t L = 0;        ///< rows per stream (multiple of U)
  std::int64_t stream_b = 0; ///< L * row bytes: distance between stream starts
  std::int64_t wrap_b = 0;   ///< panel_bytes - stream_b: stream end -> the next panel's stream
};

/// The plan of a view for S streams of U-row steps.
inline GemvStreamPlan gemv_stream_plan(const LinearArgs& a, int S, int U) {
  GemvStreamPlan g;
  const std::int64_t rb = row_bytes(a.v.w->format);
  g.L = (a.v.k1 - a.v.k0) / S / U * U;
  g.stream_b = g.L * rb;
  g.wrap_b = a.v.w->panel_bytes() - g.stream_b;
  return g;
}

} // namespace tpullm::kernels::detail
