// `lower-to-tpu`: Top functions translated into Tpu functions (conversion/lower_to_tpu.hpp).
#include "tpullm/conversion/lower_to_tpu.hpp"

#include <cmath>
#include <cstdio>
#include <unordered_set>
#include <set>
#include <unordered_map>

#include "tpullm/conversion/int8_calib.hpp"
#include "tpullm/ir/builder.hpp"
#include "tpullm/ir/verifier.hpp"

namespace tpullm::conversion {

namespace {

using ir::Operation;
using ir::TensorType;
using ir::Value;

/// The operand every linear reads its activation from: MatMul's a, MLP's and MoE's x.
constexpr std::uint8_t kLinearInput = ir::top::MatMulOp::a;
static_assert(ir::top::MLPOp::x == kLinearInput && ir::top::MoEOp::x == kLinearInput);
/// The operands of the paper's KV append, Concat(history argument, new rows).
enum KvAppendOperand : std::uint8_t { kHistory, kFresh };
/// The results of a block function: (hidden, keys, values).
enum BlockResult : std::uint8_t { kBlockHidden, kBlockKeys, kBlockValues };

bool is_block_stage(ir::StageKind k) {
  return k == ir::StageKind::prefill || k == ir::StageKind::prefill_kv ||
         k == ir::StageKind::decode;
}

/// Translates one Top function into a new Tpu function.
class FunctionLowering {
public:
  FunctionLowering(ir::Module& m, const ir::Function& src, WeightConverter& conv,
                   const QuantPlan& plan)
      : module_(m), src_(src), conv_(conv), dst_(std::make_unique<ir::Function>(src.name())),
        b_(m, *dst_), plan_(plan), mode_(plan.linear), lm_head_(plan.lm_head),
        embedding_(plan.embedding), kv_dtype_(plan.kv_dtype), rtn_(plan.rtn),
        static_(plan.act.static_tensor), asymmetric_(plan.act.asymmetric),
        alpha_(plan.act.smooth_alpha), table_(plan.calib.get()) {}

  std::unique_ptr<ir::Function> run() {
    dst_->set_loc(src_.loc());
    dst_->set_info(src_.info());
    prepare_block();
    for (std::size_t i = 0; i < src_.num_arguments(); ++i) {
      TensorType t = src_.argument(i)->type();
      if (history_args_.count(i))
        t = ir::kv_cache_type(t.shape, kv_dtype_); // the history is the cache, in its type
      map_[src_.argument(i)] = dst_->add_argument(src_.argument_name(i), t);
    }
    for (const auto& op : src_.ops())
      if (!absorbed(*op))
        lower_op(*op);
    return std::move(dst_);
  }

private:
  // ---- values ------------------------------------------------------------------------------

  [[noreturn]] void fail(const Operation& op, const std::string& why) const {
    const Location loc = op.loc().known() ? op.loc() : Location{"@" + src_.name()};
    throw DiagnosticError(loc, "cannot lower '" + std::string(op.name()) + "': " + why);
  }

  /// The Top weight a value reads, or nullptr.
  const ir::Weight* weight_of(const Value* v) const {
    if (const Operation* d = v->defining_op())
      if (const auto* w = d->as<ir::builtin::WeightOp>())
        return &module_.weight(w->name.name);
    return nullptr;
  }

  /// A builtin.Weight of the converted weight `w` (one op per weight per function).
  Value* weight_value(const ir::Weight& w) {
    auto it = weight_values_.find(w.name);
    if (it != weight_values_.end())
      return it->second;
    if (!module_.find_weight(w.name))
      module_.add_weight(w);
    Value* v = b_.weight(w.name);
    weight_values_[w.name] = v;
    return v;
  }

  /// The Tpu value of Top value `v` as an f32 activation (weights read as f32 tensors).
  Value* get(const Value* v) {
    auto it = map_.find(v);
    if (it != map_.end())
      return it->second;
    const Operation* d = v->defining_op();
    check(d != nullptr, ErrorKind::internal, "@" + src_.name(), "unmapped argument");
    if (const ir::Weight* w = weight_of(v))
      return weight_value(conv_.row_major(*w, ir::DType::f32));
    // An op skipped because a fusion could absorb it, needed after all.
    lower_op(*d);
    it = map_.find(v);
    check(it != map_.end(), ErrorKind::internal, "@" + src_.name(), d->name(),
          " produced no value");
    return it->second;
  }

  /// A row-major float parameter (norm gamma, RoPE table): kept as stored when f32/bf16/f16.
  Value* param(const Value* v) {
    if (const ir::Weight* w = weight_of(v)) {
      const ir::DType t = w->type.dtype;
      const bool keep = t == ir::DType::f32 || t == ir::DType::bf16 || t == ir::DType::f16;
      return weight_value(conv_.row_major(*w, keep ? t : ir::DType::f32));
    }
    return get(v);
  }

