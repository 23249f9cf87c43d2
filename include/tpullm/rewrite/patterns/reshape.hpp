#pragma once
/// Canonicalization of top.Reshape:
///   reshape(x) to x's own shape            -> x
///   reshape(reshape(x, s1), s2)            -> reshape(x, s2)

#include "tpullm/rewrite/pattern.hpp"

namespace tpullm::rewrite::patterns {

/// top.Reshape whose target shape equals its input shape folds to its input.
struct ReshapeToSameShape : OpPattern<ir::top::ReshapeOp> {
  ReshapeToSameShape() : OpPattern("reshape-to-same-shape") {}
  bool rewrite_op(ir::Operation* op, const ir::top::ReshapeOp&, Rewriter& rw) const override {
    ir::Value* x = op->operand(ir::top::ReshapeOp::x);
    if (!(x->type() == op->result(0)->type()))
      return false;
    rw.replace_op(op, x);
    return true;
  }
};

/// top.Reshape of a top.Reshape reads the inner reshape's input directly.
struct ReshapeOfReshape : OpPattern<ir::top::ReshapeOp> {
  ReshapeOfReshape() : OpPattern("reshape-of-reshape") {}
  bool rewrite_op(ir::Operation* op, const ir::top::ReshapeOp&, Rewriter& rw) const override {
    ir::Operation* inner = op->operand(ir::top::ReshapeOp::x)->defining_op();
    if (!inner || !inner->is<ir::top::ReshapeOp>())
      return false;
    rw.set_operand(op, ir::top::ReshapeOp::x, inner->operand(ir::top::ReshapeOp::x));
    return true;
  }
};

} // namespace tpullm::rewrite::patterns
