// Out-of-line definitions of tpullm/interp/top_interpreter.hpp (compiled once into tpullm_core).
#include "tpullm/interp/top_interpreter.hpp"

namespace tpullm::interp::ref::detail {

std::int64_t norm_axis(std::int64_t axis, std::int64_t rank) {
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  check(a >= 0 && a < rank, ErrorKind::invalid_input, "", "axis ", axis, " out of range for rank ",
        rank);
  return a;
}

std::int64_t prod(const Shape& s, std::size_t from, std::size_t to) {
  std::int64_t n = 1;
  for (std::size_t i = from; i < to; ++i)
    n *= s[i];
  return n;
}

} // namespace tpullm::interp::ref::detail

namespace tpullm::interp::ref {

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_b, const Tensor* bias) {
  detail::require_float(a, "lhs");
  detail::require_float(b, "rhs");
  check(a.rank() >= 1 && b.rank() == 2, ErrorKind::invalid_input, "",
        "matmul needs lhs rank >= 1 and rhs rank 2, got ", ir::shape_str(a.shape()), " x ",
        ir::shape_str(b.shape()));
  const std::int64_t K = a.dim(-1);
  const std::int64_t N = transpose_b ? b.dim(0) : b.dim(1);
  check((transpose_b ? b.dim(1) : b.dim(0)) == K, ErrorKind::invalid_input, "",
        "contracting dims differ: ", ir::shape_str(a.shape()), " x ", ir::shape_str(b.shape()),
        transpose_b ? " (transposed)" : "");
  if (bias) {
    detail::require_float(*bias, "bias");
    check(bias->shape() == Shape{N}, ErrorKind::invalid_input, "", "bias must be [", N, "], got ",
          ir::shape_str(bias->shape()));
  }
  Shape shape = a.shape();
  const std::int64_t M = detail::prod(shape, 0, shape.size() - 1);
  shape.back() = N;
  FloatArray out = FloatArray::from_shape(to_xshape(shape));
  linalg::matmul(a.floats().data(), b.floats().data(), bias ? bias->floats().data() : nullptr,
                 out.data(), M, K, N, transpose_b);
  return Tensor(std::move(out), a.dtype());
}

Tensor rms_norm(const Tensor& x, const Tensor& gamma, double eps) {
  detail::require_float(x, "input");
  detail::require_float(gamma, "gamma");
  check(x.rank() >= 1 && gamma.shape() == Shape{x.dim(-1)}, ErrorKind::invalid_input, "", "gamma ",
        ir::shape_str(gamma.shape()), " does not match input ", ir::shape_str(x.shape()));
  const FloatArray& xa = x.floats();
  const auto H = static_cast<double>(x.dim(-1));
  const FloatArray ss =
      xt::sum(xa * xa, {xa.dimension() - 1}, xt::keep_dims | xt::evaluation_strategy::immediate);
  const FloatArray inv = 1.0 / xt::sqrt(ss / H + eps);
  return Tensor(FloatArray(xa * inv * gamma.floats()), x.dtype());
}