  /// Records the Tpu value of `top`; the block's returned keys / values are stored to the cache.
  void set(const Value* top, Value* tpu) {
    if (top == key_out_ || top == value_out_) {
      ir::tpu::KVStoreOp s;
      s.layer = src_.info().layer;
      s.kv = top == key_out_ ? ir::KvKind::key : ir::KvKind::value;
      if (kv_dtype_ != ir::DType::f32)
        s.dtype = kv_dtype_;
      tpu = b_.create(s, {tpu, get(positions_)});
    }
    map_[top] = tpu;
  }

  // ---- block structure ---------------------------------------------------------------------

  void prepare_block() {
    const ir::FunctionInfo& info = src_.info();
    if (!is_block_stage(info.stage))
      return;
    const Location loc = src_.loc().known() ? src_.loc() : Location{"@" + src_.name()};
    const Operation* ret = src_.return_op();
    // The MLP half of a tensor-parallel layer (input_states) -> (partial): no keys or values.
    if (info.layer >= 0 && ret && ret->num_operands() == 1 && src_.num_arguments() == 1)
      return;
    const bool shaped =
        info.layer >= 0 && ret && ret->num_operands() >= 3 && src_.num_arguments() >= 2 &&
        src_.argument(1)->type().dtype == ir::DType::i32 && src_.argument(1)->type().rank() == 2;
    if (!shaped)
      throw DiagnosticError(loc, "a block function (stage " +
                                     std::string(ir::enum_name(info.stage)) +
                                     ") must take (input_states, position_ids [1, L] i32, ...), "
                                     "return (hidden, keys, values) and name its layer");
    positions_ = src_.argument(1);
    key_out_ = ret->operand(kBlockKeys);
    value_out_ = ret->operand(kBlockValues);
    for (const Value* kv : {key_out_, value_out_})
      if (kv->is_argument() || kv->type().rank() != 4)
        throw DiagnosticError(loc, "a block's keys and values must be computed [1, L, kv_heads, "
                                   "d] tensors, got " +
                                       kv->type().str());
    // History arguments (the first operand of a KV append) take the cache's element type.
    for (const auto& op : src_.ops())
      if (const auto* c = op->as<ir::top::ConcatOp>())
        if (is_kv_append(*op, *c))
          history_args_.insert(op->operand(kHistory)->index());
  }

  /// Gathers whose every user is a Rope that reads the table itself are not lowered on their own.
  bool absorbed(const Operation& op) const {
    if (op.is<ir::builtin::WeightOp>())
      return true; // weights are converted per use
    if (!op.is<ir::top::GatherOp>())
      return false;
    for (const Operation* u : op.result(0)->users())
      if (!u->is<ir::top::RopeOp>() || !rope_tables(*u))
        return false;
    return op.result(0)->has_uses();
  }

  /// For Rope(x, Gather(Tc, p), Gather(Ts, p)) with rank-2 tables gathered on axis 0 by the
  /// same [1, L] positions: the tables and positions, else nullopt.
  struct RopeTables {
    const Value* cos_table;
    const Value* sin_table;
    const Value* positions;
  };
  std::optional<RopeTables> rope_tables(const Operation& rope) const {
    using G = ir::top::GatherOp;
    const Operation* c = rope.operand(ir::top::RopeOp::cosines)->defining_op();
    const Operation* s = rope.operand(ir::top::RopeOp::sines)->defining_op();
    if (!c || !s || !c->is<G>() || !s->is<G>())
      return std::nullopt;
    if (c->as<G>()->axis != 0 || s->as<G>()->axis != 0)
      return std::nullopt;
    if (c->operand(G::indices) != s->operand(G::indices) || !weight_of(c->operand(G::table)) ||
        !weight_of(s->operand(G::table)))
      return std::nullopt;
    const TensorType& p = c->operand(G::indices)->type();
    if (p.dtype != ir::DType::i32 || p.rank() != 2 || c->operand(G::table)->type().rank() != 2)
      return std::nullopt;
    return RopeTables{c->operand(G::table), s->operand(G::table), c->operand(G::indices)};
  }

  // ---- ops ---------------------------------------------------------------------------------

  template <class T>
  Value* create(const Operation& at, T op, std::vector<Value*> operands) {
    b_.set_loc(at.loc());
    try {
      return b_.create(std::move(op), std::move(operands));
    } catch (const DiagnosticError& e) {
      fail(at, e.message());
    }
  }

