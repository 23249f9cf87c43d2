// Fusion rewrites on Tpu functions (pass/passes/fusion.hpp).
#include "tpullm/pass/passes/fusion.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>

#include "tpullm/conversion/weight_convert.hpp"
#include "tpullm/rewrite/greedy_driver.hpp"

namespace tpullm::pass {

namespace {

using ir::Operation;
using ir::Value;

/// True when no op strictly between `a` and `b` (a before b, same function) uses `v`.
bool unused_between(Operation* a, Operation* b, const Value* v) {
  ir::Function* f = a->parent();
  for (auto it = std::next(f->find(a)); it != f->end() && it->get() != b; ++it)
    for (const Value* o : (*it)->operands())
      if (o == v)
        return false;
  return true;
}

/// tpu.RMSNorm(tpu.Add(x, r), gamma) -> (h, y) = tpu.AddRMSNorm(x, r, gamma).
struct FuseAddRMSNorm : rewrite::OpPattern<ir::tpu::RMSNormOp> {
  FuseAddRMSNorm() : OpPattern("fuse-add-rmsnorm") {}
  bool rewrite_op(Operation* norm, const ir::tpu::RMSNormOp& o,
                  rewrite::Rewriter& rw) const override {
    using Norm = ir::tpu::RMSNormOp;
    using Add = ir::tpu::AddOp;
    using Fused = ir::tpu::AddRMSNormOp;
    Operation* add = norm->operand(Norm::x)->defining_op();
    if (!add || !add->is<Add>() || add->parent() != norm->parent())
      return false;
    const Value* h = add->result(0);
    if (add->operand(Add::lhs)->type() != add->operand(Add::rhs)->type())
      return false; // the fused kernel adds two full tensors
    // Users of the sum between the Add and the norm would see it defined too late.
    if (!unused_between(add, norm, h))
      return false;
    rw.set_insertion_point(norm);
    static_assert(Fused::x == 0 && Fused::residual == 1 && Fused::gamma == 2);
    Operation* fused = rw.create_op(
        Fused{o.eps}, {add->operand(Add::lhs), add->operand(Add::rhs), norm->operand(Norm::gamma)});
    rw.replace_op(norm, fused->result(1));
    rw.replace_op(add, fused->result(0));
    return true;
  }
};

/// tpu.ArgMax(tpu.MatMul(x [1, 1, H], W)) with no bias and no other use of the logits. A
/// dynamic act_quant moves along unless the weights are W8A8's (i8, one scale per output
/// channel: the W8A8 kernels have no argmax form); static stays unfused.
struct FuseLmHeadArgMax : rewrite::OpPattern<ir::tpu::ArgMaxOp> {
  FuseLmHeadArgMax() : OpPattern("fuse-lm-head-argmax") {}
  bool rewrite_op(Operation* am, const ir::tpu::ArgMaxOp&, rewrite::Rewriter& rw) const override {
    using M = ir::tpu::MatMulOp;
    Operation* mm = am->operand(ir::tpu::ArgMaxOp::x)->defining_op();
    if (!mm || !mm->is<M>() || mm->num_operands() != M::bias || mm->result(0)->users().size() != 1)
      return false;
    const auto aq = mm->as<ir::tpu::MatMulOp>()->act_quant;
    if (aq) {
      const ir::TensorType& w = mm->operand(M::w)->type();
      const bool w8a8 = w.dtype == ir::DType::i8 && w.quant && w.quant->group_size == w.shape[0];
      if (*aq != ir::ActQuantKind::dynamic || w8a8)
        return false;
    }
    const ir::TensorType& x = mm->operand(M::x)->type();
    if (x.shape != std::vector<std::int64_t>{1, 1, x.shape.size() == 3 ? x.shape[2] : -1})
      return false;
    static_assert(ir::tpu::MatMulArgMaxOp::x == 0 && ir::tpu::MatMulArgMaxOp::w == 1);
    ir::tpu::MatMulArgMaxOp fused;
    fused.act_quant = aq;
    rw.replace_op_with_new(am, fused, {mm->operand(M::x), mm->operand(M::w)});
    rw.erase_op(mm);
    return true;
  }
};

/// The module weight a value reads, or nullptr.
const ir::Weight* weight_of(const ir::Module& m, const Value* v) {
  if (const Operation* d = v->defining_op())
    if (const auto* w = d->as<ir::builtin::WeightOp>())
      return m.find_weight(w->name.name);
  return nullptr;
}

/// Concatenation of f32 vectors (biases) as a new weight.
ir::Weight concat_bias(const std::vector<const ir::Weight*>& parts) {
  std::string name = parts.front()->name + ".cat" + std::to_string(parts.size());
  std::int64_t n = 0;
  for (const auto* p : parts)
    n += p->type.shape.at(0);
  ir::Weight w{name, ir::TensorType({n}, ir::DType::f32), {}};
  if (!parts.front()->has_data())
    return w;
  auto buf = std::make_shared<std::vector<float>>();
  for (const auto* p : parts) {
    const auto v = conversion::float_values(*p);
    buf->insert(buf->end(), v.begin(), v.end());
  }
  w.parts.push_back({"data",
                     ir::DType::f32,
                     {n},
                     std::as_bytes(std::span<const float>(*buf)),
                     std::shared_ptr<const void>(buf)});
  return w;
}

/// True when packed weights `a` and `b` store their rows in the same order (neither has an
/// act-order k_perm, or both have the same one).
bool same_row_order(const ir::Weight& a, const ir::Weight& b) {
  const ir::WeightPart* pa = a.find_part("k_perm");
  const ir::WeightPart* pb = b.find_part("k_perm");
  if (!pa || !pb)
    return !pa && !pb &&
           (a.type.quant && a.type.quant->act_order) == (b.type.quant && b.type.quant->act_order);
  return pa->bytes.size() == pb->bytes.size() &&
         std::equal(pa->bytes.begin(), pa->bytes.end(), pb->bytes.begin());
}

/// MatMuls of one x (rows <= max_rows): one MatMul over concatenated weights + slice views.
struct FuseQkv : rewrite::OpPattern<ir::tpu::MatMulOp> {
  FuseQkv(ir::Module& m, std::int64_t max_rows, std::shared_ptr<conversion::WeightConverter> c)
      : OpPattern("fuse-qkv"), module_(m), max_rows_(max_rows), conv_(std::move(c)) {}

