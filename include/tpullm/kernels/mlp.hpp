#pragma once
/// Fused SwiGLU MLP: out = down( silu(x · Wg) * (x · Wu) ), tiled over the intermediate dimension
/// so the [rows, intermediate] activation never exceeds a local-memory budget.
///
/// For each tile of `inter_tile` intermediate columns (a multiple of 32 and of the down weight's
/// group size) and `row_tile` rows of x: g = x · Wg[:, tile], u = x · Wu[:, tile] (two f32 buffers
/// of row_tile * inter_tile floats = the budgeted bytes), h = silu(g) * u in place, then
/// out[rows] += h · Wd[tile, :]. All products go through kernels::linear's machinery (any packed
/// format for each of the three weights), each split across cores as `split` says.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/matmul.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Shape of a SwiGLU MLP: x, out: [M, hidden]; gate/up: [hidden, intermediate]; down:
/// [intermediate, hidden].
struct MlpShape {
  std::int64_t M = 0;            ///< rows (tokens)
  std::int64_t hidden = 0;       ///< model width
  std::int64_t intermediate = 0; ///< MLP width
};

/// How swiglu_mlp tiles its work: rows of x per pass and intermediate columns per tile.
struct MlpTiling {
  std::int64_t row_tile = 0; ///< rows of x per pass (M unless the budget forces fewer)
  std::int64_t inter_tile =
      0; ///< intermediate columns per tile (multiple of 32 and of the down group)
  std::int64_t buffer_bytes = 0; ///< bytes of the [row_tile, inter_tile] gate + up buffers
};

/// Chooses the tiling for `budget_bytes` of local memory: the widest intermediate tile for all M
/// rows, else the unit tile with as many rows as fit. Throws Error(internal) if even one
/// row of the unit tile (8 * unit bytes) does not fit, or the weights do not match the shape.
inline MlpTiling plan_mlp_tiling(MlpShape s, const PackedWeights& gate, const PackedWeights& up,
                                 const PackedWeights& down, std::size_t budget_bytes) {
  if (s.M <= 0 || s.hidden <= 0 || s.intermediate <= 0)
    throw_error(ErrorKind::internal, "", "swiglu_mlp: shape must be positive");
  auto check = [&](const char* name, const PackedWeights& w, std::int64_t K, std::int64_t N) {
    if (w.K != K || w.N != N)
      throw_error(ErrorKind::internal, "",
                  std::string("swiglu_mlp: ") + name + " weight is [" + std::to_string(w.K) + ", " +
                      std::to_string(w.N) + "], expected [" + std::to_string(K) + ", " +
                      std::to_string(N) + "]");
  };
  check("gate", gate, s.hidden, s.intermediate);
  check("up", up, s.hidden, s.intermediate);
  check("down", down, s.intermediate, s.hidden);
  if (!down.k_perm.empty())
    throw_error(ErrorKind::internal, "",
                "swiglu_mlp: the down weight has an act-order row permutation; fold it into the "
                "gate/up columns at repack time (the tiled MLP needs natural intermediate order)");
  if (down.stored_rows() != s.intermediate)
    throw_error(ErrorKind::internal, "",
                "swiglu_mlp: intermediate=" + std::to_string(s.intermediate) +
                    " must be a multiple of the down weight's row group (" +
                    std::to_string(row_group(down.format)) + " for " +
                    std::string(format_name(down.format)) + ")");
  const std::int64_t gd = is_quantized(down.format) ? down.group_rows() : 1;
  const std::int64_t unit = std::min(s.intermediate, std::lcm<std::int64_t>(kPanelCols, gd));
  const std::int64_t per_col_row = 2 * static_cast<std::int64_t>(sizeof(float));
  const auto budget = static_cast<std::int64_t>(budget_bytes);
  MlpTiling t;
  const std::int64_t cols_fit = budget / (per_col_row * s.M) / unit * unit;
  if (cols_fit >= unit) {
    t.row_tile = s.M;
    t.inter_tile = std::min(cols_fit, (s.intermediate + unit - 1) / unit * unit);
    t.inter_tile = std::min(t.inter_tile, s.intermediate);
  } else {
    t.inter_tile = unit;
    t.row_tile = budget / (per_col_row * unit);
    if (t.row_tile < 1)
      throw_error(ErrorKind::internal, "",
                  "swiglu_mlp: local-memory budget of " + std::to_string(budget_bytes) +
                      " bytes is below one row of the " + "smallest intermediate tile (" +
                      std::to_string(unit) + " columns = " + std::to_string(per_col_row * unit) +
                      " bytes)");
  }
  t.buffer_bytes = per_col_row * t.row_tile * t.inter_tile;
  return t;
}