Tensor gather(const Tensor& table, const Tensor& indices, std::int64_t axis) {
  const std::int64_t a = detail::norm_axis(axis, table.rank());
  const auto au = static_cast<std::size_t>(a);
  const Shape ts = table.shape();
  const std::int64_t outer = detail::prod(ts, 0, au), D = ts[au],
                     inner = detail::prod(ts, au + 1, ts.size());
  const IntArray& idx = detail::require_ints(indices, "indices");
  const auto J = static_cast<std::int64_t>(idx.size());
  for (std::int64_t j = 0; j < J; ++j) {
    const std::int64_t ix = idx.data()[j];
    check(ix >= 0 && ix < D, ErrorKind::invalid_input, "", "gather index ", ix,
          " (at flat position ", j, ") is out of range [0, ", D, ") of axis ", a, " of ",
          ir::shape_str(ts));
  }
  Shape shape(ts.begin(), ts.begin() + a);
  const Shape is = indices.shape();
  shape.insert(shape.end(), is.begin(), is.end());
  shape.insert(shape.end(), ts.begin() + a + 1, ts.end());
  return detail::map_array(table, [&](const auto& t) {
    auto out = std::decay_t<decltype(t)>::from_shape(to_xshape(shape));
    auto src = detail::lanes(t, outer, D, inner);
    auto dst = detail::lanes(out, outer, J, inner);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < J; ++j)
        xt::view(dst, o, j, xt::all()) = xt::view(src, o, idx.data()[j], xt::all());
    return out;
  });
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, ir::RopeMode mode) {
  detail::require_float(x, "input");
  detail::require_float(cos, "cos");
  detail::require_float(sin, "sin");
  check(x.rank() == 4 && x.dim(3) % 2 == 0, ErrorKind::invalid_input, "",
        "rope input must be [B, L, heads, even d], got ", ir::shape_str(x.shape()));
  const std::int64_t B = x.dim(0), L = x.dim(1), d = x.dim(3), h = d / 2;
  const Shape cs{B, L, h};
  check(cos.shape() == cs && sin.shape() == cs, ErrorKind::invalid_input, "", "cos/sin must be ",
        ir::shape_str(cs), ", got ", ir::shape_str(cos.shape()), " and ",
        ir::shape_str(sin.shape()));
  const FloatArray& xa = x.floats();
  // cos/sin broadcast over the heads axis.
  const auto c = xt::view(cos.floats(), xt::all(), xt::all(), xt::newaxis(), xt::all());
  const auto s = xt::view(sin.floats(), xt::all(), xt::all(), xt::newaxis(), xt::all());
  FloatArray out = FloatArray::from_shape(xa.shape());
  const auto rotate = [&](auto first, auto second) {
    const auto x1 = xt::view(xa, xt::all(), xt::all(), xt::all(), first);
    const auto x2 = xt::view(xa, xt::all(), xt::all(), xt::all(), second);
    xt::view(out, xt::all(), xt::all(), xt::all(), first) = x1 * c - x2 * s;
    xt::view(out, xt::all(), xt::all(), xt::all(), second) = x2 * c + x1 * s;
  };
  switch (mode) {
  case ir::RopeMode::halves:
    rotate(xt::range(0, h), xt::range(h, d));
    break;
  case ir::RopeMode::interleaved:
    rotate(xt::range(0, d, 2), xt::range(1, d, 2));
    break;
  }
  return Tensor(std::move(out), x.dtype());
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& order) {
  check(static_cast<std::int64_t>(order.size()) == x.rank(), ErrorKind::invalid_input, "", "order ",
        ir::shape_str(order), " does not match rank ", x.rank());
  std::vector<bool> seen(order.size(), false);
  for (auto o : order) {
    check(o >= 0 && o < x.rank() && !seen[static_cast<std::size_t>(o)], ErrorKind::invalid_input,
          "", "order ", ir::shape_str(order), " is not a permutation");
    seen[static_cast<std::size_t>(o)] = true;
  }
  const std::vector<std::size_t> perm(order.begin(), order.end());
  return detail::map_array(x, [&](const auto& a) { return xt::transpose(a, perm); });
}

Tensor slice(const Tensor& x, const std::vector<std::int64_t>& offsets,
             const std::vector<std::int64_t>& sizes) {
  const Shape xs = x.shape();
  check(offsets.size() == xs.size() && sizes.size() == xs.size(), ErrorKind::invalid_input, "",
        "slice needs one offset and size per axis of ", ir::shape_str(xs));
  xt::xstrided_slice_vector sv;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    check(offsets[i] >= 0 && sizes[i] >= 0 && offsets[i] + sizes[i] <= xs[i],
          ErrorKind::invalid_input, "", "slice offsets ", ir::shape_str(offsets), " sizes ",
          ir::shape_str(sizes), " out of bounds of ", ir::shape_str(xs));
    sv.push_back(xt::range(offsets[i], offsets[i] + sizes[i]));
  }
  return detail::map_array(x, [&](const auto& a) { return xt::strided_view(a, sv); });
}