  bool rewrite_op(Operation* first, const ir::tpu::MatMulOp& first_op,
                  rewrite::Rewriter& rw) const override {
    using M = ir::tpu::MatMulOp;
    Value* x = first->operand(M::x);
    const ir::TensorType& xt = x->type();
    if (xt.rank() < 1 || xt.num_elements() / xt.shape.back() > max_rows_)
      return false;
    // The other projections of x in this function, in program order after `first`.
    std::vector<Operation*> group;
    ir::Function* f = first->parent();
    for (auto it = f->find(first); it != f->end(); ++it) {
      Operation* op = it->get();
      if (!op->is<M>() || op->operand(M::x) != x)
        continue;
      if (op != first && !compatible(first, op))
        continue;
      group.push_back(op);
    }
    if (group.size() < 2)
      return false;
    // Every part but the last must end on a panel boundary to concatenate in place.
    for (std::size_t i = 0; i + 1 < group.size(); ++i)
      if (group[i]->result(0)->type().shape.back() % 32 != 0)
        return false;
    std::vector<const ir::Weight*> ws, bs;
    for (Operation* op : group) {
      ws.push_back(weight_of(module_, op->operand(M::w)));
      if (op->num_operands() > M::bias)
        bs.push_back(weight_of(module_, op->operand(M::bias)));
    }
    // Act-order weights read x in their own row order: only equal orders share one product.
    for (const ir::Weight* w : ws)
      if (!same_row_order(*ws.front(), *w))
        return false;
    const ir::Weight& cat = conv_->concat_packed(ws);
    if (!module_.find_weight(cat.name))
      module_.add_weight(cat);
    rw.set_insertion_point(first);
    std::vector<Value*> operands{x, rw.create(ir::builtin::WeightOp{{cat.name}}, {})};
    if (!bs.empty()) {
      const ir::Weight b = concat_bias(bs);
      if (!module_.find_weight(b.name))
        module_.add_weight(b);
      operands.push_back(rw.create(ir::builtin::WeightOp{{b.name}}, {}));
    }
    Value* y = rw.create(first_op, operands); // the act_quant attributes too (all equal)
    std::int64_t n0 = 0;
    for (Operation* op : group) {
      const ir::TensorType& t = op->result(0)->type();
      std::vector<std::int64_t> off(static_cast<std::size_t>(t.rank()), 0), sizes = t.shape;
      off.back() = n0;
      n0 += t.shape.back();
      Value* s = rw.create(ir::tpu::SliceOp{{off, sizes}}, {y});
      rw.replace_op(op, s);
    }
    return true;
  }

private:
  bool compatible(const Operation* a, const Operation* b) const {
    using M = ir::tpu::MatMulOp;
    const ir::Weight* wa = weight_of(module_, a->operand(M::w));
    const ir::Weight* wb = weight_of(module_, b->operand(M::w));
    if (!wa || !wb || a->num_operands() != b->num_operands())
      return false;
    if (a->num_operands() > M::bias &&
        (!weight_of(module_, a->operand(M::bias)) || !weight_of(module_, b->operand(M::bias))))
      return false;
    // W8A8 products share one activation quantization only when their attributes agree.
    const auto& ma = *a->as<ir::tpu::MatMulOp>();
    const auto& mb = *b->as<ir::tpu::MatMulOp>();
    if (ma.act_quant != mb.act_quant || ma.act_scale != mb.act_scale || ma.act_zero != mb.act_zero)
      return false;
    return wa->type.dtype == wb->type.dtype && wa->type.quant == wb->type.quant &&
           wa->type.shape[0] == wb->type.shape[0] && wa->has_data() == wb->has_data();
  }