  /// The packed weight (MatMul / MLP rhs) in `dtype` that Top weight value `v` converts to.
  const ir::Weight& packed_weight(const Operation& op, const Value* v, bool transposed,
                                  ir::DType dtype) {
    const ir::Weight* w = weight_of(v);
    if (!w)
      fail(op, "the Tpu MatMul / MLP needs a weight operand (a builtin.Weight), got an activation");
    try {
      return conv_.packed(*w, transposed, dtype);
    } catch (const Error& e) {
      fail(op, e.where().empty() ? e.message() : e.where() + ": " + e.message());
    }
  }
  /// A packed weight operand (MatMul / MLP rhs) in `dtype`.
  Value* packed(const Operation& op, const Value* v, bool transposed, ir::DType dtype) {
    return weight_value(packed_weight(op, v, transposed, dtype));
  }

  /// How a linear / MLP / expert weight of this function is stored: lm_head's choice in the
  /// lm_head function, else the mode's (a keep-float weight stays in the mode's float dtype).
  WeightFormat linear_choice(const Value* v) const {
    if (src_.info().stage == ir::StageKind::lm_head)
      return lm_head_;
    WeightFormat c = mode_;
    const ir::Weight* w = weight_of(v);
    if (c.bits > 0 && w && plan_.keeps_float(w->name)) {
      c.bits = 0;
      c.w8a8 = false;
    }
    return c;
  }

  /// The packed weight (MatMul / MLP / MoE expert rhs) of Top weight value `v` as this
  /// function's choice says: RTN-quantized or in a float dtype.
  /// `reads_input`: the weight reads op's operand 0 (false for the MLP's down projection), whose
  /// SmoothQuant factors then scale its rows.
  const ir::Weight& linear_weight(const Operation& op, const Value* v, bool transposed,
                                  bool reads_input = true) {
    const WeightFormat c = linear_choice(v);
    if (c.bits == 0)
      return packed_weight(op, v, transposed, c.dtype);
    const ir::Weight* w = weight_of(v);
    if (!w)
      fail(op, "the Tpu MatMul / MLP needs a weight operand (a builtin.Weight), got an activation");
    RtnOptions o = rtn_;
    o.bits = c.bits;
    ir::Weight smoothed;
    if (c.w8a8) {
      if (w->type.quant)
        fail(op, plan_.quantized_weight_refusal(w->name));
      o.group_size = 0; // one scale per output channel
      o.symmetric = true;
      if (const std::vector<float>* s =
              reads_input ? smoothing_of(op.operand(kLinearInput)) : nullptr) {
        smoothed = smoothed_weight(op, *w, transposed, *s);
        w = &smoothed;
      }
    }
    try {
      return conv_.quantized(*w, transposed, o);
    } catch (const Error& e) {
      fail(op, e.where().empty() ? e.message() : e.where() + ": " + e.message());
    }
  }

  /// Whether a weight-only linear reading packed weight value `w` rounds its input to int8 per
  /// weight group (act-quant=dynamic outside mode int8): the plan asks for it and the weights
  /// are integer.
  bool int8_x(const Value* w) const {
    return plan_.act.int8_weight_only && w->type().quant.has_value();
  }

  // ---- int8: calibration and smoothing ----------------------------------------------------

  /// The table entry of the linear reading Top weight value `w`; fails naming it when absent.
  const CalibEntry& entry_of(const Operation& op, const Value* w) const {
    const ir::Weight* wt = weight_of(w);
    const CalibEntry* e = wt && table_ ? table_->find(wt->name) : nullptr;
    if (!e)
      fail(op, "the calibration table has no input '" + (wt ? wt->name : std::string("?")) +
                   "' (was it measured on this model by tpullm calibrate?)");
    return *e;
  }

  /// The static parameters of the input of the linear whose weight is `w`; `x` is the Top
  /// input value (its smoothing, if any, shrinks the range), nullptr for the MLP's down input.
  StaticActParams static_params(const Operation& op, const Value* w, const Value* x) const {
    CalibEntry e = entry_of(op, w);
    float shrink = 1.0f;
    if (const std::vector<float>* s = x ? smoothing_of(x) : nullptr) {
      // A clipping threshold measured before smoothing does not carry over to the smoothed
      // distribution (the clipped elements are other ones): the smoothed range is estimated from
      // the whole one.
      e.threshold = e.absmax;
      if (e.channel_absmax.size() != s->size())
        fail(op, "calibration input '" + e.name + "' has " +
                     std::to_string(e.channel_absmax.size()) + " channels, the smoothing " +
                     std::to_string(s->size()));
      shrink = smoothed_shrink(e.channel_absmax, *s, e.absmax);
    }
    try {
      return static_act_params(e, asymmetric_, shrink);
    } catch (const Error& err) {
      fail(op, err.where() + ": " + err.message());
    }
  }

  /// The SmoothQuant factors of Top value `x` (an RMSNorm's output), or nullptr.
  const std::vector<float>* smoothing_of(const Value* x) const {
    auto it = smooth_.find(x);
    return it == smooth_.end() ? nullptr : &it->second;
  }