Tensor concat(const std::vector<const Tensor*>& parts, std::int64_t axis) {
  check(!parts.empty(), ErrorKind::invalid_input, "", "concat of nothing");
  const Tensor& first = *parts.front();
  const Shape fs = first.shape();
  const auto a = static_cast<std::size_t>(detail::norm_axis(axis, first.rank()));
  Shape shape = fs;
  shape[a] = 0;
  for (const Tensor* p : parts) {
    const Shape ps = p->shape();
    check(p->dtype() == first.dtype() && ps.size() == fs.size(), ErrorKind::invalid_input, "",
          "concat operands differ: ", first.type().str(), " vs ", p->type().str());
    for (std::size_t i = 0; i < shape.size(); ++i)
      check(i == a || ps[i] == fs[i], ErrorKind::invalid_input, "",
            "concat operands differ outside axis ", a, ": ", ir::shape_str(fs), " vs ",
            ir::shape_str(ps));
    shape[a] += ps[a];
  }
  xt::xstrided_slice_vector sv(shape.size(), xt::all());
  const auto fill = [&](auto& out, auto get) {
    std::int64_t at = 0;
    for (const Tensor* p : parts) {
      const std::int64_t n = p->dim(static_cast<std::int64_t>(a));
      sv[a] = xt::range(at, at + n);
      xt::strided_view(out, sv) = get(*p);
      at += n;
    }
    return out;
  };
  if (first.is_float()) {
    FloatArray out = FloatArray::from_shape(to_xshape(shape));
    return Tensor(fill(out, [](const Tensor& t) -> const FloatArray& { return t.floats(); }),
                  first.dtype());
  }
  IntArray out = IntArray::from_shape(to_xshape(shape));
  return Tensor(fill(out, [](const Tensor& t) -> const IntArray& { return t.ints(); }),
                first.dtype());
}

