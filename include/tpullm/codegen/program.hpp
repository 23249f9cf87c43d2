#pragma once
/// A planned Tpu function as the executor runs it and the bundle stores it: a flat list of
/// instructions, each one Tpu op with its attributes, its plan, and for every operand and
/// result the type and the buffer (region, offset, size) its bytes live in. The IR is not
/// needed to run a Program: the runtime only sees Programs and weight bytes.

#include <cstdint>
#include <string>
#include <vector>

#include "tpullm/ir/function.hpp"

namespace tpullm::codegen {

/// One operand or result of an instruction: what it holds and where.
struct TensorRef {
  ir::TensorType type; ///< shape, element type, layout (panels for packed weights)
  ir::Buffer buffer;   ///< where its bytes live (region weight: see `weight`)
  std::string weight;  ///< the weight symbol when buffer.region == weight, else empty
};

/// Rows of a [1, L, ...] tensor as layer-group row tiles count them (ir/type.hpp).
using ir::rows_of;

/// One Tpu op ready to run.
struct Instr {
  ir::OpVariant op;                ///< the Tpu op struct: kind and attributes
  std::vector<TensorRef> operands; ///< in op order
  std::vector<TensorRef> results;  ///< in op order
  ir::OpPlan plan;                 ///< layer group, tile, core split (default: ungrouped)
  bool planned = false;            ///< the op had a plan (else the executor picks a split)
  std::string where;               ///< "@fn: tpu.MatMul at file:line" for messages

  ir::OpKind kind() const { return static_cast<ir::OpKind>(op.index()); }
};

/// A planned function: arguments, results, instructions in order.
struct Program {
  std::string name;                ///< function name (block_3, lm_head, ...)
  ir::FunctionInfo info;           ///< stage, layer, memory plan (arena, local, kv geometry)
  std::vector<TensorRef> args;     ///< argument types and buffers (input or kv regions)
  std::vector<TensorRef> results;  ///< where each returned value lives when the function ends
  std::vector<Instr> instrs;       ///< Tpu ops in program order (builtin ops dropped)
  std::int64_t positions_arg = -1; ///< argument holding position_ids [1, L] i32, or -1
};

/// The Program of planned Tpu function `f` (plan-memory must have run). Throws Error naming
/// the function when an op is not a Tpu op or a value has no buffer.
Program make_program(const ir::Function& f);

} // namespace tpullm::codegen