  /// Largest |W[j][n]| over n of each input row j of float weight `w` ([N, K] when
  /// `transposed`), into `out` [K] (max-accumulated).
  static void weight_row_absmax(const ir::Weight& w, bool transposed, std::vector<float>& out) {
    const std::vector<float> v = float_values(w);
    const std::int64_t r = w.type.shape[0], c = w.type.shape[1];
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j) {
        const std::size_t k = static_cast<std::size_t>(transposed ? j : i);
        out[k] = std::max(out[k], std::fabs(v[static_cast<std::size_t>(i * c + j)]));
      }
  }

  /// With smoothing on: when every user of RMSNorm `norm`'s output is an int8 linear (MatMul
  /// or MLP reading it as its input), computes and records the factors over all of them (q/k/v
  /// together, gate/up together). nullptr when smoothing does not apply.
  const std::vector<float>* prepare_smoothing(const Operation& norm) {
    if (alpha_ == 0 || !mode_.w8a8 || !is_block_stage(src_.info().stage))
      return nullptr;
    const Value* y = norm.result(0);
    std::vector<std::pair<const Value*, bool>> weights; // (weight value, transposed)
    for (const Operation* u : y->users()) {
      using M = ir::top::MatMulOp;
      using P = ir::top::MLPOp;
      if (const auto* m = u->as<M>()) {
        if (u->operand(M::a) != y || !weight_of(u->operand(M::b)) ||
            !linear_choice(u->operand(M::b)).w8a8)
          return nullptr;
        weights.emplace_back(u->operand(M::b), m->transpose_b);
      } else if (const auto* mlp = u->as<P>()) {
        if (u->operand(P::x) != y || !weight_of(u->operand(P::gate)) ||
            !weight_of(u->operand(P::up)) || !linear_choice(u->operand(P::gate)).w8a8)
          return nullptr;
        weights.emplace_back(u->operand(P::gate), mlp->transpose_b);
        weights.emplace_back(u->operand(P::up), mlp->transpose_b);
      } else {
        return nullptr;
      }
    }
    if (weights.empty())
      return nullptr;
    const std::int64_t K = y->type().dim(-1);
    std::vector<float> xa(static_cast<std::size_t>(K), 0.0f), wa(xa.size(), 0.0f);
    for (const auto& [wv, transposed] : weights) {
      const CalibEntry& e = entry_of(norm, wv);
      if (static_cast<std::int64_t>(e.channel_absmax.size()) != K)
        fail(norm, "calibration input '" + e.name + "' has " +
                       std::to_string(e.channel_absmax.size()) + " channels, the input has " +
                       std::to_string(K));
      for (std::size_t j = 0; j < xa.size(); ++j)
        xa[j] = std::max(xa[j], e.channel_absmax[j]);
      const ir::Weight& w = *weight_of(wv);
      if (!w.has_data())
        fail(norm, "smoothing needs the weights' values; @" + w.name + " has no data");
      weight_row_absmax(w, transposed, wa);
    }
    return &(smooth_[y] = smooth_factors(xa, wa, alpha_));
  }

  /// A name suffix that tells smoothed weights of different alphas apart.
  std::string smooth_suffix() const {
    char buf[32];
    std::snprintf(buf, sizeof buf, ".sq%.4g", alpha_);
    return buf;
  }

  /// The norm's gamma divided by the factors, as an f32 weight.
  const ir::Weight& smoothed_gamma(const Operation& norm, const std::vector<float>& s) {
    const ir::Weight* g = weight_of(norm.operand(ir::top::RMSNormOp::gamma));
    if (!g || !g->has_data())
      fail(norm, "smoothing folds its factors into the norm's gamma, which must be a weight "
                 "with data");
    std::vector<float> v = float_values(*g);
    if (v.size() != s.size())
      fail(norm, "gamma has " + std::to_string(v.size()) + " elements, the input " +
                     std::to_string(s.size()) + " channels");
    for (std::size_t j = 0; j < v.size(); ++j)
      v[j] /= s[j];
    const std::string name = g->name + smooth_suffix();
    if (const ir::Weight* have = module_.find_weight(name))
      return *have;
    return module_.add_weight(f32_weight(name, {static_cast<std::int64_t>(v.size())}, v));
  }

  /// Float weight `w` with each input row j scaled by s[j] (a new Top-side f32 weight).
  ir::Weight smoothed_weight(const Operation& op, const ir::Weight& w, bool transposed,
                             const std::vector<float>& s) const {
    if (!w.has_data())
      fail(op, "smoothing needs the weights' values; @" + w.name + " has no data");
    std::vector<float> v = float_values(w);
    const std::int64_t r = w.type.shape[0], c = w.type.shape[1];
    if (static_cast<std::int64_t>(s.size()) != (transposed ? c : r))
      fail(op, "@" + w.name + " does not read the smoothed input's " + std::to_string(s.size()) +
                   " channels");
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j)
        v[static_cast<std::size_t>(i * c + j)] *= s[static_cast<std::size_t>(transposed ? j : i)];
    return f32_weight(w.name + smooth_suffix(), w.type.shape, v);
  }

