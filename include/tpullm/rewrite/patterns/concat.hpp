#pragma once
/// Canonicalization of top.Concat:
///   concat(x)                              -> x

#include "tpullm/rewrite/pattern.hpp"

namespace tpullm::rewrite::patterns {

/// top.Concat of a single operand folds to that operand.
struct ConcatSingle : OpPattern<ir::top::ConcatOp> {
  ConcatSingle() : OpPattern("concat-single") {}
  bool rewrite_op(ir::Operation* op, const ir::top::ConcatOp&, Rewriter& rw) const override {
    if (op->num_operands() != 1)
      return false;
    rw.replace_op(op, op->operand(0));
    return true;
  }
};

} // namespace tpullm::rewrite::patterns
