#pragma once
/// The policy of a Tpu op, declared on its struct as `static constexpr OpPolicy policy{...}`:
/// how it tiles over rows, how it splits across cores, whether it is a view or may work in
/// place, which operand carries the positions, and its memory effects. The tiler, the memory
/// planner, codegen and the executor read these facts from the op instead of keeping lists of op
/// kinds; op_kind.hpp checks at compile time that every Tpu op of ops.def declares one.

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace tpullm::ir {

/// How an ungrouped op divides its work across cores (tiling/core_split_plan.hpp applies it).
///   none          : runs on one core
///   gemm          : columns when the activation has at most 4 rows (GEMV), else rows
///   attention     : heads when decoding one token with at least one KV head per core, else rows
///   rows_if_large : rows when `split_operand` has at least 64 rows per core, else one core
enum class SplitRule : std::uint8_t { none, gemm, attention, rows_if_large };

/// What an op does besides computing its results.
///   none      : nothing (dead when its results are unused; CSE may merge it)
///   writes_kv : stores rows into the persistent KV cache
enum class MemoryEffect : std::uint8_t { none, writes_kv };

/// A set of operand indices (bit i = operand i), for OpPolicy's operand lists.
constexpr std::uint32_t operand_set(std::initializer_list<int> indices) {
  std::uint32_t s = 0;
  for (int i : indices)
    s |= std::uint32_t{1} << i;
  return s;
}

/// The operand a view, an offset view, an in-place result or a KV store reads (op structs name
/// it first: KVStoreOp::rows, KVAppendOp::history; tpu_ops.hpp checks).
inline constexpr std::size_t kSourceOperand = 0;

/// The facts about a Tpu op that the tiler, the planner, codegen and the executor need. Operand
/// indices are the op struct's named operands (its `Operand` enum, e.g. FAttentionOp::k).
struct OpPolicy {
  /// Row-local: rows [r0, r1) of its [1, L, ...] result 0 come from rows [r0, r1) of the
  /// operands in `row_operands` (plus whole weights and vectors), so it can join a layer group.
  bool row_local = false;
  std::uint32_t row_operands = 0;    ///< operands that must have the result's L rows
  std::uint32_t vector_operands = 0; ///< of those, the ones that may instead be a rank-1 vector
  /// Operands that must be complete before the first tile: produced outside the op's layer
  /// group (attention's keys and values).
  std::uint32_t before_group = 0;
  SplitRule split = SplitRule::none; ///< core split of the op when ungrouped
  int split_operand = 0;             ///< the operand whose rows rows_if_large counts
  /// SplitRule::attention: the operand whose axis 2 counts the heads a decode split divides
  /// (attention's keys: one KV head per core at least); its tiles are groups of those heads.
  int head_operand = -1;
  bool view = false; ///< result 0 is operand 0's bytes (no compute, no buffer of its own)
  /// Result 0 is a window of operand 0's bytes where the op's `view_offset(operand 0's type)`
  /// gives a byte offset >= 0 (a contiguous Slice), else a copy (op_kind.hpp checks the member).
  bool offset_view = false;
  bool in_place = false; ///< result 0 may overwrite operand 0 when it dies here (same size)
  int positions = -1;    ///< the operand holding position_ids [1, L] i32, or -1
  /// writes_kv: result 0 is operand 0's rows stored in the cache the op names (a KvCacheRef
  /// base: layer and kind; op_kind.hpp refuses a KV-writing op without one).
  MemoryEffect effect = MemoryEffect::none;
  /// The operand that is the KV cache itself (a function argument the planner places in the
  /// cache the op's KvCacheRef names), or -1.
  int kv_cache_operand = -1;
};

} // namespace tpullm::ir
