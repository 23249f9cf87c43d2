#pragma once
/// Reference interpreter of Top modules: evaluates a function op by op in f64, following the
/// semantics documented on each op struct in ir/top_ops.hpp. Tensors are xtensor arrays
/// (interp/tensor.hpp): data movement, broadcasting and elementwise math are xtensor
/// expressions; MatMul, MLP and the two attention products are Eigen products over the same
/// storage (interp/linalg.hpp). It is the oracle that ties the frontend's modules to
/// HuggingFace logits before any lowering exists, and the reference for Tpu-vs-Top checks.
/// See docs/interpreter.md.
///
/// Conventions: inputs must match the function's argument types exactly (shape and dtype):
/// token ids and position_ids are i32 (or i64 when the argument says so) integer tensors,
/// activations float tensors labelled with the argument's float dtype. Every float value is kept
/// in f64; only top.Cast rounds (to f32 / bf16 / f16), so results are not rounded to their
/// declared f32 label. Integer results (ArgMax, TopK indices) are i32 tensors.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "tpullm/interp/linalg.hpp"
#include "tpullm/interp/tensor.hpp"
#include "tpullm/interp/weights.hpp"
#include "tpullm/interp/xtensor.hpp"
#include "tpullm/ir/module.hpp"

namespace tpullm::interp {

/// Reference kernels over interpreter tensors, one per Top op semantics (no IR inside).
/// Each throws tpullm::Error (invalid_input) on operands it cannot evaluate.
namespace ref {

namespace detail {
std::int64_t norm_axis(std::int64_t axis, std::int64_t rank);
std::int64_t prod(const Shape& s, std::size_t from, std::size_t to);
inline void require_float(const Tensor& t, const char* what) {
  check(t.is_float(), ErrorKind::invalid_input, "", what, " must be a float tensor, got ",
        t.type().str());
}
inline const IntArray& require_ints(const Tensor& t, const char* what) {
  check(!t.is_float(), ErrorKind::invalid_input, "", what, " must be integers, got ",
        t.type().str());
  return t.ints();
}
/// f(the tensor's array) for a float or an integer tensor; the result array becomes a tensor
/// with `t`'s dtype label.
template <class F>
Tensor map_array(const Tensor& t, F&& f) {
  if (t.is_float())
    return Tensor(FloatArray(f(t.floats())), t.dtype());
  return Tensor(IntArray(f(t.ints())), t.dtype());
}
/// A [outer, D, inner] view of a row-major array, axis `a` in the middle.
template <class A>
auto lanes(A&& arr, std::int64_t outer, std::int64_t D, std::int64_t inner) {
  return xt::reshape_view(std::forward<A>(arr),
                          std::vector<std::size_t>{static_cast<std::size_t>(outer),
                                                   static_cast<std::size_t>(D),
                                                   static_cast<std::size_t>(inner)});
}
} // namespace detail

/// a [..., K] x b [K, N] (b [N, K] when transpose_b, read in place) + bias [N] -> [..., N],
/// a's dtype label; f64 Eigen products split over N across OpenMP threads.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_b, const Tensor* bias);

/// x [..., H] / sqrt(mean(x^2) + eps) * gamma [H], in f64.
Tensor rms_norm(const Tensor& x, const Tensor& gamma, double eps);

/// table.shape[:axis] + indices.shape + table.shape[axis+1:]; an index outside [0, D) throws
/// naming the index and the bound (never clamped or wrapped).
Tensor gather(const Tensor& table, const Tensor& indices, std::int64_t axis);

/// x [B, L, heads, d] with cos/sin [B, L, d/2] (one entry per frequency i): the pair
/// (x1, x2) of frequency i becomes (x1 * cos[i] - x2 * sin[i], x2 * cos[i] + x1 * sin[i]), with
/// halves pairing (x[i], x[i + d/2]) (HF rotate_half) and interleaved (x[2i], x[2i + 1]).
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, ir::RopeMode mode);

/// result.shape[i] = x.shape[order[i]], elements moved accordingly.
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& order);

/// result[i...] = x[offsets + i...], shape `sizes`.
Tensor slice(const Tensor& x, const std::vector<std::int64_t>& offsets,
             const std::vector<std::int64_t>& sizes);

/// Concatenation of `parts` (same dtype, equal outside `axis`) along `axis`.
Tensor concat(const std::vector<const Tensor*>& parts, std::int64_t axis);

/// Elementwise f(a, b) (an xtensor expression) with NumPy broadcasting of float tensors, a's
/// dtype label.
template <class F>
Tensor broadcast_binary(const Tensor& a, const Tensor& b, F&& f) {
  detail::require_float(a, "lhs");
  detail::require_float(b, "rhs");
  FloatArray out;
  try {
    out = f(a.floats(), b.floats());
  } catch (const std::exception&) { // xt::broadcast_error
    throw_error(ErrorKind::invalid_input, "", "shapes ", ir::shape_str(a.shape()), " and ",
                ir::shape_str(b.shape()), " do not broadcast");
  }
  return Tensor(std::move(out), a.dtype());
}