Tensor softmax(const Tensor& x, std::int64_t axis) {
  detail::require_float(x, "input");
  const auto a = static_cast<std::size_t>(detail::norm_axis(axis, x.rank()));
  const FloatArray& xa = x.floats();
  const auto keep = xt::keep_dims | xt::evaluation_strategy::immediate;
  const FloatArray e = xt::exp(xa - xt::amax(xa, {a}, keep));
  return Tensor(FloatArray(e / xt::sum(e, {a}, keep)), x.dtype());
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                 const AttentionParams& p) {
  detail::require_float(q, "q");
  detail::require_float(k, "k");
  detail::require_float(v, "v");
  const IntArray& pa = detail::require_ints(pos, "position_ids");
  check(p.q_heads > 0 && p.kv_heads > 0 && p.q_heads % p.kv_heads == 0 && p.history >= 0,
        ErrorKind::invalid_input, "", "bad heads q=", p.q_heads, " kv=", p.kv_heads);
  const std::int64_t QH = p.q_heads, KVH = p.kv_heads, d = p.head_dim;
  check(q.rank() == 4 && q.dim(2) == QH && q.dim(3) == d, ErrorKind::invalid_input, "",
        "q must be [B, L, ", QH, ", ", d, "], got ", ir::shape_str(q.shape()));
  const std::int64_t B = q.dim(0), L = q.dim(1), S = p.history + L, group = QH / KVH;
  const Shape kvs{B, S, KVH, d};
  check(k.shape() == kvs && v.shape() == kvs, ErrorKind::invalid_input, "", "k and v must be ",
        ir::shape_str(kvs), ", got ", ir::shape_str(k.shape()), " and ", ir::shape_str(v.shape()));
  check(pos.shape() == Shape{B, L}, ErrorKind::invalid_input, "", "position_ids must be [", B, ", ",
        L, "], got ", ir::shape_str(pos.shape()));
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  FloatArray out = FloatArray::from_shape(to_xshape({B, L, QH * d}));
  const std::int64_t* P = pa.data();
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t first = L > 0 ? P[b * L] : 0;
    // The existing slots, in slot order: history slots [0, min(first, history)), then the
    // L new ones. Their keys and values are gathered into contiguous [E, KVH, d] blocks.
    std::vector<std::int64_t> slot, slot_pos;
    for (std::int64_t j = 0; j < S; ++j)
      if (j >= p.history || j < first) {
        slot.push_back(j);
        slot_pos.push_back(j < p.history ? j : P[b * L + (j - p.history)]);
      }
    const auto E = static_cast<std::int64_t>(slot.size());
    const auto kv_rows = [&](const FloatArray& src) {
      FloatArray rows = FloatArray::from_shape(to_xshape({E, KVH, d}));
      auto dst = detail::lanes(rows, 1, E, KVH * d);
      auto from = detail::lanes(src, B, S, KVH * d);
      for (std::int64_t e = 0; e < E; ++e)
        xt::view(dst, 0, e, xt::all()) =
            xt::view(from, b, slot[static_cast<std::size_t>(e)], xt::all());
      return rows;
    };
    const FloatArray kc = kv_rows(k.floats()), vc = kv_rows(v.floats());
    // visible(i, e): slot e may be attended to by query i.
    std::vector<char> visible(static_cast<std::size_t>(L * E));
    for (std::int64_t i = 0; i < L; ++i) {
      const std::int64_t qp = P[b * L + i];
      bool any = false;
      for (std::int64_t e = 0; e < E; ++e) {
        const std::int64_t sp = slot_pos[static_cast<std::size_t>(e)];
        const bool vis = !p.causal || (sp <= qp && (p.window <= 0 || sp > qp - p.window));
        visible[static_cast<std::size_t>(i * E + e)] = vis;
        any = any || vis;
      }
      check(any, ErrorKind::invalid_input, "", "query ", i, " (position ", qp, ", batch ", b,
            ") sees no key slot");
    }
    std::vector<double> score(static_cast<std::size_t>(L * E));
    for (std::int64_t h = 0; h < QH; ++h) {
      const std::int64_t kh = h / group;
      const double* qh = q.floats().data() + (b * L * QH + h) * d;
      linalg::scaled_scores(qh, QH * d, kc.data() + kh * d, KVH * d, score.data(), L, E, d,
                            p.scale);
      for (std::int64_t i = 0; i < L; ++i) {
        double* s = score.data() + i * E;
        const char* vis = visible.data() + i * E;
        double mx = kNegInf;
        for (std::int64_t e = 0; e < E; ++e)
          if (vis[e])
            mx = std::max(mx, s[e]);
        double sum = 0.0;
        for (std::int64_t e = 0; e < E; ++e) {
          s[e] = vis[e] ? std::exp(s[e] - mx) : 0.0;
          sum += s[e];
        }
        for (std::int64_t e = 0; e < E; ++e)
          s[e] /= sum;
      }
      linalg::weighted_values(score.data(), vc.data() + kh * d, KVH * d,
                              out.data() + b * L * QH * d + h * d, QH * d, L, E, d);
    }
  }
  return Tensor(std::move(out), q.dtype());
}

Tensor mlp(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
           bool transpose_b) {
  const Tensor g = matmul(x, gate, transpose_b, nullptr);
  const Tensor u = matmul(x, up, transpose_b, nullptr);
  check(g.shape() == u.shape(), ErrorKind::invalid_input, "",
        "gate and up disagree: ", ir::shape_str(g.shape()), " vs ", ir::shape_str(u.shape()));
  const Tensor act(FloatArray(silu(g.floats()) * u.floats()), g.dtype());
  return matmul(act, down, transpose_b, nullptr);
}