  /// An f32 row-major weight owning `values`.
  static ir::Weight f32_weight(const std::string& name, const std::vector<std::int64_t>& shape,
                               std::vector<float> values) {
    auto buf = std::make_shared<std::vector<float>>(std::move(values));
    ir::Weight w{name, ir::TensorType(shape, ir::DType::f32), {}};
    w.parts.push_back({"data", ir::DType::f32, shape, std::as_bytes(std::span<const float>(*buf)),
                       std::shared_ptr<const void>(buf)});
    return w;
  }

  /// Elementwise binary: same shapes, or one side an [N] vector over the other's last axis.
  template <class Top, class T>
  void binary(const Operation& op) {
    constexpr auto lhs = Top::lhs, rhs = Top::rhs;
    const TensorType &a = op.operand(lhs)->type(), &c = op.operand(rhs)->type();
    auto vec_of = [](const TensorType& full, const TensorType& v) {
      return v.rank() == 1 && full.rank() >= 1 && v.shape[0] == full.shape.back();
    };
    if (a.shape == c.shape || vec_of(a, c)) {
      set(op.result(0), create(op, T{}, {get(op.operand(lhs)), get(op.operand(rhs))}));
    } else if (vec_of(c, a)) { // commutative: put the full tensor first
      set(op.result(0), create(op, T{}, {get(op.operand(rhs)), get(op.operand(lhs))}));
    } else {
      fail(op, "the Tpu form supports equal shapes or an [N] vector over the last axis, got " +
                   ir::shape_str(a.shape) + " and " + ir::shape_str(c.shape));
    }
  }

  void lower_op(const Operation& op) {
    if (lowered_.count(&op))
      return;
    lowered_.insert(&op);
    ir::visit_op(op.op(), [&](const auto& o) { lower(op, o); });
  }

  void lower(const Operation& op, const ir::builtin::WeightOp&) { (void)op; }

  void lower(const Operation& op, const ir::builtin::ReturnOp&) {
    std::vector<Value*> vals;
    std::vector<TensorType> types;
    for (const Value* v : op.operands()) {
      Value* t = get(v);
      vals.push_back(t);
      types.push_back(t->type());
    }
    b_.set_loc(op.loc());
    b_.ret(vals);
    dst_->set_result_types(types);
  }

  void lower(const Operation& op, const ir::top::MatMulOp& o) {
    using M = ir::top::MatMulOp;
    std::vector<Value*> in{get(op.operand(M::a)),
                           weight_value(linear_weight(op, op.operand(M::b), o.transpose_b))};
    if (op.num_operands() > M::bias) {
      const ir::Weight* bw = weight_of(op.operand(M::bias));
      in.push_back(bw ? weight_value(conv_.row_major(*bw, ir::DType::f32))
                      : get(op.operand(M::bias)));
    }
    ir::tpu::MatMulOp t;
    if (int8_x(in[1]))
      t.act_quant = ir::ActQuantKind::dynamic;
    if (linear_choice(op.operand(M::b)).w8a8) {
      t.act_quant = static_ ? ir::ActQuantKind::static_tensor : ir::ActQuantKind::dynamic;
      if (static_) {
        const StaticActParams p = static_params(op, op.operand(M::b), op.operand(M::a));
        t.act_scale = p.scale;
        if (p.zero != 0)
          t.act_zero = p.zero;
      }
    }
    set(op.result(0), create(op, t, in));
  }

  void lower(const Operation& op, const ir::top::RMSNormOp& o) {
    Value* gamma = nullptr;
    if (const std::vector<float>* s = prepare_smoothing(op))
      gamma = weight_value(smoothed_gamma(op, *s));
    else
      gamma = param(op.operand(ir::top::RMSNormOp::gamma));
    set(op.result(0),
        create(op, ir::tpu::RMSNormOp{o}, {get(op.operand(ir::top::RMSNormOp::x)), gamma}));
  }

