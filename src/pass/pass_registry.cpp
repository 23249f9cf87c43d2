// Out-of-line definitions of tpullm/pass/pass_registry.hpp (compiled once into tpullm_core).
#include "tpullm/pass/pass_registry.hpp"

namespace tpullm::pass {

const std::vector<PassInfo>& pass_registry() {
  static const std::vector<PassInfo> table = {
      make_pass<CanonicalizeOptions>(
          "canonicalize",
          "fold no-op Reshape/Permute/Slice/Concat/Cast and chains of them; erase dead ops",
          run_canonicalize),
      make_pass<NoOptions>("cse", "merge structurally identical side-effect-free ops", run_cse),
      make_pass<DceOptions>("dce", "erase ops whose results are unused, then unread weights",
                            run_dce),
      make_pass<NoOptions>("fuse-add-rmsnorm",
                           "Tpu: residual add and the next RMSNorm in one op (AddRMSNorm)",
                           run_fuse_add_rmsnorm),
      make_pass<NoOptions>("fuse-lm-head-argmax",
                           "Tpu: greedy lm_head as MatMulArgMax (no logits materialized)",
                           run_fuse_lm_head_argmax),
      make_pass<FuseQkvOptions>(
          "fuse-qkv",
          "Tpu: projections of one decode-sized x in one MatMul over concatenated weights",
          run_fuse_qkv),
      make_bound_pass<conversion::LowerOptions>(
          "lower-to-tpu",
          "translate Top functions into Tpu functions: packed / quantized weights, RoPE by "
          "table gather, the KV cache updated in place",
          conversion::bind_lower_to_tpu),
      make_pass<tiling::LayerGroupOptions>(
          "layer-group",
          "group row-local Tpu ops into layer groups tiled over token rows to fit local "
          "memory (cost model), and give every op a core split",
          tiling::layer_group),
      make_pass<memory::PlanMemoryOptions>(
          "plan-memory",
          "give every value of Tpu functions a buffer: caller spans for inputs and outputs, the "
          "KV cache in place, one activation arena by liveness, local memory per tile",
          memory::plan_memory),
  };
  return table;
}

const PassInfo* find_pass(std::string_view name) {
  for (const auto& p : pass_registry())
    if (p.name == name)
      return &p;
  return nullptr;
}

} // namespace tpullm::pass