Tensor moe(const Tensor& x, std::span<const Tensor* const> w, std::int64_t experts,
           std::int64_t top_k, bool renormalize, bool transpose_b) {
  check(static_cast<std::int64_t>(w.size()) == 1 + 3 * experts && top_k >= 1 && top_k <= experts,
        ErrorKind::invalid_input, "",
        "moe needs a router and 3 weights per expert, 1 <= top_k <= ", experts);
  const Tensor probs = softmax(matmul(x, *w[0], transpose_b, nullptr), -1);
  const std::int64_t H = x.dim(-1), rows = x.numel() / std::max<std::int64_t>(H, 1);
  const double* p = probs.floats().data();
  const double* xd = x.floats().data();
  // choice[e]: the (row, weight) pairs that chose expert e
  std::vector<std::vector<std::pair<std::int64_t, double>>> choice(
      static_cast<std::size_t>(experts));
  std::vector<std::int64_t> order(static_cast<std::size_t>(experts));
  for (std::int64_t t = 0; t < rows; ++t) {
    const double* pt = p + t * experts;
    for (std::int64_t e = 0; e < experts; ++e) // as the kernel's moe_route: the model's values
      check(std::isfinite(pt[e]), ErrorKind::invalid_input, "", "the router probabilities of row ",
            t, " are not finite (expert ", e,
            "): the model's weights (or the layers before) produce values that are not finite");
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t b) { return pt[a] > pt[b]; });
    double chosen = 0;
    for (std::int64_t j = 0; j < top_k; ++j)
      chosen += pt[order[static_cast<std::size_t>(j)]];
    for (std::int64_t j = 0; j < top_k; ++j) {
      const std::int64_t e = order[static_cast<std::size_t>(j)];
      choice[static_cast<std::size_t>(e)].push_back({t, renormalize ? pt[e] / chosen : pt[e]});
    }
  }
  FloatArray out = FloatArray::from_shape(to_xshape(Shape{rows, H}));
  std::fill(out.begin(), out.end(), 0.0);
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto& c = choice[static_cast<std::size_t>(e)];
    if (c.empty())
      continue;
    const auto n = static_cast<std::int64_t>(c.size());
    FloatArray xe = FloatArray::from_shape(to_xshape(Shape{n, H}));
    for (std::int64_t r = 0; r < n; ++r)
      std::copy_n(xd + c[static_cast<std::size_t>(r)].first * H, H, xe.data() + r * H);
    const auto at = static_cast<std::size_t>(1 + 3 * e);
    const Tensor y =
        mlp(Tensor(std::move(xe), x.dtype()), *w[at], *w[at + 1], *w[at + 2], transpose_b);
    const double* yd = y.floats().data();
    for (std::int64_t r = 0; r < n; ++r) {
      const auto [t, g] = c[static_cast<std::size_t>(r)];
      for (std::int64_t h = 0; h < H; ++h)
        out.data()[t * H + h] += g * yd[r * H + h];
    }
  }
  return Tensor(std::move(out), x.dtype()).reshaped(x.shape());
}

Tensor argmax(const Tensor& x, std::int64_t axis) {
  detail::require_float(x, "input");
  const auto a = static_cast<std::size_t>(detail::norm_axis(axis, x.rank()));
  Shape shape = x.shape();
  const std::int64_t outer = detail::prod(shape, 0, a), D = shape[a],
                     inner = detail::prod(shape, a + 1, shape.size());
  shape[a] = 1;
  IntArray out = IntArray::from_shape(to_xshape(shape));
  const auto in = detail::lanes(x.floats(), outer, D, inner);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < D; ++j)
        if (in(o, j, i) > in(o, best, i))
          best = j;
      out.data()[o * inner + i] = best;
    }
  return Tensor(std::move(out), ir::DType::i32);
}