  void lower(const Operation& op, const ir::top::GatherOp& o) {
    using G = ir::top::GatherOp;
    const ir::Weight* table = weight_of(op.operand(G::table));
    const TensorType& idx = op.operand(G::indices)->type();
    if (o.axis != 0 && !(o.axis == -op.operand(G::table)->type().rank()))
      fail(op, "the Tpu gather reads rows (axis 0), got axis " + std::to_string(o.axis));
    if (idx.dtype != ir::DType::i32)
      fail(op, "indices must be i32, got " + idx.str());
    if (table && src_.info().stage == ir::StageKind::embedding && table->type.rank() == 2 &&
        idx.rank() == 2 && idx.shape[0] == 1) {
      // The table is packed as the lm_head packs it ([H, V], transposed from [V, H]; RTN-
      // quantized for w8 / w4): a tied checkpoint's lm_head with the same choice reads the same
      // weight, so the bundle stores it once (same key in the converter); the gather reads
      // token v's row as column v.
      const ir::Weight* packed_table = nullptr;
      if (embedding_.bits == 0) {
        packed_table = &conv_.packed(*table, true, embedding_.dtype);
      } else {
        RtnOptions q = rtn_;
        q.bits = embedding_.bits;
        try {
          packed_table = &conv_.quantized(*table, true, q);
        } catch (const Error& e) {
          fail(op, e.where().empty() ? e.message() : e.where() + ": " + e.message());
        }
      }
      Value* t = weight_value(*packed_table);
      set(op.result(0), create(op, ir::tpu::EmbeddingOp{}, {t, get(op.operand(G::indices))}));
      return;
    }
    set(op.result(0), create(op, ir::tpu::GatherOp{},
                             {param(op.operand(G::table)), get(op.operand(G::indices))}));
  }

  void lower(const Operation& op, const ir::top::RopeOp& o) {
    const auto t = rope_tables(op);
    if (!t)
      fail(op, "tpu.Rope gathers cos/sin rows itself: its cos and sin must be top.Gather of "
               "[positions, d/2] tables on axis 0 by the same [1, L] i32 position_ids");
    Value* c = weight_value(conv_.row_major(*weight_of(t->cos_table), ir::DType::f32));
    Value* s = weight_value(conv_.row_major(*weight_of(t->sin_table), ir::DType::f32));
    set(op.result(0), create(op, ir::tpu::RopeOp{o},
                             {get(op.operand(ir::top::RopeOp::x)), c, s, get(t->positions)}));
  }

  void lower(const Operation& op, const ir::top::ReshapeOp& o) {
    set(op.result(0), create(op, ir::tpu::ReshapeOp{o}, {get(op.operand(ir::top::ReshapeOp::x))}));
  }
  void lower(const Operation& op, const ir::top::PermuteOp& o) {
    set(op.result(0), create(op, ir::tpu::PermuteOp{o}, {get(op.operand(ir::top::PermuteOp::x))}));
  }
  void lower(const Operation& op, const ir::top::SliceOp& o) {
    set(op.result(0), create(op, ir::tpu::SliceOp{o}, {get(op.operand(ir::top::SliceOp::x))}));
  }

  /// Whether `op` is the paper's Concat(history argument, returned new keys / values).
  bool is_kv_append(const Operation& op, const ir::top::ConcatOp& o) const {
    return positions_ && op.num_operands() == 2 && (o.axis == 1 || o.axis == -3) &&
           op.operand(kHistory)->is_argument() && op.operand(kHistory)->index() >= 2 &&
           (op.operand(kFresh) == key_out_ || op.operand(kFresh) == value_out_);
  }

  void lower(const Operation& op, const ir::top::ConcatOp& o) {
    // The paper's Concat(history, new) of a block: an address in the KV cache.
    if (is_kv_append(op, o)) {
      ir::tpu::KVAppendOp a;
      a.layer = src_.info().layer;
      a.kv = op.operand(kFresh) == key_out_ ? ir::KvKind::key : ir::KvKind::value;
      set(op.result(0),
          create(op, a, {get(op.operand(kHistory)), get(op.operand(kFresh)), get(positions_)}));
      return;
    }
    std::vector<Value*> in;
    for (const Value* v : op.operands())
      in.push_back(get(v));
    set(op.result(0), create(op, ir::tpu::ConcatOp{o}, in));
  }

  void lower(const Operation& op, const ir::top::AddOp&) {
    binary<ir::top::AddOp, ir::tpu::AddOp>(op);
  }
  void lower(const Operation& op, const ir::top::MulOp&) {
    binary<ir::top::MulOp, ir::tpu::MulOp>(op);
  }
  void lower(const Operation& op, const ir::top::SiLUOp&) {
    set(op.result(0), create(op, ir::tpu::SiLUOp{}, {get(op.operand(ir::top::SiLUOp::x))}));
  }
  void lower(const Operation& op, const ir::top::SoftmaxOp& o) {
    const Value* x = op.operand(ir::top::SoftmaxOp::x);
    const auto r = x->type().rank();
    if (o.axis != -1 && o.axis != r - 1)
      fail(op, "the Tpu softmax runs along the last axis, got axis " + std::to_string(o.axis));
    set(op.result(0), create(op, ir::tpu::SoftmaxOp{}, {get(x)}));
  }
  void lower(const Operation& op, const ir::top::CastOp& o) {
    Value* x = get(op.operand(ir::top::CastOp::x));
    if (o.dtype == ir::DType::f32 || o.dtype == ir::DType::f64)
      set(op.result(0), x); // activations are f32 already
    else
      set(op.result(0), create(op, ir::tpu::RoundOp{o.dtype}, {x}));
  }