  ir::Module& module_;
  std::int64_t max_rows_;
  std::shared_ptr<conversion::WeightConverter> conv_;
};

void require_tpu(const ir::Module& m, const char* pass) {
  for (const auto& f : m.functions())
    for (const auto& op : f->ops())
      check(op->dialect() != ir::Dialect::top, ErrorKind::invalid_input, "@" + f->name(), pass,
            " runs on Tpu functions; run lower-to-tpu first (found ", op->name(), ")");
}

template <class P, class... A>
void run_one(ir::Module& m, const char* name, A&&... args) {
  require_tpu(m, name);
  rewrite::PatternSet ps;
  ps.add<P>(std::forward<A>(args)...);
  rewrite::apply_patterns_greedily(m, ps);
}

} // namespace

void run_fuse_add_rmsnorm(ir::Module& m, const NoOptions&) {
  run_one<FuseAddRMSNorm>(m, "fuse-add-rmsnorm");
}

void run_fuse_lm_head_argmax(ir::Module& m, const NoOptions&) {
  run_one<FuseLmHeadArgMax>(m, "fuse-lm-head-argmax");
}

void run_fuse_qkv(ir::Module& m, const FuseQkvOptions& o, const PassContext& ctx) {
  fuse_qkv(m, o, ctx.converter);
}

void fuse_qkv(ir::Module& m, const FuseQkvOptions& o, conversion::WeightConverter* converter) {
  check(o.max_rows >= 1, ErrorKind::invalid_input, "fuse-qkv option 'max-rows'",
        "must be >= 1, got ", o.max_rows);
  std::shared_ptr<conversion::WeightConverter> conv =
      converter ? std::shared_ptr<conversion::WeightConverter>(converter, [](auto*) {})
                : std::make_shared<conversion::WeightConverter>();
  run_one<FuseQkv>(m, "fuse-qkv", m, o.max_rows, conv);
  // Weights no function reads any more (the separate q / k / v ones).
  std::set<std::string> read;
  for (const auto& f : m.functions())
    for (const auto& op : f->ops())
      if (const auto* w = op->as<ir::builtin::WeightOp>())
        read.insert(w->name.name);
  std::vector<std::string> drop;
  for (const auto& [name, w] : m.weights())
    if (!read.count(name))
      drop.push_back(name);
  for (const auto& n : drop)
    m.erase_weight(n);
}

} // namespace tpullm::pass