std::vector<Tensor> topk(const Tensor& x, std::int64_t k, std::int64_t axis) {
  detail::require_float(x, "input");
  const auto a = static_cast<std::size_t>(detail::norm_axis(axis, x.rank()));
  Shape shape = x.shape();
  const std::int64_t outer = detail::prod(shape, 0, a), D = shape[a],
                     inner = detail::prod(shape, a + 1, shape.size());
  check(k >= 1 && k <= D, ErrorKind::invalid_input, "", "k = ", k, " must be in [1, ", D, "]");
  shape[a] = k;
  FloatArray vals = FloatArray::from_shape(to_xshape(shape));
  IntArray idxs = IntArray::from_shape(to_xshape(shape));
  const auto in = detail::lanes(x.floats(), outer, D, inner);
  auto vo = detail::lanes(vals, outer, k, inner);
  auto io = detail::lanes(idxs, outer, k, inner);
  std::vector<std::int64_t> order(static_cast<std::size_t>(D));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](std::int64_t l, std::int64_t r) { return in(o, l, i) > in(o, r, i); });
      for (std::int64_t j = 0; j < k; ++j) {
        vo(o, j, i) = in(o, order[static_cast<std::size_t>(j)], i);
        io(o, j, i) = order[static_cast<std::size_t>(j)];
      }
    }
  return {Tensor(std::move(vals), x.dtype()), Tensor(std::move(idxs), ir::DType::i32)};
}

} // namespace tpullm::interp::ref

namespace tpullm::interp {

auto TopInterpreter::run(const std::string& function, const std::vector<Tensor>& inputs)
    -> std::vector<Tensor> {
  const ir::Function* f = module_.find_function(function);
  check(f != nullptr, ErrorKind::invalid_input, "module @" + module_.name(), "has no function @",
        function);
  return run(*f, inputs);
}

auto TopInterpreter::run(const ir::Function& f, const std::vector<Tensor>& inputs)
    -> std::vector<Tensor> {
  const std::string where = "@" + f.name();
  check(inputs.size() == f.num_arguments(), ErrorKind::invalid_input, where, "expects ",
        f.num_arguments(), " inputs, got ", inputs.size());
  std::unordered_map<const ir::Value*, Ptr> env;
  std::unordered_map<const ir::Value*, std::size_t> last_use;
  std::size_t n = 0;
  for (const auto& op : f.ops()) {
    for (const ir::Value* v : op->operands())
      last_use[v] = n;
    ++n;
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ir::TensorType& want = f.argument(i)->type();
    check(inputs[i].shape() == want.shape && inputs[i].dtype() == want.dtype && !want.quant,
          ErrorKind::invalid_input, where, "argument #", i, " %", f.argument_name(i), " expects ",
          want.str(), ", got ", inputs[i].type().str());
    env[f.argument(i)] = std::make_shared<const Tensor>(inputs[i]);
  }
  // Tables only gathered by rows (the embedding) are never widened whole: their builtin.Weight
  // binds nothing (null) and each Gather widens the rows it reads.
  std::unordered_map<const ir::Value*, const ir::Weight*> by_rows;
  for (const auto& op : f.ops())
    if (const auto* w = op->as<ir::builtin::WeightOp>(); w && gathered_by_rows(*op))
      if (const ir::Weight* table = module_.find_weight(w->name.name))
        by_rows[op->result(0)] = table;
  n = 0;
  for (const auto& op_ptr : f.ops()) {
    const ir::Operation& op = *op_ptr;
    std::vector<Ptr> args;
    for (const ir::Value* v : op.operands()) {
      auto it = env.find(v);
      check(it != env.end(), ErrorKind::internal, where, op.name(),
            " uses a value that is not defined before it");
      args.push_back(it->second);
    }
    if (observer_)
      observer_(op, args);
    if (op.is<ir::builtin::ReturnOp>()) {
      std::vector<Tensor> out;
      for (const auto& a : args)
        out.push_back(*a);
      return out;
    }
    const std::string at = where + ": " + std::string(op.name()) +
                           (op.loc().known() ? " at " + op.loc().str() : std::string());
    Results results;
    try {
      const auto rows = op.num_operands() > 0 ? by_rows.find(op.operand(0)) : by_rows.end();
      if (op.is<ir::builtin::WeightOp>() && by_rows.count(op.result(0)))
        results = {nullptr};
      else if (rows != by_rows.end())
        results = one(gather_weight_rows(*rows->second, *args[1]));
      else
        results = evaluate(op, args);
    } catch (const Error& e) {
      throw e.within(at);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::invalid_input, at, e.what());
    }
    check(results.size() == op.num_results(), ErrorKind::internal, at, "produced ", results.size(),
          " results, the op declares ", op.num_results());
    for (std::size_t r = 0; r < results.size(); ++r) {
      const ir::TensorType& want = op.result(r)->type();
      if (results[r]) // null: a table gathered by rows only, never materialized
        check(results[r]->shape() == want.shape &&
                  (want.quant || results[r]->dtype() == want.dtype),
              ErrorKind::internal, at, "result #", r, " is ", results[r]->type().str(),
              " but the op declares ", want.str());
      env[op.result(r)] = results[r];
    }
    for (const ir::Value* v : op.operands())
      if (last_use[v] == n)
        env.erase(v);
    ++n;
  }
  throw_error(ErrorKind::invalid_input, where, "has no builtin.Return");
}

