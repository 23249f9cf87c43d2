#pragma once
/// The core-split plan of an op (the compiler side; kernels/core_split.hpp is how a kernel
/// executes one): the one core-split policy, how an ungrouped Tpu op divides its work across
/// `cores`, from its policy's SplitRule (ir/op_policy.hpp). The tiler records the result in each
/// op's plan; the executor applies the same function only to instructions that carry no plan (a
/// function that never went through layer-group), so planned and unplanned runs split alike.

#include <cstdint>

#include "tpullm/ir/op_kind.hpp"
#include "tpullm/ir/plan.hpp"
#include "tpullm/ir/type.hpp"

namespace tpullm::tiling {

/// Activations of at most this many rows run a projection as a GEMV, split over columns.
inline constexpr std::int64_t kGemvSplitRows = 4;
/// rows_if_large splits only with at least this many rows per core.
inline constexpr std::int64_t kMinRowsPerCore = 64;

/// The core split of Tpu op `op` on `cores` cores. `operand_type(i)` returns the TensorType of
/// operand i (`num_operands` of them).
template <class OperandType>
ir::SplitPlan core_split(const ir::OpVariant& op, std::size_t num_operands,
                         OperandType&& operand_type, std::int64_t cores) {
  if (cores <= 1 || num_operands == 0)
    return {};
  const ir::OpPolicy& p = ir::policy_of(static_cast<ir::OpKind>(op.index()));
  switch (p.split) {
  case ir::SplitRule::none:
    return {};
  case ir::SplitRule::gemm:
    return {ir::matrix_rows(operand_type(0)) <= kGemvSplitRows ? ir::SliceDim::cols
                                                               : ir::SliceDim::rows,
            cores};
  case ir::SplitRule::attention: {
    // Decoding one token: heads, when the head operand (axis 2) has one per core at least.
    const auto& heads = operand_type(static_cast<std::size_t>(p.head_operand));
    if (operand_type(0).shape.at(1) == 1 && heads.shape.at(2) >= cores)
      return {ir::SliceDim::heads, cores};
    return {ir::SliceDim::rows, cores};
  }
  case ir::SplitRule::rows_if_large:
    return ir::matrix_rows(operand_type(static_cast<std::size_t>(p.split_operand))) >=
                   kMinRowsPerCore * cores
               ? ir::SplitPlan{ir::SliceDim::rows, cores}
               : ir::SplitPlan{};
  }
  return {};
}

} // namespace tpullm::tiling
