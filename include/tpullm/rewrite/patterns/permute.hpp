#pragma once
/// Canonicalization of top.Permute:
///   permute(x, [0, 1, ..., n-1])           -> x
///   permute(permute(x, p1), p2)            -> permute(x, c) with c[i] = p1[p2[i]]

#include <cstdint>
#include <vector>

#include "tpullm/rewrite/pattern.hpp"

namespace tpullm::rewrite::patterns {

/// top.Permute with the identity order folds to its input.
struct PermuteIdentity : OpPattern<ir::top::PermuteOp> {
  PermuteIdentity() : OpPattern("permute-identity") {}
  bool rewrite_op(ir::Operation* op, const ir::top::PermuteOp& p, Rewriter& rw) const override {
    for (std::size_t i = 0; i < p.order.size(); ++i)
      if (p.order[i] != static_cast<std::int64_t>(i))
        return false;
    rw.replace_op(op, op->operand(ir::top::PermuteOp::x));
    return true;
  }
};

/// top.Permute of a top.Permute becomes one permute with the composed order: the outer result's
/// axis i is the inner result's axis p2[i], which is x's axis p1[p2[i]].
struct PermuteOfPermute : OpPattern<ir::top::PermuteOp> {
  PermuteOfPermute() : OpPattern("permute-of-permute") {}
  bool rewrite_op(ir::Operation* op, const ir::top::PermuteOp& outer, Rewriter& rw) const override {
    ir::Operation* inner_op = op->operand(ir::top::PermuteOp::x)->defining_op();
    const ir::top::PermuteOp* inner = inner_op ? inner_op->as<ir::top::PermuteOp>() : nullptr;
    if (!inner)
      return false;
    std::vector<std::int64_t> composed;
    for (auto o : outer.order)
      composed.push_back(inner->order.at(o));
    ir::Value* x = inner_op->operand(ir::top::PermuteOp::x);
    rw.modify_op_in_place(op, [&] {
      op->as<ir::top::PermuteOp>()->order = composed;
      op->set_operand(0, x);
    });
    return true;
  }
};

} // namespace tpullm::rewrite::patterns