bool gathered_by_rows(const ir::Operation& op) {
  const auto* w = op.as<ir::builtin::WeightOp>();
  if (!w || op.num_results() != 1 || !op.result(0)->has_uses())
    return false;
  const ir::TensorType& t = op.result(0)->type();
  // A float table, or ggml rows (each gathered row dequantized alone).
  if ((t.quant ? !ir::quant_stored_as_rows(*t.quant) : !ir::is_float(t.dtype)) || t.shape.empty())
    return false;
  const auto rank = static_cast<std::int64_t>(t.shape.size());
  for (const ir::Operation* u : op.result(0)->users()) {
    const auto* g = u->as<ir::top::GatherOp>();
    if (!g || (g->axis != 0 && g->axis != -rank) || u->num_operands() != 2 ||
        u->operand(0) != op.result(0) || u->operand(1) == op.result(0))
      return false;
  }
  return true;
}

auto TopInterpreter::weight(const std::string& name) -> std::shared_ptr<const Tensor> {
  const ir::Weight* w = module_.find_weight(name);
  check(w != nullptr, ErrorKind::invalid_input, "weight @" + name, "is not in module @",
        module_.name());
  return weights_->get(*w);
}

auto TopInterpreter::evaluate(const ir::Operation& op, const Args& args) -> Results {
  return ir::visit_op(op.op(), [&](const auto& o) -> Results {
    using Op = std::decay_t<decltype(o)>;
    constexpr std::string_view name = ir::op_name(ir::kind_of<Op>());
    if constexpr (interprets(name)) {
      return eval(o, args);
    } else {
      throw_error(ErrorKind::unsupported, "", name,
                  " is not a Top op: the reference interpreter evaluates top.* and builtin "
                  "ops only (lower-level modules run on their back end)");
    }
  });
}

auto TopInterpreter::eval(const ir::top::ConcatOp& o, const Args& a) -> Results {
  std::vector<const Tensor*> parts;
  for (const auto& p : a)
    parts.push_back(p.get());
  return one(ref::concat(parts, o.axis));
}

auto TopInterpreter::eval(const ir::top::MLPOp& o, const Args& a) -> Results {
  switch (o.activation) {
  case ir::Activation::silu:
    break;
  }
  return one(ref::mlp(*a[0], *a[1], *a[2], *a[3], o.transpose_b));
}

auto TopInterpreter::eval(const ir::top::MoEOp& o, const Args& a) -> Results {
  switch (o.activation) {
  case ir::Activation::silu:
    break;
  }
  std::vector<const Tensor*> w;
  for (std::size_t i = 1; i < a.size(); ++i)
    w.push_back(a[i].get());
  return one(ref::moe(*a[0], w, o.experts, o.top_k, o.renormalize, o.transpose_b));
}

} // namespace tpullm::interp