/// x * sigmoid(x) = x / (1 + exp(-x)), elementwise.
template <class E>
auto silu(E&& x) {
  return x / (1.0 + xt::exp(-x));
}

/// silu over every element.
inline Tensor silu(const Tensor& x) {
  detail::require_float(x, "input");
  return Tensor(FloatArray(silu(x.floats())), x.dtype());
}

/// softmax along `axis` (max subtracted first).
Tensor softmax(const Tensor& x, std::int64_t axis);

/// Attention parameters of ref::attention (the FAttention attributes).
struct AttentionParams {
  double scale = 1.0;        ///< multiplies q.k
  std::int64_t q_heads = 1;  ///< query heads
  std::int64_t kv_heads = 1; ///< key/value heads (divides q_heads)
  std::int64_t head_dim = 1; ///< d
  std::int64_t history = 0;  ///< leading key slots holding positions 0..history-1
  bool causal = true;        ///< mask key slots at later positions
  std::int64_t window = 0;   ///< sliding window (0: none): also mask positions <= pos - window
};

/// q [B, L, q_heads, d], k/v [B, history + L, kv_heads, d], position_ids [B, L] (integers)
/// -> [B, L, q_heads * d]. Slot j < history holds position j and exists iff j < pos[b, 0];
/// slot history + t holds pos[b, t]. Query i attends to existing slots with position <=
/// pos[b, i] (all existing slots when !causal), and above pos[b, i] - window under a sliding
/// window; q head h uses kv head h / (q_heads / kv_heads).
/// Per q head: scores = scale * Q K^T over the existing slots and out = P V are Eigen
/// products (slots that do not exist are never read, so garbage in them cannot leak);
/// softmax in f64 with max subtraction between them.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                 const AttentionParams& p);

/// Gated MLP: down(silu(x * gate) * (x * up)); weights [H, I], [H, I], [I, H] (transposed
/// [I, H], [I, H], [H, I] when transpose_b, read in place).
Tensor mlp(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
           bool transpose_b);

/// Routed MLP (top.MoE) in f64: x [..., H], router and expert weights as MLP's (transpose_b:
/// [out, in]); weights = operands 1.. (router, gate_0, up_0, down_0, ...). Per row: softmax of
/// the router logits, the top_k largest (lower expert first on ties), renormalised when asked,
/// and the weighted sum of the chosen experts' SwiGLU MLPs.
Tensor moe(const Tensor& x, std::span<const Tensor* const> w, std::int64_t experts,
           std::int64_t top_k, bool renormalize, bool transpose_b);

/// Index (i32) of the first largest element along `axis`, which becomes 1. (Written out:
/// xtensor 0.24's xt::argmax returns the argmin of a 1-d input.)
Tensor argmax(const Tensor& x, std::int64_t axis);

/// The k largest along `axis`, descending, lower index first on ties: {values, indices (i32)}.
std::vector<Tensor> topk(const Tensor& x, std::int64_t k, std::int64_t axis);

} // namespace ref

/// True when the Top interpreter evaluates ops named `op_name` ("dialect.Name"): the top
/// dialect and builtin ops (no dialect prefix, or "builtin."). Ops of lower dialects (e.g.
/// "tpu.") carry target decisions the reference does not model; they run on their back end.
constexpr bool interprets(std::string_view op_name) {
  const auto dot = op_name.find('.');
  if (dot == std::string_view::npos)
    return true;
  const std::string_view dialect = op_name.substr(0, dot);
  return dialect == "top" || dialect == "builtin";
}

/// True when `op` is a builtin.Weight of a float, unquantized table whose every use is the table
/// (operand 0) of a top.Gather along axis 0: the interpreter then widens only the rows each
/// Gather reads (gather_weight_rows) and never materializes the whole table in the store.
bool gathered_by_rows(const ir::Operation& op);

/// Evaluates functions of one Top module. Weights come from a WeightStore, shared with the
/// interpreters of the model's other stage modules when one is given (the module must outlive
/// the interpreter).
class TopInterpreter {
public:
  /// Interprets functions of `module` (kept by reference), materializing weights into
  /// `weights` (a new store of its own when null).
  explicit TopInterpreter(const ir::Module& module, std::shared_ptr<WeightStore> weights = nullptr)
      : module_(module), weights_(weights ? std::move(weights) : std::make_shared<WeightStore>()) {}

  /// Runs function @name on `inputs` (one per argument, exact shape and dtype of the argument:
  /// ids / position_ids i32 [B, L] as declared, activations float) and returns the Return
  /// operands in order. Throws tpullm::Error: unknown function, input count / type mismatch,
  /// a weight without data, an op outside the top / builtin dialects, or an op that cannot be
  /// evaluated (message names function and op).
  std::vector<Tensor> run(const std::string& function, const std::vector<Tensor>& inputs);

