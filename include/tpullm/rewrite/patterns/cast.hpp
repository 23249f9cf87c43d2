#pragma once
/// Canonicalization of top.Cast:
///   cast(x) to x's own dtype               -> x

#include "tpullm/rewrite/pattern.hpp"

namespace tpullm::rewrite::patterns {

/// top.Cast to the dtype its input already has folds to its input.
struct CastToSameType : OpPattern<ir::top::CastOp> {
  CastToSameType() : OpPattern("cast-to-same-type") {}
  bool rewrite_op(ir::Operation* op, const ir::top::CastOp& c, Rewriter& rw) const override {
    if (c.dtype != op->operand(ir::top::CastOp::x)->type().dtype)
      return false;
    rw.replace_op(op, op->operand(ir::top::CastOp::x));
    return true;
  }
};

} // namespace tpullm::rewrite::patterns