namespace detail {

/// exp(x) for x <= 88.7 with relative error < 2e-7 (Cody-Waite split + degree-6 polynomial);
/// branch-free so the loop in silu_mul_body vectorizes; x < -87.3 flushes to 0.
inline float exp_poly(float x) {
  x = std::min(88.7f, std::max(-87.3f, x));
  const float t = x * 1.44269504088896341f;
  const float n = std::nearbyint(t);
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

/// g[i] = silu(g[i]) * u[i] for i < n.
__attribute__((always_inline)) inline void silu_mul_body(float* g, const float* u, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    g[i] = g[i] / (1.0f + exp_poly(-g[i])) * u[i];
}
TPULLM_TARGET_AVX512 inline void silu_mul_avx512(float* g, const float* u, std::int64_t n) {
  silu_mul_body(g, u, n);
}
TPULLM_TARGET_AVX2 inline void silu_mul_avx2(float* g, const float* u, std::int64_t n) {
  silu_mul_body(g, u, n);
}
/// silu_mul_body on the portable path's xsimd vectors (exp2 polynomial of portable_simd.hpp).
/// Not inlined: inlined into a caller whose sizes are constants, GCC 12 reports a bogus
/// -Waggressive-loop-optimizations on the tail loop.
__attribute__((noinline)) inline void silu_mul_portable(float* g, const float* u, std::int64_t n) {
  const PVec nlog2e(-1.4426950408889634f), one(1.f);
  std::int64_t i = 0;
  for (; i + kPW <= n; i += kPW) {
    const PVec v = pv_load(g + i);
    const PVec e = pv_exp2(pv_min(v * nlog2e, PVec(126.f)));
    pv_store(g + i, v / (one + e) * pv_load(u + i));
  }
  for (; i < n; ++i)
    g[i] = g[i] / (1.0f + exp_poly(-g[i])) * u[i];
}

/// swiglu_mlp's gate (a) and up (b) buffers, [row_tile, inter_tile] each, of this thread
/// (matmul_common.hpp's ScratchPair; per call, a 16-token prompt of the 1B shape mapped two fresh
/// 512 KiB buffers a layer).
inline ScratchPair& mlp_scratch() {
  thread_local ScratchPair s;
  return s;
}

inline void silu_mul(float* g, const float* u, std::int64_t n) {
  switch (active_isa()) {
  case Isa::portable:
    silu_mul_portable(g, u, n);
    return;
  case Isa::avx2:
    silu_mul_avx2(g, u, n);
    return;
  case Isa::amx:
  case Isa::avx512:
    silu_mul_avx512(g, u, n);
    return;
  }
}

} // namespace detail

/// out = down( silu(x · gate) * (x · up) ). x: [M, hidden] row-major f32; gate, up: packed
/// [hidden, intermediate]; down: packed [intermediate, hidden] (no act-order permutation);
/// out: [M, hidden] row-major f32, fully overwritten. The [rows, intermediate] activation is
/// tiled so its buffers stay within `local_memory_bytes` (see plan_mlp_tiling). `split` is
/// passed to every product (cols: by 32-column panels; rows: by rows for M > 4). `precision`:
/// how the products over integer weights may treat their input (XPrecision, exact by default).
inline void swiglu_mlp(std::span<const float> x, const PackedWeights& gate, const PackedWeights& up,
                       const PackedWeights& down, std::span<float> out, MlpShape s,
                       std::size_t local_memory_bytes, CoreSplit split = {},
                       XPrecision precision = XPrecision::exact) {
  const MlpTiling t = plan_mlp_tiling(s, gate, up, down, local_memory_bytes);
  for (const PackedWeights* w : {&gate, &up, &down})
    detail::check_weights("swiglu_mlp", *w);
  if (static_cast<std::int64_t>(x.size()) < s.M * s.hidden ||
      static_cast<std::int64_t>(out.size()) < s.M * s.hidden)
    throw_error(ErrorKind::internal, "", "swiglu_mlp: x or out span is smaller than [M, hidden]");
  const std::int64_t H = s.hidden, I = s.intermediate;
  // act-order / padded gate and up read x in their own packed row order
  std::vector<float> xg, xu;
  const float* xgate = detail::prepare_x(x.data(), s.M, gate, xg);
  const float* xup = detail::prepare_x(x.data(), s.M, up, xu);
  const std::int64_t ldg = gate.stored_rows(), ldu = up.stored_rows();
  // the VNNI kernels' digits of x, built once for gate and up (when they run: M <= 4, or any M
  // with XPrecision::int8; and no tiling of rows)
  const LinearInput xin(x, s.M, H, precision);
  const bool whole = t.row_tile == s.M;
  const detail::XDigits* pre_g = whole ? xin.digits_for(gate) : nullptr;
  const detail::XDigits* pre_u = whole ? xin.digits_for(up) : nullptr;
  const auto tile = static_cast<std::size_t>(t.row_tile * t.inter_tile);
  detail::ScratchPair& sc = detail::mlp_scratch();
  float* const gbuf = sc.a(tile);
  float* const ubuf = sc.b(tile);
  for (std::int64_t m0 = 0; m0 < s.M; m0 += t.row_tile) {
    const std::int64_t mr = std::min(t.row_tile, s.M - m0);
    for (std::int64_t i0 = 0; i0 < I; i0 += t.inter_tile) {
      const std::int64_t i1 = std::min(I, i0 + t.inter_tile), ti = i1 - i0;
      const std::int64_t pa = i0 / kPanelCols, pb = (i1 + kPanelCols - 1) / kPanelCols;
      detail::LinearArgs a;
      a.M = mr;
      a.xprec = precision;
      a.ldy = ti;
      a.x = xgate + m0 * ldg;
      a.ldx = ldg;
      a.v = {&gate, 0, ldg, pa, pb};
      a.y = gbuf;
      detail::linear_view(a, split, pre_g);
      a.x = xup + m0 * ldu;
      a.ldx = ldu;
      a.v = {&up, 0, ldu, pa, pb};
      a.y = ubuf;
      detail::linear_view(a, split, pre_u);
      for (std::int64_t r = 0; r < mr; ++r)
        detail::silu_mul(gbuf + r * ti, ubuf + r * ti, ti);
      detail::LinearArgs d;
      d.M = mr;
      d.xprec = precision;
      d.x = gbuf;
      d.ldx = ti;
      d.v = {&down, i0, i1, 0, down.panels()};
      d.y = out.data() + m0 * H;
      d.ldy = H;
      d.accumulate = i0 > 0;
      detail::linear_view(d, split);
    }
  }
}

} // namespace tpullm::kernels