  void lower(const Operation& op, const ir::top::FAttentionOp& o) {
    using A = ir::top::FAttentionOp;
    Value* k = get(op.operand(A::k));
    Value* v = get(op.operand(A::v));
    const bool cache = k->defining_op() && k->defining_op()->is<ir::tpu::KVAppendOp>() &&
                       v->defining_op() && v->defining_op()->is<ir::tpu::KVAppendOp>();
    if (o.history > 0 && !cache)
      fail(op, "attention over history needs the history in the KV cache: a block function "
               "(attributes {stage, layer}) whose keys / values are Concat(history argument, "
               "returned new rows)");
    ir::tpu::FAttentionOp t{o}; // Top's semantics, plus where the keys come from
    t.kv_form = cache ? ir::KvForm::cache : ir::KvForm::rows;
    set(op.result(0), create(op, t, {get(op.operand(A::q)), k, v, get(op.operand(A::positions))}));
  }

  void lower(const Operation& op, const ir::top::MLPOp& o) {
    using T = ir::top::MLPOp;
    const ir::Weight& gate = linear_weight(op, op.operand(T::gate), o.transpose_b);
    const ir::Weight& up = linear_weight(op, op.operand(T::up), o.transpose_b);
    const ir::Weight& down = linear_weight(op, op.operand(T::down), o.transpose_b, false);
    // An act-order down projection reads the intermediate activation in a permuted order; the
    // tiled MLP needs natural order, so the permutation moves into the gate / up columns.
    WeightConverter::MlpOperands f{};
    try {
      f = conv_.fold_mlp_perm(gate, up, down);
    } catch (const Error& e) {
      fail(op, e.where().empty() ? e.message() : e.where() + ": " + e.message());
    }
    ir::tpu::MLPOp t{o}; // Top's semantics, plus the activation quantization
    Value* const gate_v = weight_value(*f.gate);
    Value* const up_v = weight_value(*f.up);
    Value* const down_v = weight_value(*f.down);
    if (int8_x(gate_v) && int8_x(up_v) && int8_x(down_v))
      t.act_quant = ir::ActQuantKind::dynamic;
    const bool gq = linear_choice(op.operand(T::gate)).w8a8,
               uq = linear_choice(op.operand(T::up)).w8a8,
               dq = linear_choice(op.operand(T::down)).w8a8;
    if (gq != uq || gq != dq)
      fail(op, "mode int8 quantizes the MLP's gate, up and down together: keep-float must name "
               "all three or none");
    if (gq) {
      t.act_quant = static_ ? ir::ActQuantKind::static_tensor : ir::ActQuantKind::dynamic;
      if (static_) {
        const StaticActParams in = static_params(op, op.operand(T::gate), op.operand(T::x));
        const StaticActParams dn = static_params(op, op.operand(T::down), nullptr);
        t.act_scale = in.scale;
        if (in.zero != 0)
          t.act_zero = in.zero;
        t.down_act_scale = dn.scale;
        if (dn.zero != 0)
          t.down_act_zero = dn.zero;
      }
    }
    set(op.result(0), create(op, t, {get(op.operand(T::x)), gate_v, up_v, down_v}));
  }

  // The router stays f32 whatever the mode: bf16 logits flip near-tied routing decisions.
  // int8 (W8A8): the experts run with dynamic per-row activation scales only (an expert sees
  // just the tokens routed to it; calibrate records no per-expert ranges).
  void lower(const Operation& op, const ir::top::MoEOp& o) {
    using T = ir::top::MoEOp;
    std::vector<Value*> in{get(op.operand(T::x)),
                           packed(op, op.operand(T::router), o.transpose_b, ir::DType::f32)};
    const bool q =
        op.num_operands() > T::first_expert && linear_choice(op.operand(T::first_expert)).w8a8;
    for (std::size_t i = T::first_expert; i < op.num_operands(); ++i) {
      if (linear_choice(op.operand(i)).w8a8 != q)
        fail(op, "mode int8 quantizes every expert's gate, up and down together: keep-float must "
                 "name all of a MoE layer's expert weights or none");
      // gate / up read x, down reads the activation
      const bool reads_input = (i - T::first_expert) % 3 != 2;
      in.push_back(weight_value(linear_weight(op, op.operand(i), o.transpose_b, reads_input)));
    }
    ir::tpu::MoEOp t{o}; // Top's semantics, plus the activation quantization
    bool all_int = in.size() > T::first_expert;
    for (std::size_t i = T::first_expert; i < in.size(); ++i)
      all_int = all_int && int8_x(in[i]);
    if (all_int)
      t.act_quant = ir::ActQuantKind::dynamic;
    if (q) {
      if (const std::string why = plan_.moe_refusal(); !why.empty())
        fail(op, why);
      t.act_quant = ir::ActQuantKind::dynamic;
    }
    set(op.result(0), create(op, t, in));
  }

