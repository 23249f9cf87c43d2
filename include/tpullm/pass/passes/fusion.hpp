#pragma once
/// Fusion rewrites on Tpu functions (after lower-to-tpu), each a pattern run by the greedy
/// driver and each kept in the default pipeline only because a benchmark shows it helps
/// (bench/bench_backend.cpp, figures in docs/backend.md):
///   fuse-add-rmsnorm     tpu.RMSNorm(tpu.Add(x, r)) -> tpu.AddRMSNorm(x, r): the residual add
///                        and the next norm in one pass over the rows (the sum stays available)
///   fuse-qkv             tpu.MatMul(x, Wq), (x, Wk), (x, Wv) on the same x -> one MatMul over
///                        the weights concatenated along N, and contiguous tpu.Slice views of
///                        its result (decode-sized x only: `max-rows`)
///   fuse-lm-head-argmax  tpu.ArgMax(tpu.MatMul(x, W)) -> tpu.MatMulArgMax(x, W): greedy
///                        lm_head without materializing the logits
/// (RoPE applied while writing the KV slot is a placement decision: plan-memory{kv-in-place}.)

#include <cstdint>

#include "tpullm/ir/module.hpp"
#include "tpullm/pass/options.hpp"
#include "tpullm/pass/pass.hpp"

namespace tpullm::conversion {
class WeightConverter;
}

namespace tpullm::pass {

/// Options of `fuse-qkv`.
struct FuseQkvOptions {
  std::int64_t max_rows = 1; ///< fuse only when x has at most this many rows
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("max-rows", s.max_rows,
      "fuse only projections of x with at most this many rows (their slices are views)");
  }
};

/// tpu.RMSNorm(tpu.Add(x, r)) -> tpu.AddRMSNorm(x, r, gamma).
void run_fuse_add_rmsnorm(ir::Module& m, const NoOptions&);
/// q/k/v projections of one x -> one MatMul and slices, with the context's converter (a private
/// one when it has none).
void run_fuse_qkv(ir::Module& m, const FuseQkvOptions& o, const PassContext& ctx);
/// fuse-qkv with the compilation's shared converter, so the concatenated weights of a layer are
/// built once for every function that reads them.
void fuse_qkv(ir::Module& m, const FuseQkvOptions& o, conversion::WeightConverter* converter);
/// tpu.ArgMax(tpu.MatMul(x, W)) -> tpu.MatMulArgMax(x, W).
void run_fuse_lm_head_argmax(ir::Module& m, const NoOptions&);

} // namespace tpullm::pass
