#pragma once
/// Routed mixture-of-experts MLP (top.MoE / tpu.MoE):
///   p   = softmax(x · router) over E experts, per row (the router product in f32, the
///         softmax in f64), the top_k largest (lower expert first on ties), divided by their
///         sum when `renormalize`;
///   out = sum over the chosen e of p_e * swiglu_e(x).
/// The rows are grouped by expert with a counting sort of the (row, expert) pairs: each expert
/// with rows runs one swiglu_mlp (a GEMM, or the GEMV path for <= 4 rows) over its gathered rows,
/// and its outputs are scattered back with their weights (a row's contributions are added in
/// expert order). An expert no row chose is never read, so a one-row decode step reads the
/// router and exactly top_k experts' weights.
/// The scratch (moe_scratch_bytes) is sized for the worst case, not for the routing: every row
/// may choose the same expert, so one expert's gathered rows take [M, hidden].

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tpullm/kernels/int8_linear.hpp"
#include "tpullm/kernels/matmul.hpp"
#include "tpullm/kernels/mlp.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Shape of a routed MLP: x, out [M, hidden]; router [hidden, experts]; each expert's gate / up
/// [hidden, intermediate] and down [intermediate, hidden].
struct MoeShape {
  std::int64_t M = 0;            ///< rows (tokens)
  std::int64_t hidden = 0;       ///< model width
  std::int64_t intermediate = 0; ///< one expert's MLP width
  std::int64_t experts = 0;      ///< E
  std::int64_t top_k = 0;        ///< experts per row, 1 <= top_k <= E
  bool renormalize = false;      ///< divide the chosen probabilities by their sum
};

/// One expert's packed SwiGLU weights (views; they must outlive the call).
struct MoeExpert {
  const PackedWeights* gate = nullptr; ///< [hidden, intermediate]
  const PackedWeights* up = nullptr;   ///< [hidden, intermediate]
  const PackedWeights* down = nullptr; ///< [intermediate, hidden]
};

/// The routing of M rows: for row t its j-th choice (descending probability) is expert
/// `expert[t * top_k + j]` with weight `weight[t * top_k + j]`.
struct MoeRouting {
  std::vector<std::int32_t> expert; ///< [M, top_k]
  std::vector<float> weight;        ///< [M, top_k]
};