  void lower(const Operation& op, const ir::top::ArgMaxOp& o) {
    const Value* x = op.operand(ir::top::ArgMaxOp::x);
    const auto r = x->type().rank();
    if (o.axis != -1 && o.axis != r - 1)
      fail(op, "the Tpu argmax runs along the last axis, got axis " + std::to_string(o.axis));
    set(op.result(0), create(op, ir::tpu::ArgMaxOp{}, {get(x)}));
  }

  void lower(const Operation& op, const ir::top::TopKOp& o) {
    const Value* x = op.operand(ir::top::TopKOp::x);
    const auto r = x->type().rank();
    if (o.axis != -1 && o.axis != r - 1)
      fail(op, "the Tpu top-k runs along the last axis, got axis " + std::to_string(o.axis));
    b_.set_loc(op.loc());
    Operation* t = nullptr;
    try {
      t = b_.create_op(ir::tpu::TopKOp{o.k}, {get(x)});
    } catch (const DiagnosticError& e) {
      fail(op, e.message());
    }
    set(op.result(0), t->result(0));
    set(op.result(1), t->result(1));
  }

  template <class T>
  requires(ir::dialect_of<T>() == ir::Dialect::tpu) void lower(const Operation& op, const T&) {
    fail(op, "the function already contains Tpu ops; lower-to-tpu expects Top functions");
  }

  ir::Module& module_;
  const ir::Function& src_;
  WeightConverter& conv_;
  std::unique_ptr<ir::Function> dst_;
  ir::Builder b_;
  const QuantPlan& plan_;                         ///< every quantization decision
  const WeightFormat mode_, lm_head_, embedding_; ///< the plan's formats
  const ir::DType kv_dtype_;                      ///< the KV cache's element type
  std::set<std::size_t> history_args_;            ///< argument indices that are the KV cache
  const RtnOptions rtn_;                          ///< the plan's RTN grouping
  const bool static_, asymmetric_;                ///< int8: act-quant=static, act-asymmetric
  const double alpha_;                            ///< int8: smooth-alpha (0: off)
  const CalibTable* const table_; ///< int8: the plan's calibration table, or nullptr
  /// int8 smoothing: factors per smoothed RMSNorm output (Top value).
  std::unordered_map<const Value*, std::vector<float>> smooth_;
  std::unordered_map<const Value*, Value*> map_;
  std::unordered_map<std::string, Value*> weight_values_;
  std::set<const Operation*> lowered_;
  const Value* positions_ = nullptr;
  const Value* key_out_ = nullptr;
  const Value* value_out_ = nullptr;
};

} // namespace

void require_dialect(const ir::Module& m, ir::Dialect dialect, const char* after_what) {
  for (const auto& f : m.functions())
    for (const auto& op : f->ops())
      if (op->dialect() != dialect && op->dialect() != ir::Dialect::builtin) {
        const Location loc = op->loc().known() ? op->loc() : Location{"@" + f->name()};
        throw DiagnosticError(loc, "'" + std::string(op->name()) + "' remains after " + after_what +
                                       "; only " + std::string(ir::dialect_name(dialect)) +
                                       " and builtin ops are legal here");
      }
}

void lower_to_tpu(ir::Module& m, const QuantPlan& plan, WeightConverter* converter) {
  WeightConverter local;
  WeightConverter& conv = converter ? *converter : local;
  std::vector<std::string> names;
  for (const auto& f : m.functions())
    names.push_back(f->name());
  std::set<std::string> top_weights;
  for (const auto& [name, w] : m.weights())
    top_weights.insert(name);
  for (const auto& name : names) {
    ir::Function* f = m.find_function(name);
    auto lowered = FunctionLowering(m, *f, conv, plan).run();
    m.replace_function(name, std::move(lowered));
  }
  // Drop Top weights no Tpu function reads any more.
  std::set<std::string> read;
  for (const auto& f : m.functions())
    for (const auto& op : f->ops())
      if (const auto* w = op->as<ir::builtin::WeightOp>())
        read.insert(w->name.name);
  for (const auto& name : top_weights)
    if (!read.count(name))
      m.erase_weight(name);
  require_dialect(m, ir::Dialect::tpu, "lower-to-tpu");
}

pass::PassFn bind_lower_to_tpu(const LowerOptions& options) {
  std::shared_ptr<const QuantPlan> plan =
      options.plan ? options.plan : std::make_shared<const QuantPlan>(make_quant_plan(options));
  return [plan](ir::Module& m, const pass::PassContext& ctx) {
    lower_to_tpu(m, *plan, ctx.converter);
  };
}

} // namespace tpullm::conversion