  /// Runs `f` (a function of this interpreter's module) on `inputs`; see run(name, inputs).
  /// Intermediate values are released after their last use.
  std::vector<Tensor> run(const ir::Function& f, const std::vector<Tensor>& inputs);

  /// The materialized weight @name of this interpreter's module (materialized now if needed).
  std::shared_ptr<const Tensor> weight(const std::string& name);
  /// The weight store (possibly shared with other interpreters).
  WeightStore& weights() { return *weights_; }

  /// Called before each op of run() is evaluated, with its operand values (an observation hook:
  /// `tpullm calibrate` records the inputs of the linears). Empty: none. A table gathered by
  /// rows only (gathered_by_rows) is never materialized: its value is null there.
  using Observer =
      std::function<void(const ir::Operation&, const std::vector<std::shared_ptr<const Tensor>>&)>;
  /// Installs `o` (replacing any earlier observer).
  void set_observer(Observer o) { observer_ = std::move(o); }

private:
  using Ptr = std::shared_ptr<const Tensor>;
  using Args = std::vector<Ptr>;
  using Results = std::vector<Ptr>;

  static Results one(Tensor t) { return {std::make_shared<const Tensor>(std::move(t))}; }
  Observer observer_;

  /// The ops.def-driven dispatch: one eval() per op kind of the top / builtin dialects (a kind
  /// of those without an overload fails to compile); any other dialect is refused at run time.
  Results evaluate(const ir::Operation& op, const Args& args);

  Results eval(const ir::builtin::WeightOp& o, const Args&) { return {weight(o.name.name)}; }
  Results eval(const ir::top::MatMulOp& o, const Args& a) {
    return one(ref::matmul(*a[0], *a[1], o.transpose_b, a.size() == 3 ? a[2].get() : nullptr));
  }
  Results eval(const ir::top::RMSNormOp& o, const Args& a) {
    return one(ref::rms_norm(*a[0], *a[1], static_cast<double>(o.eps)));
  }
  Results eval(const ir::top::GatherOp& o, const Args& a) {
    return one(ref::gather(*a[0], *a[1], o.axis));
  }
  Results eval(const ir::top::RopeOp& o, const Args& a) {
    return one(ref::rope(*a[0], *a[1], *a[2], o.mode));
  }
  Results eval(const ir::top::ReshapeOp& o, const Args& a) { return one(a[0]->reshaped(o.shape)); }
  Results eval(const ir::top::PermuteOp& o, const Args& a) {
    return one(ref::permute(*a[0], o.order));
  }
  Results eval(const ir::top::SliceOp& o, const Args& a) {
    return one(ref::slice(*a[0], o.offsets, o.sizes));
  }
  Results eval(const ir::top::ConcatOp& o, const Args& a);
  Results eval(const ir::top::AddOp&, const Args& a) {
    return one(ref::broadcast_binary(
        *a[0], *a[1], [](const auto& x, const auto& y) { return FloatArray(x + y); }));
  }
  Results eval(const ir::top::MulOp&, const Args& a) {
    return one(ref::broadcast_binary(
        *a[0], *a[1], [](const auto& x, const auto& y) { return FloatArray(x * y); }));
  }
  Results eval(const ir::top::SiLUOp&, const Args& a) { return one(ref::silu(*a[0])); }
  Results eval(const ir::top::SoftmaxOp& o, const Args& a) {
    return one(ref::softmax(*a[0], o.axis));
  }
  Results eval(const ir::top::CastOp& o, const Args& a) { return one(a[0]->cast(o.dtype)); }
  Results eval(const ir::top::FAttentionOp& o, const Args& a) {
    const ref::AttentionParams p{
        static_cast<double>(o.scale), o.q_heads, o.kv_heads, o.head_dim, o.history, o.causal,
        o.window.value_or(0)};
    return one(ref::attention(*a[0], *a[1], *a[2], *a[3], p));
  }
  Results eval(const ir::top::MLPOp& o, const Args& a);
  Results eval(const ir::top::MoEOp& o, const Args& a);
  Results eval(const ir::top::ArgMaxOp& o, const Args& a) {
    return one(ref::argmax(*a[0], o.axis));
  }
  Results eval(const ir::top::TopKOp& o, const Args& a) {
    auto r = ref::topk(*a[0], o.k, o.axis);
    return {std::make_shared<const Tensor>(std::move(r[0])),
            std::make_shared<const Tensor>(std::move(r[1]))};
  }
  Results eval(const ir::builtin::ReturnOp&, const Args&) { return {}; } // handled by run()

  const ir::Module& module_;
  std::shared_ptr<WeightStore> weights_;
};

} // namespace tpullm::interp