/// Routing from router logits [M, E] (row-major f32): softmax in f64 per row, the top_k largest
/// (lower index first on equal logits), renormalised when asked. Throws Error(internal) on a bad
/// shape (the runtime's plan is checked before), ModelValueError (invalid input) on a non-finite
/// logit: the model's values, not the call's shapes (NaN would make the choice meaningless).
inline MoeRouting moe_route(std::span<const float> logits, const MoeShape& s) {
  if (s.M <= 0 || s.experts <= 0 || s.top_k < 1 || s.top_k > s.experts)
    throw_error(ErrorKind::internal, "",
                "moe_route: need M > 0 and 1 <= top_k = " + std::to_string(s.top_k) +
                    " <= experts = " + std::to_string(s.experts));
  if (static_cast<std::int64_t>(logits.size()) < s.M * s.experts)
    throw_error(ErrorKind::internal, "", "moe_route: logits span is smaller than [M, experts]");
  const std::int64_t E = s.experts, k = s.top_k;
  MoeRouting r;
  r.expert.resize(static_cast<std::size_t>(s.M * k));
  r.weight.resize(static_cast<std::size_t>(s.M * k));
  std::vector<std::int32_t> order(static_cast<std::size_t>(E));
  std::vector<double> pk(static_cast<std::size_t>(k));
  for (std::int64_t t = 0; t < s.M; ++t) {
    const float* l = logits.data() + t * E;
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t e = 0; e < E; ++e) {
      if (!std::isfinite(l[e]))
        throw ModelValueError("", str_cat("the router logit of row ", t, ", expert ", e, " is ",
                                          std::isnan(l[e]) ? "NaN" : "infinite",
                                          ": the model's weights (or the layers before) produce "
                                          "values that are not finite"));
      mx = std::max(mx, l[e]);
    }
    double sum = 0;
    for (std::int64_t e = 0; e < E; ++e)
      sum += std::exp(static_cast<double>(l[e]) - mx);
    for (std::int64_t e = 0; e < E; ++e)
      order[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(e);
    std::partial_sort(
        order.begin(), order.begin() + k, order.end(),
        [&](std::int32_t a, std::int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    double chosen = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      pk[static_cast<std::size_t>(j)] =
          std::exp(static_cast<double>(l[order[static_cast<std::size_t>(j)]]) - mx) / sum;
      chosen += pk[static_cast<std::size_t>(j)];
    }
    for (std::int64_t j = 0; j < k; ++j) {
      const auto at = static_cast<std::size_t>(t * k + j);
      r.expert[at] = order[static_cast<std::size_t>(j)];
      r.weight[at] = static_cast<float>(s.renormalize ? pk[static_cast<std::size_t>(j)] / chosen
                                                      : pk[static_cast<std::size_t>(j)]);
    }
  }
  return r;
}

/// Scratch bytes moe_mlp allocates for `s` besides the experts' own MLP buffers: the logits
/// [M, E], one expert's gathered rows and outputs (2 x [M, hidden] f32: the worst case, every
/// row routed to the same expert), the routing and the sorted pairs (M * top_k each) and the
/// expert offsets; fixed by the shape, whatever the routing.
inline std::int64_t moe_scratch_bytes(const MoeShape& s) {
  const std::int64_t pairs = s.M * s.top_k;
  return 4 * (s.M * s.experts + 2 * s.M * s.hidden) + 4 * 4 * pairs + 4 * (2 * s.experts + 1);
}

namespace detail {
/// The split of one product with `rows` rows: columns for a GEMV (<= 4 rows), else rows.
inline CoreSplit moe_split(const CoreSplit& split, std::int64_t rows) {
  if (split.parts <= 1 || split.dim == SplitDim::none)
    return split;
  return {rows <= kGemvMaxRows ? SplitDim::cols : SplitDim::rows, split.parts};
}

/// moe_mlp's gathered rows of one expert (a) and their MLP results (b), [M, hidden] each, of
/// this thread (matmul_common.hpp's ScratchPair: no fresh mapping and its page faults per prompt
/// and layer).
inline ScratchPair& moe_scratch() {
  thread_local ScratchPair s;
  return s;
}
} // namespace detail

/// out = the routed MLP of x (see the header). x, out: [M, hidden] row-major f32 (out fully
/// overwritten; it must not alias x); router: packed [hidden, experts] (f32 for exact routing,
/// any packed format accepted); experts: E entries, each expert's weights in any packed format.
/// `local_memory_bytes` is each expert MLP's tiling budget (swiglu_mlp); `split` divides every
/// product across cores (columns for <= 4 rows, rows otherwise). Throws Error(internal) on
/// shape mismatch, ModelValueError on a non-finite router logit (moe_route). Returns the routing it
/// used (tests and statistics read it). `w8a8` given (W8A8, `--mode int8`): every expert runs
/// swiglu_mlp_w8a8 with that activation quantization for gate / up and for down (its weights int8
/// per channel); the router stays as packed. A dynamic per-row scale sees the same row whichever
/// other rows chose the expert. (Summation order: a row's chosen experts are added in ascending
/// expert index.) `precision` (without `w8a8`): how the experts' products over integer weights
/// may treat their input (XPrecision, exact by default; the router always reads x exactly).
inline MoeRouting moe_mlp(std::span<const float> x, const PackedWeights& router,
                          std::span<const MoeExpert> experts, std::span<float> out, MoeShape s,
                          std::size_t local_memory_bytes, CoreSplit split = {},
                          std::optional<ActQuant> w8a8 = std::nullopt,
                          XPrecision precision = XPrecision::exact) {
  const std::int64_t M = s.M, H = s.hidden, E = s.experts, k = s.top_k;
  if (M <= 0 || H <= 0 || s.intermediate <= 0 || E <= 0 || k < 1 || k > E)
    throw_error(ErrorKind::internal, "",
                "moe_mlp: need positive M, hidden, intermediate, experts and "
                "1 <= top_k <= experts");
  if (static_cast<std::int64_t>(experts.size()) != E)
    throw_error(ErrorKind::internal, "",
                "moe_mlp: " + std::to_string(experts.size()) + " experts given, shape says " +
                    std::to_string(E));
  if (router.K != H || router.N != E)
    throw_error(ErrorKind::internal, "",
                "moe_mlp: router is [" + std::to_string(router.K) + ", " +
                    std::to_string(router.N) + "], expected [" + std::to_string(H) + ", " +
                    std::to_string(E) + "]");
  for (std::int64_t e = 0; e < E; ++e) {
    const MoeExpert& w = experts[static_cast<std::size_t>(e)];
    if (!w.gate || !w.up || !w.down)
      throw_error(ErrorKind::internal, "",
                  "moe_mlp: expert " + std::to_string(e) + " has no weights");
    const std::int64_t I = s.intermediate;
    if (w.gate->K != H || w.gate->N != I || w.up->K != H || w.up->N != I || w.down->K != I ||
        w.down->N != H)
      throw_error(ErrorKind::internal, "",
                  "moe_mlp: expert " + std::to_string(e) + " weights do not match hidden " +
                      std::to_string(H) + " / intermediate " + std::to_string(I));
  }
  if (static_cast<std::int64_t>(x.size()) < M * H || static_cast<std::int64_t>(out.size()) < M * H)
    throw_error(ErrorKind::internal, "", "moe_mlp: x or out span is smaller than [M, hidden]");

  // 1. the router in f32, then the routing
  std::vector<float> logits(static_cast<std::size_t>(M * E));
  linear(x.first(static_cast<std::size_t>(M * H)), router, {}, logits, {M, H, E},
         detail::moe_split(split, M));
  MoeRouting r = moe_route(logits, s);

  // 2. counting sort of the (row, choice) pairs by expert: pairs [start[e], start[e + 1]) are
  //    expert e's, in row order
  std::vector<std::int32_t> start(static_cast<std::size_t>(E + 1), 0);
  for (std::int32_t e : r.expert)
    ++start[static_cast<std::size_t>(e) + 1];
  for (std::int64_t e = 0; e < E; ++e)
    start[static_cast<std::size_t>(e + 1)] += start[static_cast<std::size_t>(e)];
  std::vector<std::int32_t> fill(start.begin(), start.end() - 1);
  std::vector<std::int32_t> pair_row(static_cast<std::size_t>(M * k));
  std::vector<float> pair_weight(static_cast<std::size_t>(M * k));
  for (std::int64_t t = 0; t < M; ++t)
    for (std::int64_t j = 0; j < k; ++j) {
      const auto pair = static_cast<std::size_t>(t * k + j);
      const auto at = static_cast<std::size_t>(fill[static_cast<std::size_t>(r.expert[pair])]++);
      pair_row[at] = static_cast<std::int32_t>(t);
      pair_weight[at] = r.weight[pair];
    }

  // 3. per expert with rows: gather them, one MLP over all of them, scatter back weighted.
  //    An expert has at most M rows (a row chooses an expert once): the worst case, every row
  //    to one expert, is what the two [M, hidden] buffers hold. Experts nobody chose are not
  //    touched.
  detail::ScratchPair& sc = detail::moe_scratch();
  float* const xs = sc.a(static_cast<std::size_t>(M * H));
  float* const ys = sc.b(static_cast<std::size_t>(M * H));
  std::fill_n(out.data(), M * H, 0.0f);
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t p0 = start[static_cast<std::size_t>(e)];
    const std::int64_t rows = start[static_cast<std::size_t>(e + 1)] - p0;
    if (rows == 0)
      continue;
    for (std::int64_t i = 0; i < rows; ++i)
      std::copy_n(x.data() + std::int64_t{pair_row[static_cast<std::size_t>(p0 + i)]} * H, H,
                  xs + i * H);
    const MoeExpert& w = experts[static_cast<std::size_t>(e)];
    const std::span<const float> xe(xs, static_cast<std::size_t>(rows * H));
    const std::span<float> ye(ys, static_cast<std::size_t>(rows * H));
    if (w8a8)
      swiglu_mlp_w8a8(xe, *w.gate, *w.up, *w.down, ye, {rows, H, s.intermediate}, *w8a8, *w8a8,
                      local_memory_bytes, detail::moe_split(split, rows));
    else
      swiglu_mlp(xe, *w.gate, *w.up, *w.down, ye, {rows, H, s.intermediate}, local_memory_bytes,
                 detail::moe_split(split, rows), precision);
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto pi = static_cast<std::size_t>(p0 + i);
      const float wi = pair_weight[pi];
      float* o = out.data() + std::int64_t{pair_row[pi]} * H;
      const float* y = ys + i * H;
      for (std::int64_t h = 0; h < H; ++h)
        o[h] += wi * y[h];
    }
  }
  return r;
}

} // namespace tpullm::kernels
