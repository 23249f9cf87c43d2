// Bytes of weights a decode step reads (step_bytes.hpp).
#include "step_bytes.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <variant>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/ir/tpu_ops.hpp"
#include "tpullm/runtime/kv_region.hpp"

namespace tpullm::cli {

std::int64_t decode_weight_bytes(const bundle::Bundle& b, std::int64_t S) {
  std::set<std::string> names, gathered;
  std::int64_t bytes = 0;
  const auto& m = b.model();
  for (const auto& p : b.programs()) {
    // A tensor-parallel bundle: rank 0's share of every layer (its attention and MLP halves).
    using N = frontend::StageNames;
    const std::int64_t l = p.info.layer;
    const bool head = m.tensor_parallel > 1 ? p.name == N::tp_head(0, 1) || p.name == "final_norm"
                                            : p.info.stage == ir::StageKind::lm_head;
    const bool use =
        (p.info.stage == ir::StageKind::decode &&
         (p.name == N::block_cache(l, S) || p.name == N::tp_attention(0, N::block_cache(l, S)) ||
          p.name == N::tp_mlp(0, l, 1))) ||
        head || p.name == "embedding_cache";
    if (!use)
      continue;
    for (const auto& in : p.instrs)
      for (std::size_t i = 0; i < in.operands.size(); ++i) {
        const auto& r = in.operands[i];
        if (r.buffer.region != ir::Region::weight)
          continue;
        if (in.kind() == ir::OpKind::tpu_Embedding) {
          if (gathered.insert(r.weight).second)
            bytes += r.type.byte_size() / std::max<std::int64_t>(1, m.vocab);
          continue;
        }
        if (names.insert(r.weight).second) {
          if (const auto* moe = std::get_if<ir::tpu::MoEOp>(&in.op);
              moe && i >= ir::tpu::MoEOp::first_expert) {
            // A routed MLP reads its router and top_k of its experts: each expert's share.
            for (const auto& part : b.find_weight(r.weight)->parts)
              bytes += static_cast<std::int64_t>(part.bytes.size()) * moe->top_k / moe->experts;
          } else
            for (const auto& part : b.find_weight(r.weight)->parts) // checked on open
              bytes += static_cast<std::int64_t>(part.bytes.size());
        }
      }
  }
  return bytes;
}

std::map<std::int64_t, std::int64_t> sliding_windows(const bundle::Bundle& b) {
  std::map<std::int64_t, std::int64_t> w;
  const auto windows = runtime::layer_windows(b.programs(), b.model().layers);
  for (std::size_t l = 0; l < windows.size(); ++l)
    if (windows[l] > 0)
      w[static_cast<std::int64_t>(l)] = windows[l];
  return w;
}

double decode_kv_bytes(const bundle::Bundle& b, const std::map<std::int64_t, std::int64_t>& windows,
                       std::int64_t history) {
  double positions = 0;
  for (std::int64_t layer = 0; layer < b.model().layers; ++layer) {
    const auto it = windows.find(layer);
    positions += static_cast<double>(
        it == windows.end() ? history : std::min<std::int64_t>(history, it->second));
  }
  return 2.0 * positions * static_cast<double>(b.kv().row_bytes);
}

} // namespace tpullm::cli
