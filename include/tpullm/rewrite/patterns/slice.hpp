#pragma once
/// Canonicalization of top.Slice:
///   slice(x, offsets = 0..., sizes = shape(x)) -> x

#include "tpullm/rewrite/pattern.hpp"

namespace tpullm::rewrite::patterns {

/// top.Slice covering the whole input folds to its input.
struct SliceWhole : OpPattern<ir::top::SliceOp> {
  SliceWhole() : OpPattern("slice-whole") {}
  bool rewrite_op(ir::Operation* op, const ir::top::SliceOp& s, Rewriter& rw) const override {
    ir::Value* x = op->operand(ir::top::SliceOp::x);
    if (s.sizes != x->type().shape)
      return false;
    for (auto o : s.offsets)
      if (o != 0)
        return false;
    rw.replace_op(op, x);
    return true;
  }
};

} // namespace tpullm::rewrite::patterns
