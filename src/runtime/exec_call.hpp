#pragma once
// Internal to the executor: what an instruction handler sees while it runs (its operands'
// addresses in the regions of this run, the rows of its tile, its core split).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tpullm/codegen/program.hpp"
#include "tpullm/kernels/core_split.hpp"
#include "tpullm/kernels/packed_weights.hpp"

namespace tpullm::runtime::detail {

/// Base addresses of one run.
struct Regions {
  std::span<const std::span<const std::byte>> inputs;
  std::vector<std::span<std::byte>> outputs; ///< caller's spans or the executor's staging
  std::byte* kv = nullptr;
  std::byte* arena = nullptr;
  std::int64_t pos0 = 0; ///< position_ids[0] of this run
  std::int64_t kv_capacity = 0;
  std::int64_t local_stride = 0; ///< bytes of one core's local scratch
  std::byte* local = nullptr;    ///< core 0's local scratch (core c at + c * local_stride)
  /// Batched decode (a program whose position_ids are [B, 1], B > 1): row b's conversation is
  /// slot row_slots[b], its caches at kv_all + row_slots[b] * slot_bytes; `kv` is unused then.
  std::byte* kv_all = nullptr;             ///< slot 0's caches (the whole KV region)
  std::int64_t slot_bytes = 0;             ///< bytes of one slot's caches
  std::span<const std::int32_t> row_slots; ///< per batch row, its slot (empty: not batched)
  const std::int32_t* row_pos = nullptr;   ///< per batch row, its position
  /// Row b's base in the KV region (its slot's caches), for a batched run.
  std::byte* slot_kv(std::int64_t b) const {
    return kv_all + static_cast<std::int64_t>(row_slots[static_cast<std::size_t>(b)]) * slot_bytes;
  }
};

/// A weight as the handlers need it.
struct WeightRef {
  std::span<const std::byte> bytes;               ///< "data" part (row-major weights)
  const kernels::PackedWeights* packed = nullptr; ///< packed weights, else null
};

/// One instruction being executed, over rows [r0, r1) of its group's tile (or whole).
struct Call {
  const codegen::Instr& in;
  const Regions& reg;
  /// The weights of `in`'s operands, resolved when the program was added (null where the
  /// operand is no weight); weight(name) of an operand's name is then a pointer compare.
  const WeightRef* const* resolved = nullptr;
  /// Any weight by name (a map lookup: for names that are not this instruction's operands).
  std::function<const WeightRef&(const std::string&)> lookup;

  /// The weight `name` (an operand's: resolved once; another: looked up).
  const WeightRef& weight(const std::string& name) const {
    if (resolved)
      for (std::size_t k = 0; k < in.operands.size(); ++k)
        if (&in.operands[k].weight == &name && resolved[k])
          return *resolved[k];
    return lookup(name);
  }
  kernels::CoreSplit split;
  int core = 0;       ///< which core's local scratch
  bool tiled = false; ///< rows [r0, r1) of a row-tiled group
  std::int64_t r0 = 0, r1 = 0, rows_total = 0;
  std::int64_t local_memory = 0; ///< bytes a kernel may use as its own working set budget

  /// Rows of a [1, L, ...] ref, else 0 (ir::rows_of).
  static std::int64_t rows_of(const ir::TensorType& t) { return ir::rows_of(t); }
  /// Whether ref r is cut to this call's rows (a local ref holds just the tile's rows; others
  /// are addressed at row r0).
  bool sliced(const codegen::TensorRef& r) const {
    return tiled && r.buffer.region != ir::Region::weight && rows_of(r.type) == rows_total;
  }
  /// Address of ref r for this call (row-sliced when `slice` and the ref is row-shaped).
  std::byte* addr(const codegen::TensorRef& r, bool slice = true) const;
  std::byte* operand(std::size_t i, bool slice = true) const {
    return addr(in.operands.at(i), slice);
  }
  std::byte* result(std::size_t i, bool slice = true) const {
    return addr(in.results.at(i), slice);
  }
  const float* f32_in(std::size_t i, bool slice = true) const {
    return reinterpret_cast<const float*>(operand(i, slice));
  }
  float* f32_out(std::size_t i = 0, bool slice = true) const {
    return reinterpret_cast<float*>(result(i, slice));
  }
  const std::int32_t* i32_in(std::size_t i, bool slice = true) const {
    return reinterpret_cast<const std::int32_t*>(operand(i, slice));
  }
  /// Rows this call processes of ref r: the tile's rows when sliced, else all of r's rows.
  std::int64_t rows(const codegen::TensorRef& r) const {
    return sliced(r) ? r1 - r0 : rows_of(r.type);
  }
  /// Elements of ref r covered by this call.
  std::int64_t elems(const codegen::TensorRef& r) const {
    const std::int64_t n = r.type.num_elements();
    return sliced(r) ? n / rows_total * (r1 - r0) : n;
  }
};

/// Runs one instruction (exec_ops.cpp). Throws what the kernels throw.
void execute(Call& c);

} // namespace tpullm::runtime::detail
