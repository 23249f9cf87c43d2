#pragma once
// A frozen copy of the Top interpreter as it was before it moved onto xtensor and Eigen (commit
// ee12a2c: interp/tensor.hpp, interp/weights.hpp, interp/top_interpreter.hpp), kept only so
// that tests/unit/test_interpreter_vs_old.cpp can check the new interpreter against it to
// 1e-12 on every shared checkpoint. Do not use it elsewhere and do not "fix" it: its value is
// that it is the old code. Changes from the original: one namespace (tpullm::old_interp), one
// file, and a catch-all eval() so op kinds added to ops.def later do not break the build.
/// The reference interpreter's value type: a dense row-major tensor with a static shape and an
/// IR element type. Float tensors (f32, f16, bf16, f64) hold their elements as f64, integer
/// tensors (i8, u8, i4, u4, i32, i64, i1) as int64. The dtype is the IR type label: values are
/// never rounded implicitly, only by `round_to` (what top.Cast does) and by `to_bytes`.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpullm/ir/dtype.hpp"
#include "tpullm/ir/type.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::old_interp {

/// Shape of a tensor, outermost first; empty = scalar.
using Shape = std::vector<std::int64_t>;

/// Number of elements of `shape` (1 for a scalar); throws on a negative dimension.
inline std::int64_t num_elements(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    check(d >= 0, ErrorKind::invalid_input, "", "negative dimension in shape ",
          ir::shape_str(shape));
    n *= d;
  }
  return n;
}

/// Row-major strides (in elements) of `shape`.
inline std::vector<std::int64_t> row_major_strides(const Shape& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;)
    s[i - 1] = s[i] * shape[i];
  return s;
}

/// `x` rounded to the nearest value of float type `t` (ties to even): f64 unchanged; f32 by the
/// C++ conversion; bf16 / f16 through f32 and support/float16.hpp (as a device holding f32
/// activations narrows them). Integer targets are an error.
inline double round_to(double x, ir::DType t) {
  switch (t) {
  case ir::DType::f64:
    return x;
  case ir::DType::f32:
    return static_cast<double>(static_cast<float>(x));
  case ir::DType::bf16:
    return static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(x))));
  case ir::DType::f16:
    return static_cast<double>(f16_to_f32(f32_to_f16(static_cast<float>(x))));
  case ir::DType::i8:
  case ir::DType::u8:
  case ir::DType::i4:
  case ir::DType::u4:
  case ir::DType::i32:
  case ir::DType::i64:
  case ir::DType::i1:
    break;
  }
  throw_error(ErrorKind::internal, "round_to", "target ", ir::name(t), " is not a float type");
}

/// A dense row-major tensor. Float dtypes store `floats()` (f64), integer dtypes `ints()`
/// (int64); the other vector is empty.
class Tensor {
public:
  /// An f32 scalar 0.
  Tensor() : Tensor(Shape{}, ir::DType::f32) {}

  /// Zero-filled tensor of `shape` and `dtype`.
  Tensor(Shape shape, ir::DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
    const auto n = static_cast<std::size_t>(num_elements(shape_));
    if (ir::is_float(dtype_))
      f_.assign(n, 0.0);
    else
      i_.assign(n, 0);
  }

  /// Float tensor `shape` with row-major `values` (as given, not rounded), labelled `dtype`.
  static Tensor from_floats(Shape shape, std::vector<double> values,
                            ir::DType dtype = ir::DType::f32) {
    check(ir::is_float(dtype), ErrorKind::invalid_input, "Tensor::from_floats", "dtype ",
          ir::name(dtype), " is not a float type");
    Tensor t;
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    check(static_cast<std::int64_t>(values.size()) == num_elements(t.shape_),
          ErrorKind::invalid_input, "Tensor::from_floats", values.size(), " values for shape ",
          ir::shape_str(t.shape_));
    t.f_ = std::move(values);
    return t;
  }
  /// Float tensor from f32 values (e.g. a golden file tensor), labelled `dtype`.
  static Tensor from_f32(Shape shape, std::span<const float> values,
                         ir::DType dtype = ir::DType::f32) {
    return from_floats(std::move(shape), std::vector<double>(values.begin(), values.end()), dtype);
  }
  /// Integer tensor `shape` with row-major `values`, labelled `dtype` (i32 for ids/positions).
  static Tensor from_ints(Shape shape, std::vector<std::int64_t> values,
                          ir::DType dtype = ir::DType::i32) {
    check(ir::is_integer(dtype), ErrorKind::invalid_input, "Tensor::from_ints", "dtype ",
          ir::name(dtype), " is not an integer type");
    Tensor t;
    t.f_.clear();
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    check(static_cast<std::int64_t>(values.size()) == num_elements(t.shape_),
          ErrorKind::invalid_input, "Tensor::from_ints", values.size(), " values for shape ",
          ir::shape_str(t.shape_));
    t.i_ = std::move(values);
    return t;
  }

  /// Tensor from raw little-endian row-major bytes of `dtype` (i4/u4 packed two per byte, low
  /// nibble first; i1 one byte each). Widening is exact. Throws when the byte count differs.
  static Tensor from_bytes(Shape shape, ir::DType dtype, std::span<const std::byte> bytes) {
    Tensor t(std::move(shape), dtype);
    const std::int64_t n = t.numel();
    check(static_cast<std::int64_t>(bytes.size()) == ir::byte_size(dtype, n),
          ErrorKind::invalid_input, "Tensor::from_bytes", bytes.size(), " bytes for ", n, " ",
          ir::name(dtype), " elements of shape ", ir::shape_str(t.shape_), " (expected ",
          ir::byte_size(dtype, n), ")");
    const std::byte* p = bytes.data();
    auto load = [&]<class T>(T, std::int64_t i) {
      T v;
      std::memcpy(&v, p + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
      return v;
    };
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      switch (dtype) {
      case ir::DType::f32:
        t.f_[k] = load(float{}, i);
        break;
      case ir::DType::f64:
        t.f_[k] = load(double{}, i);
        break;
      case ir::DType::f16:
        t.f_[k] = f16_to_f32(load(std::uint16_t{}, i));
        break;
      case ir::DType::bf16:
        t.f_[k] = bf16_to_f32(load(std::uint16_t{}, i));
        break;
      case ir::DType::i8:
        t.i_[k] = load(std::int8_t{}, i);
        break;
      case ir::DType::u8:
      case ir::DType::i1:
        t.i_[k] = load(std::uint8_t{}, i);
        break;
      case ir::DType::i32:
        t.i_[k] = load(std::int32_t{}, i);
        break;
      case ir::DType::i64:
        t.i_[k] = load(std::int64_t{}, i);
        break;
      case ir::DType::u4:
      case ir::DType::i4: {
        const auto byte = std::to_integer<unsigned>(p[i / 2]);
        const unsigned nib = (i % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
        t.i_[k] = dtype == ir::DType::i4 && nib >= 8 ? static_cast<std::int64_t>(nib) - 16
                                                     : static_cast<std::int64_t>(nib);
        break;
      }
      }
    }
    return t;
  }

  /// Raw little-endian row-major bytes in this tensor's dtype (floats rounded to nearest even,
  /// integers must fit the type: throws otherwise).
  std::vector<std::byte> to_bytes() const {
    const std::int64_t n = numel();
    std::vector<std::byte> out(static_cast<std::size_t>(ir::byte_size(dtype_, n)));
    auto store = [&]<class T>(T v, std::int64_t i) {
      std::memcpy(out.data() + i * static_cast<std::int64_t>(sizeof(T)), &v, sizeof(T));
    };
    auto fits = [&](std::int64_t v, std::int64_t lo, std::int64_t hi) {
      check(v >= lo && v <= hi, ErrorKind::invalid_input, "Tensor::to_bytes", "value ", v,
            " does not fit ", ir::name(dtype_));
      return v;
    };
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      switch (dtype_) {
      case ir::DType::f32:
        store(static_cast<float>(f_[k]), i);
        break;
      case ir::DType::f64:
        store(f_[k], i);
        break;
      case ir::DType::f16:
        store(f32_to_f16(static_cast<float>(f_[k])), i);
        break;
      case ir::DType::bf16:
        store(f32_to_bf16(static_cast<float>(f_[k])), i);
        break;
      case ir::DType::i8:
        store(static_cast<std::int8_t>(fits(i_[k], -128, 127)), i);
        break;
      case ir::DType::u8:
        store(static_cast<std::uint8_t>(fits(i_[k], 0, 255)), i);
        break;
      case ir::DType::i1:
        store(static_cast<std::uint8_t>(fits(i_[k], 0, 1)), i);
        break;
      case ir::DType::i32:
        store(static_cast<std::int32_t>(fits(i_[k], INT32_MIN, INT32_MAX)), i);
        break;
      case ir::DType::i64:
        store(i_[k], i);
        break;
      case ir::DType::u4:
      case ir::DType::i4: {
        const std::int64_t v =
            dtype_ == ir::DType::i4 ? fits(i_[k], -8, 7) & 0xF : fits(i_[k], 0, 15);
        auto& b = out[static_cast<std::size_t>(i / 2)];
        b |= static_cast<std::byte>(i % 2 == 0 ? v : v << 4);
        break;
      }
      }
    }
    return out;
  }

  /// Element values as f32 (float tensors only), e.g. to compare with a golden file.
  std::vector<float> to_f32() const {
    require_float("to_f32");
    return std::vector<float>(f_.begin(), f_.end());
  }

  /// Dimensions, outermost first.
  const Shape& shape() const { return shape_; }
  /// Element type label.
  ir::DType dtype() const { return dtype_; }
  /// The IR type this tensor has (never quantized).
  ir::TensorType type() const { return ir::TensorType(shape_, dtype_); }
  /// Number of dimensions.
  std::int64_t rank() const { return static_cast<std::int64_t>(shape_.size()); }
  /// Dimension `i`, negative counting from the back.
  std::int64_t dim(std::int64_t i) const {
    return shape_.at(static_cast<std::size_t>(i < 0 ? i + rank() : i));
  }
  /// Number of elements (1 for a scalar).
  std::int64_t numel() const { return num_elements(shape_); }
  /// True for f32 / f16 / bf16 / f64 (values in floats()).
  bool is_float() const { return ir::is_float(dtype_); }

  /// Float elements, row-major (empty for integer tensors).
  std::vector<double>& floats() { return f_; }
  const std::vector<double>& floats() const { return f_; }
  /// Integer elements, row-major (empty for float tensors).
  std::vector<std::int64_t>& ints() { return i_; }
  const std::vector<std::int64_t>& ints() const { return i_; }

  /// Float element at a row-major flat index.
  double f(std::int64_t flat) const { return f_[static_cast<std::size_t>(flat)]; }
  /// Integer element at a row-major flat index.
  std::int64_t i(std::int64_t flat) const { return i_[static_cast<std::size_t>(flat)]; }
  /// Float element at a multi-index (bounds-checked, for tests).
  double at(std::initializer_list<std::int64_t> idx) const {
    require_float("at");
    return f_[static_cast<std::size_t>(flat_index(idx))];
  }
  /// Integer element at a multi-index (bounds-checked, for tests).
  std::int64_t int_at(std::initializer_list<std::int64_t> idx) const {
    check(!is_float(), ErrorKind::invalid_input, "Tensor::int_at", "tensor is ", ir::name(dtype_));
    return i_[static_cast<std::size_t>(flat_index(idx))];
  }

  /// Same elements with another shape of equal element count.
  Tensor reshaped(Shape shape) const {
    check(num_elements(shape) == numel(), ErrorKind::invalid_input, "Tensor::reshaped",
          ir::shape_str(shape_), " -> ", ir::shape_str(shape), " changes the element count");
    Tensor t = *this;
    t.shape_ = std::move(shape);
    return t;
  }

  /// A float copy with every element rounded to float type `dtype` (what top.Cast computes).
  Tensor cast(ir::DType dtype) const {
    require_float("cast");
    Tensor t = *this;
    t.dtype_ = dtype;
    for (auto& v : t.f_)
      v = round_to(v, dtype);
    return t;
  }

private:
  void require_float(const char* what) const {
    check(is_float(), ErrorKind::invalid_input, std::string("Tensor::") + what, "tensor is ",
          ir::name(dtype_), ", not a float type");
  }
  std::int64_t flat_index(std::initializer_list<std::int64_t> idx) const {
    check(static_cast<std::int64_t>(idx.size()) == rank(), ErrorKind::invalid_input, "Tensor",
          idx.size(), " indices for rank ", rank());
    std::int64_t flat = 0, a = 0;
    for (auto v : idx) {
      check(v >= 0 && v < shape_[static_cast<std::size_t>(a)], ErrorKind::invalid_input, "Tensor",
            "index ", v, " out of range for axis ", a, " of ", ir::shape_str(shape_));
      flat = flat * shape_[static_cast<std::size_t>(a)] + v;
      ++a;
    }
    return flat;
  }

  Shape shape_;
  ir::DType dtype_ = ir::DType::f32;
  std::vector<double> f_;
  std::vector<std::int64_t> i_;
};

} // namespace tpullm::old_interp
/// Materialization of module weights into interpreter tensors: plain weights are widened
/// exactly from their stored bytes, GPTQ / AWQ 4-bit weights are dequantized to their logical
/// [K, N] float values (exact in f32: a 4-bit integer times an f16 scale).

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tpullm/conversion/quant_repack.hpp"
#include "tpullm/ir/module.hpp"

namespace tpullm::old_interp {

namespace detail {

/// The elements of part `p` of weight `w` as T (p.dtype must be `want`), copied (unaligned ok).
template <class T>
std::vector<T> part_as(const ir::Weight& w, const ir::WeightPart& p, ir::DType want) {
  const std::string where = "weight @" + w.name;
  check(p.dtype == want, ErrorKind::unsupported, where, "part '", p.role, "' is ",
        ir::name(p.dtype), ", expected ", ir::name(want));
  const std::int64_t n = num_elements(p.shape);
  check(static_cast<std::int64_t>(p.bytes.size()) == n * static_cast<std::int64_t>(sizeof(T)),
        ErrorKind::invalid_input, where, "part '", p.role, "' ", ir::shape_str(p.shape), " has ",
        p.bytes.size(), " bytes, expected ", n * static_cast<std::int64_t>(sizeof(T)));
  std::vector<T> v(static_cast<std::size_t>(n));
  if (n > 0)
    std::memcpy(v.data(), p.bytes.data(), p.bytes.size());
  return v;
}

/// Dequantizes a GPTQ / AWQ weight of logical type [K, N] u4 to [K, N] f32.
inline Tensor dequantize_weight(const ir::Weight& w) {
  const std::string where = "weight @" + w.name;
  const ir::QuantSpec& q = *w.type.quant;
  check(w.type.rank() == 2, ErrorKind::invalid_input, where,
        "a quantized weight must be [K, N], got ", w.type.str());
  check(w.type.dtype == ir::DType::u4, ErrorKind::unsupported, where,
        "only 4-bit (u4) quantized weights are supported, got ", w.type.str());
  const std::int64_t K = w.type.shape[0], N = w.type.shape[1];
  const std::int64_t group = q.group_size == 0 ? K : q.group_size;
  const auto qweight = part_as<std::int32_t>(w, w.part("qweight"), ir::DType::i32);
  const auto scales = part_as<std::uint16_t>(w, w.part("scales"), ir::DType::f16);
  // Without stored zeros the weight is symmetric around 8.
  std::vector<std::int32_t> qzeros;
  const bool gptq = q.format == ir::QuantFormat::gptq;
  if (const auto* z = w.find_part("qzeros")) {
    qzeros = part_as<std::int32_t>(w, *z, ir::DType::i32);
  } else {
    check(!q.zero_point, ErrorKind::invalid_input, where,
          "quant spec has zero_point but the weight has no 'qzeros' part");
    check(K % group == 0 && N % 8 == 0, ErrorKind::invalid_input, where, "K=", K,
          " must be a multiple of group ", group, " and N=", N, " of 8");
    qzeros.assign(static_cast<std::size_t>(K / group * N / 8),
                  gptq ? std::int32_t{0x77777777}
                       : std::int32_t{static_cast<std::int32_t>(0x88888888u)});
  }
  conversion::Int4Plain plain;
  try {
    switch (q.format) {
    case ir::QuantFormat::gptq: {
      std::vector<std::int32_t> g_idx;
      if (const auto* g = w.find_part("g_idx"))
        g_idx = part_as<std::int32_t>(w, *g, ir::DType::i32);
      plain = conversion::unpack_gptq(qweight, qzeros, scales, g_idx, K, N, group, /*v1*/ 1);
      break;
    }
    case ir::QuantFormat::awq:
      plain = conversion::unpack_awq(qweight, qzeros, scales, K, N, group);
      break;
    case ir::QuantFormat::packed:
      throw_error(ErrorKind::unsupported, where,
                  "the kernel 'packed' layout is not a Top weight format; the interpreter reads "
                  "gptq and awq checkpoint layouts");
    }
  } catch (const std::invalid_argument& e) {
    throw_error(ErrorKind::invalid_input, where, e.what());
  }
  const std::vector<float> deq = plain.dequantize();
  return Tensor::from_floats({K, N}, std::vector<double>(deq.begin(), deq.end()), ir::DType::f32);
}

} // namespace detail

/// Materializes `w` as an interpreter tensor of its logical shape:
///  - plain weight (one part "data"): elements widened exactly from the stored dtype; if the
///    stored dtype differs from the declared one, values are rounded to the declared dtype;
///  - quantized weight (u4 + QuantSpec gptq|awq; parts "qweight" i32, "scales" f16, "qzeros" i32,
///    optional "g_idx" i32 for gptq): dequantized [K, N], labelled f32.
/// Throws tpullm::Error naming the weight when it has no data or its parts are malformed.
inline Tensor materialize_weight(const ir::Weight& w) {
  const std::string where = "weight @" + w.name;
  check(w.has_data(), ErrorKind::invalid_input, where,
        "has no data (module parsed from text?); the interpreter needs weight bytes");
  if (w.type.quant)
    return detail::dequantize_weight(w);
  const ir::WeightPart& p = w.part("data");
  check(num_elements(p.shape) == w.type.num_elements(), ErrorKind::invalid_input, where,
        "stored shape ", ir::shape_str(p.shape), " does not match the declared ", w.type.str());
  check(ir::is_float(p.dtype) == ir::is_float(w.type.dtype), ErrorKind::unsupported, where,
        "stored ", ir::name(p.dtype), " cannot be read as declared ", w.type.str());
  Tensor t;
  try {
    t = Tensor::from_bytes(w.type.shape, p.dtype, p.bytes);
  } catch (const Error& e) {
    throw e.within(where);
  }
  if (p.dtype != w.type.dtype)
    t = t.is_float() ? t.cast(w.type.dtype)
                     : Tensor::from_ints(w.type.shape, t.ints(), w.type.dtype);
  return t;
}

/// Materialized weights of one module, cached by name so each is widened / dequantized once.
class WeightCache {
public:
  /// `module` must outlive the cache.
  explicit WeightCache(const ir::Module& module) : module_(&module) {}

  /// The materialized weight @name (throws naming it when unknown or without data).
  std::shared_ptr<const Tensor> get(const std::string& name) {
    auto it = cache_.find(name);
    if (it != cache_.end())
      return it->second;
    const ir::Weight* w = module_->find_weight(name);
    check(w != nullptr, ErrorKind::invalid_input, "weight @" + name, "is not in module @",
          module_->name());
    auto t = std::make_shared<const Tensor>(materialize_weight(*w));
    cache_.emplace(name, t);
    return t;
  }
  /// Number of weights materialized so far.
  std::size_t size() const { return cache_.size(); }
  /// Drops every cached tensor.
  void clear() { cache_.clear(); }

private:
  const ir::Module* module_;
  std::map<std::string, std::shared_ptr<const Tensor>> cache_;
};

} // namespace tpullm::old_interp
/// Reference interpreter of Top modules: evaluates a function op by op in f64 with plain loops,
/// following the semantics documented on each op struct in ir/top_ops.hpp. It is the oracle
/// that ties the frontend's modules to HuggingFace logits before any lowering exists, and later
/// the reference for Tpu-vs-Top equivalence checks. See docs/interpreter.md.
///
/// Conventions: inputs must match the function's argument types exactly (shape and dtype):
/// token ids and position_ids are i32 (or i64 when the argument says so) integer tensors,
/// activations float tensors labelled with the argument's float dtype. Every float value is kept
/// in f64; only top.Cast rounds (to f32 / bf16 / f16), so results are not rounded to their
/// declared f32 label. Integer results (ArgMax, TopK indices) are i32 tensors.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "tpullm/ir/module.hpp"

namespace tpullm::old_interp {

/// Reference kernels over interpreter tensors, one per Top op semantics (no IR inside).
/// Each throws tpullm::Error (invalid_input) on operands it cannot evaluate.
namespace ref {

namespace detail {
inline std::int64_t norm_axis(std::int64_t axis, std::int64_t rank) {
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  check(a >= 0 && a < rank, ErrorKind::invalid_input, "", "axis ", axis, " out of range for rank ",
        rank);
  return a;
}
inline std::int64_t prod(const Shape& s, std::size_t from, std::size_t to) {
  std::int64_t n = 1;
  for (std::size_t i = from; i < to; ++i)
    n *= s[i];
  return n;
}
/// out[i] = in[src[i]] for float or integer storage.
inline Tensor take(const Tensor& in, Shape shape, const std::vector<std::int64_t>& src) {
  Tensor out(std::move(shape), in.dtype());
  if (in.is_float())
    for (std::size_t i = 0; i < src.size(); ++i)
      out.floats()[i] = in.f(src[i]);
  else
    for (std::size_t i = 0; i < src.size(); ++i)
      out.ints()[i] = in.i(src[i]);
  return out;
}
/// Calls f(flat output index, input offset) over every element of `shape` in row-major order,
/// with the input offset advancing by `strides` (one per output axis).
template <class F>
void for_each_strided(const Shape& shape, const std::vector<std::int64_t>& strides,
                      std::int64_t base, F&& f) {
  const std::int64_t n = num_elements(shape);
  if (n == 0)
    return;
  const std::size_t r = shape.size();
  std::vector<std::int64_t> idx(r, 0);
  std::int64_t off = base;
  for (std::int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (std::size_t a = r; a-- > 0;) {
      if (++idx[a] < shape[a]) {
        off += strides[a];
        break;
      }
      off -= strides[a] * (shape[a] - 1);
      idx[a] = 0;
    }
  }
}
inline void require_float(const Tensor& t, const char* what) {
  check(t.is_float(), ErrorKind::invalid_input, "", what, " must be a float tensor, got ",
        t.type().str());
}
inline std::int64_t index_value(const Tensor& t, std::int64_t flat) {
  check(!t.is_float(), ErrorKind::invalid_input, "", "indices must be integers, got ",
        t.type().str());
  return t.i(flat);
}
} // namespace detail

/// a [..., K] x b [K, N] (b [N, K] when transpose_b) + bias [N] -> [..., N], a's dtype label;
/// f64 dot products with the K loop innermost over contiguous memory.
inline Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_b, const Tensor* bias) {
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
  // bt: [N, K] row-major so both dot operands are contiguous.
  std::vector<double> bt;
  const double* bp = b.floats().data();
  if (!transpose_b) {
    bt.resize(static_cast<std::size_t>(N * K));
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        bt[static_cast<std::size_t>(n * K + k)] = bp[k * N + n];
    bp = bt.data();
  }
  if (bias) {
    detail::require_float(*bias, "bias");
    check(bias->shape() == Shape{N}, ErrorKind::invalid_input, "", "bias must be [", N, "], got ",
          ir::shape_str(bias->shape()));
  }
  Shape shape = a.shape();
  shape.back() = N;
  Tensor out(shape, a.dtype());
  const std::int64_t M = detail::prod(a.shape(), 0, a.shape().size() - 1);
  const double* ap = a.floats().data();
  double* op = out.floats().data();
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      const double* x = ap + m * K;
      const double* w = bp + n * K;
      for (std::int64_t k = 0; k < K; ++k)
        acc += x[k] * w[k];
      op[m * N + n] = acc + (bias ? bias->f(n) : 0.0);
    }
  return out;
}

/// x [..., H] / sqrt(mean(x^2) + eps) * gamma [H], in f64.
inline Tensor rms_norm(const Tensor& x, const Tensor& gamma, double eps) {
  detail::require_float(x, "input");
  detail::require_float(gamma, "gamma");
  check(x.rank() >= 1 && gamma.shape() == Shape{x.dim(-1)}, ErrorKind::invalid_input, "", "gamma ",
        ir::shape_str(gamma.shape()), " does not match input ", ir::shape_str(x.shape()));
  const std::int64_t H = x.dim(-1), rows = H ? x.numel() / H : 0;
  Tensor out(x.shape(), x.dtype());
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (std::int64_t h = 0; h < H; ++h)
      ss += x.f(r * H + h) * x.f(r * H + h);
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(H) + eps);
    for (std::int64_t h = 0; h < H; ++h)
      out.floats()[static_cast<std::size_t>(r * H + h)] = x.f(r * H + h) * inv * gamma.f(h);
  }
  return out;
}

/// table.shape[:axis] + indices.shape + table.shape[axis+1:]; an index outside [0, D) throws
/// naming the index and the bound (never clamped or wrapped).
inline Tensor gather(const Tensor& table, const Tensor& indices, std::int64_t axis) {
  const std::int64_t a = detail::norm_axis(axis, table.rank());
  const auto au = static_cast<std::size_t>(a);
  const Shape& ts = table.shape();
  const std::int64_t outer = detail::prod(ts, 0, au), D = ts[au],
                     inner = detail::prod(ts, au + 1, ts.size()), J = indices.numel();
  Shape shape(ts.begin(), ts.begin() + a);
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), ts.begin() + a + 1, ts.end());
  std::vector<std::int64_t> src;
  src.reserve(static_cast<std::size_t>(outer * J * inner));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < J; ++j) {
      const std::int64_t ix = detail::index_value(indices, j);
      check(ix >= 0 && ix < D, ErrorKind::invalid_input, "", "gather index ", ix,
            " (at flat position ", j, ") is out of range [0, ", D, ") of axis ", a, " of ",
            ir::shape_str(ts));
      for (std::int64_t i = 0; i < inner; ++i)
        src.push_back((o * D + ix) * inner + i);
    }
  return detail::take(table, std::move(shape), src);
}

/// x [B, L, heads, d] with cos/sin [B, L, d/2] (one entry per frequency i): the pair
/// (x1, x2) of frequency i becomes (x1 * cos[i] - x2 * sin[i], x2 * cos[i] + x1 * sin[i]), with
/// halves pairing (x[i], x[i + d/2]) (HF rotate_half) and interleaved (x[2i], x[2i + 1]).
inline Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, ir::RopeMode mode) {
  detail::require_float(x, "input");
  detail::require_float(cos, "cos");
  detail::require_float(sin, "sin");
  check(x.rank() == 4 && x.dim(3) % 2 == 0, ErrorKind::invalid_input, "",
        "rope input must be [B, L, heads, even d], got ", ir::shape_str(x.shape()));
  const std::int64_t B = x.dim(0), L = x.dim(1), Hh = x.dim(2), d = x.dim(3), h = d / 2;
  const Shape cs{B, L, h};
  check(cos.shape() == cs && sin.shape() == cs, ErrorKind::invalid_input, "", "cos/sin must be ",
        ir::shape_str(cs), ", got ", ir::shape_str(cos.shape()), " and ",
        ir::shape_str(sin.shape()));
  Tensor out(x.shape(), x.dtype());
  for (std::int64_t bl = 0; bl < B * L; ++bl)
    for (std::int64_t hd = 0; hd < Hh; ++hd) {
      const std::int64_t base = (bl * Hh + hd) * d;
      for (std::int64_t i = 0; i < h; ++i) {
        std::int64_t i1 = 0, i2 = 0;
        switch (mode) {
        case ir::RopeMode::halves:
          i1 = base + i;
          i2 = base + i + h;
          break;
        case ir::RopeMode::interleaved:
          i1 = base + 2 * i;
          i2 = base + 2 * i + 1;
          break;
        }
        const double c = cos.f(bl * h + i), s = sin.f(bl * h + i), x1 = x.f(i1), x2 = x.f(i2);
        out.floats()[static_cast<std::size_t>(i1)] = x1 * c - x2 * s;
        out.floats()[static_cast<std::size_t>(i2)] = x2 * c + x1 * s;
      }
    }
  return out;
}

/// result.shape[i] = x.shape[order[i]], elements moved accordingly.
inline Tensor permute(const Tensor& x, const std::vector<std::int64_t>& order) {
  check(static_cast<std::int64_t>(order.size()) == x.rank(), ErrorKind::invalid_input, "", "order ",
        ir::shape_str(order), " does not match rank ", x.rank());
  const auto in_strides = row_major_strides(x.shape());
  Shape shape;
  std::vector<std::int64_t> strides;
  std::vector<bool> seen(order.size(), false);
  for (auto o : order) {
    check(o >= 0 && o < x.rank() && !seen[static_cast<std::size_t>(o)], ErrorKind::invalid_input,
          "", "order ", ir::shape_str(order), " is not a permutation");
    seen[static_cast<std::size_t>(o)] = true;
    shape.push_back(x.shape()[static_cast<std::size_t>(o)]);
    strides.push_back(in_strides[static_cast<std::size_t>(o)]);
  }
  std::vector<std::int64_t> src(static_cast<std::size_t>(x.numel()));
  detail::for_each_strided(shape, strides, 0, [&](std::int64_t i, std::int64_t off) {
    src[static_cast<std::size_t>(i)] = off;
  });
  return detail::take(x, std::move(shape), src);
}

/// result[i...] = x[offsets + i...], shape `sizes`.
inline Tensor slice(const Tensor& x, const std::vector<std::int64_t>& offsets,
                    const std::vector<std::int64_t>& sizes) {
  check(static_cast<std::int64_t>(offsets.size()) == x.rank() &&
            static_cast<std::int64_t>(sizes.size()) == x.rank(),
        ErrorKind::invalid_input, "", "slice needs one offset and size per axis of ",
        ir::shape_str(x.shape()));
  const auto strides = row_major_strides(x.shape());
  std::int64_t base = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    check(offsets[i] >= 0 && sizes[i] >= 0 && offsets[i] + sizes[i] <= x.shape()[i],
          ErrorKind::invalid_input, "", "slice offsets ", ir::shape_str(offsets), " sizes ",
          ir::shape_str(sizes), " out of bounds of ", ir::shape_str(x.shape()));
    base += offsets[i] * strides[i];
  }
  std::vector<std::int64_t> src(static_cast<std::size_t>(num_elements(sizes)));
  detail::for_each_strided(sizes, strides, base, [&](std::int64_t i, std::int64_t off) {
    src[static_cast<std::size_t>(i)] = off;
  });
  return detail::take(x, sizes, src);
}

/// Concatenation of `parts` (same dtype, equal outside `axis`) along `axis`.
inline Tensor concat(const std::vector<const Tensor*>& parts, std::int64_t axis) {
  check(!parts.empty(), ErrorKind::invalid_input, "", "concat of nothing");
  const Tensor& first = *parts.front();
  const auto a = static_cast<std::size_t>(detail::norm_axis(axis, first.rank()));
  Shape shape = first.shape();
  shape[a] = 0;
  for (const Tensor* p : parts) {
    check(p->dtype() == first.dtype() && p->rank() == first.rank(), ErrorKind::invalid_input, "",
          "concat operands differ: ", first.type().str(), " vs ", p->type().str());
    for (std::size_t i = 0; i < shape.size(); ++i)
      check(i == a || p->shape()[i] == first.shape()[i], ErrorKind::invalid_input, "",
            "concat operands differ outside axis ", a, ": ", ir::shape_str(first.shape()), " vs ",
            ir::shape_str(p->shape()));
    shape[a] += p->shape()[a];
  }
  Tensor out(shape, first.dtype());
  const std::int64_t outer = detail::prod(shape, 0, a),
                     inner = detail::prod(shape, a + 1, shape.size());
  std::int64_t dst = 0;
  for (std::int64_t o = 0; o < outer; ++o)
    for (const Tensor* p : parts) {
      const std::int64_t run = p->shape()[a] * inner;
      for (std::int64_t i = 0; i < run; ++i, ++dst) {
        const auto d = static_cast<std::size_t>(dst);
        if (out.is_float())
          out.floats()[d] = p->f(o * run + i);
        else
          out.ints()[d] = p->i(o * run + i);
      }
    }
  return out;
}

/// Elementwise f(a, b) with NumPy broadcasting (float tensors), a's dtype label.
template <class F>
Tensor broadcast_binary(const Tensor& a, const Tensor& b, F&& f) {
  detail::require_float(a, "lhs");
  detail::require_float(b, "rhs");
  const std::size_t r = std::max(a.shape().size(), b.shape().size());
  Shape shape(r);
  std::vector<std::int64_t> sa(r, 0), sb(r, 0);
  const auto ta = row_major_strides(a.shape()), tb = row_major_strides(b.shape());
  for (std::size_t i = 0; i < r; ++i) {
    const std::size_t pa = r - a.shape().size(), pb = r - b.shape().size();
    const std::int64_t da = i < pa ? 1 : a.shape()[i - pa], db = i < pb ? 1 : b.shape()[i - pb];
    check(da == db || da == 1 || db == 1, ErrorKind::invalid_input, "", "shapes ",
          ir::shape_str(a.shape()), " and ", ir::shape_str(b.shape()), " do not broadcast");
    shape[i] = da == 1 ? db : da;
    sa[i] = (i < pa || da == 1) ? 0 : ta[i - pa];
    sb[i] = (i < pb || db == 1) ? 0 : tb[i - pb];
  }
  Tensor out(shape, a.dtype());
  std::vector<std::int64_t> ia(static_cast<std::size_t>(out.numel()));
  detail::for_each_strided(shape, sa, 0, [&](std::int64_t i, std::int64_t off) {
    ia[static_cast<std::size_t>(i)] = off;
  });
  detail::for_each_strided(shape, sb, 0, [&](std::int64_t i, std::int64_t off) {
    out.floats()[static_cast<std::size_t>(i)] = f(a.f(ia[static_cast<std::size_t>(i)]), b.f(off));
  });
  return out;
}

/// x * sigmoid(x) = x / (1 + exp(-x)), elementwise.
inline double silu(double x) {
  return x / (1.0 + std::exp(-x));
}

/// silu over every element.
inline Tensor silu(const Tensor& x) {
  detail::require_float(x, "input");
  Tensor out = x;
  for (auto& v : out.floats())
    v = silu(v);
  return out;
}

/// softmax along `axis` (max subtracted first).
inline Tensor softmax(const Tensor& x, std::int64_t axis) {
  detail::require_float(x, "input");
  const auto a = static_cast<std::size_t>(detail::norm_axis(axis, x.rank()));
  const std::int64_t outer = detail::prod(x.shape(), 0, a), D = x.shape()[a],
                     inner = detail::prod(x.shape(), a + 1, x.shape().size());
  Tensor out(x.shape(), x.dtype());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) { return (o * D + j) * inner + i; };
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < D; ++j)
        mx = std::max(mx, x.f(at(j)));
      double sum = 0.0;
      for (std::int64_t j = 0; j < D; ++j)
        sum += (out.floats()[static_cast<std::size_t>(at(j))] = std::exp(x.f(at(j)) - mx));
      for (std::int64_t j = 0; j < D; ++j)
        out.floats()[static_cast<std::size_t>(at(j))] /= sum;
    }
  return out;
}

/// Attention parameters of ref::attention (the FAttention attributes).
struct AttentionParams {
  double scale = 1.0;        ///< multiplies q.k
  std::int64_t q_heads = 1;  ///< query heads
  std::int64_t kv_heads = 1; ///< key/value heads (divides q_heads)
  std::int64_t head_dim = 1; ///< d
  std::int64_t history = 0;  ///< leading key slots holding positions 0..history-1
  bool causal = true;        ///< mask key slots at later positions
};

/// q [B, L, q_heads, d], k/v [B, history + L, kv_heads, d], position_ids [B, L] (integers)
/// -> [B, L, q_heads * d]. Slot j < history holds position j and exists iff j < pos[b, 0];
/// slot history + t holds pos[b, t]. Query i attends to existing slots with position <=
/// pos[b, i] (all existing slots when !causal); q head h uses kv head h / (q_heads / kv_heads).
/// Softmax in f64 with max subtraction.
inline Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                        const AttentionParams& p) {
  detail::require_float(q, "q");
  detail::require_float(k, "k");
  detail::require_float(v, "v");
  check(!pos.is_float(), ErrorKind::invalid_input, "", "position_ids must be integers, got ",
        pos.type().str());
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
  Tensor out({B, L, QH * d}, q.dtype());
  std::vector<std::int64_t> slot_pos(static_cast<std::size_t>(S));
  std::vector<bool> exists(static_cast<std::size_t>(S));
  std::vector<double> score(static_cast<std::size_t>(S));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t first = L > 0 ? pos.i(b * L) : 0;
    for (std::int64_t j = 0; j < S; ++j) {
      const auto ju = static_cast<std::size_t>(j);
      slot_pos[ju] = j < p.history ? j : pos.i(b * L + (j - p.history));
      exists[ju] = j >= p.history || j < first;
    }
    for (std::int64_t i = 0; i < L; ++i) {
      const std::int64_t qp = pos.i(b * L + i);
      for (std::int64_t h = 0; h < QH; ++h) {
        const std::int64_t kh = h / group;
        const double* qv = q.floats().data() + ((b * L + i) * QH + h) * d;
        double mx = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (std::int64_t j = 0; j < S; ++j) {
          const auto ju = static_cast<std::size_t>(j);
          const bool visible = exists[ju] && (!p.causal || slot_pos[ju] <= qp);
          if (!visible) {
            score[ju] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const double* kv = k.floats().data() + ((b * S + j) * KVH + kh) * d;
          double dot = 0.0;
          for (std::int64_t c = 0; c < d; ++c)
            dot += qv[c] * kv[c];
          score[ju] = dot * p.scale;
          mx = std::max(mx, score[ju]);
          any = true;
        }
        check(any, ErrorKind::invalid_input, "", "query ", i, " (position ", qp, ", batch ", b,
              ") sees no key slot");
        double sum = 0.0;
        for (auto& s : score) {
          s = std::isinf(s) && s < 0 ? 0.0 : std::exp(s - mx);
          sum += s;
        }
        double* o = out.floats().data() + (b * L + i) * QH * d + h * d;
        for (std::int64_t j = 0; j < S; ++j) {
          const double w = score[static_cast<std::size_t>(j)] / sum;
          if (w == 0.0)
            continue;
          const double* vv = v.floats().data() + ((b * S + j) * KVH + kh) * d;
          for (std::int64_t c = 0; c < d; ++c)
            o[c] += w * vv[c];
        }
      }
    }
  }
  return out;
}

/// Gated MLP: down(silu(x * gate) * (x * up)); weights [H, I], [H, I], [I, H] (transposed
/// [I, H], [I, H], [H, I] when transpose_b).
inline Tensor mlp(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                  bool transpose_b) {
  Tensor g = matmul(x, gate, transpose_b, nullptr);
  const Tensor u = matmul(x, up, transpose_b, nullptr);
  check(g.shape() == u.shape(), ErrorKind::invalid_input, "",
        "gate and up disagree: ", ir::shape_str(g.shape()), " vs ", ir::shape_str(u.shape()));
  for (std::size_t i = 0; i < g.floats().size(); ++i)
    g.floats()[i] = silu(g.floats()[i]) * u.floats()[i];
  return matmul(g, down, transpose_b, nullptr);
}

/// Index (i32) of the first largest element along `axis`, which becomes 1.
inline Tensor argmax(const Tensor& x, std::int64_t axis) {
  detail::require_float(x, "input");
  const auto a = static_cast<std::size_t>(detail::norm_axis(axis, x.rank()));
  const std::int64_t outer = detail::prod(x.shape(), 0, a), D = x.shape()[a],
                     inner = detail::prod(x.shape(), a + 1, x.shape().size());
  Shape shape = x.shape();
  shape[a] = 1;
  Tensor out(shape, ir::DType::i32);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < D; ++j)
        if (x.f((o * D + j) * inner + i) > x.f((o * D + best) * inner + i))
          best = j;
      out.ints()[static_cast<std::size_t>(o * inner + i)] = best;
    }
  return out;
}

/// The k largest along `axis`, descending, lower index first on ties: {values, indices (i32)}.
inline std::vector<Tensor> topk(const Tensor& x, std::int64_t k, std::int64_t axis) {
  detail::require_float(x, "input");
  const auto a = static_cast<std::size_t>(detail::norm_axis(axis, x.rank()));
  const std::int64_t outer = detail::prod(x.shape(), 0, a), D = x.shape()[a],
                     inner = detail::prod(x.shape(), a + 1, x.shape().size());
  check(k >= 1 && k <= D, ErrorKind::invalid_input, "", "k = ", k, " must be in [1, ", D, "]");
  Shape shape = x.shape();
  shape[a] = k;
  Tensor vals(shape, x.dtype()), idxs(shape, ir::DType::i32);
  std::vector<std::int64_t> order(static_cast<std::size_t>(D));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto val = [&](std::int64_t j) { return x.f((o * D + j) * inner + i); };
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](std::int64_t l, std::int64_t r) { return val(l) > val(r); });
      for (std::int64_t j = 0; j < k; ++j) {
        const auto dst = static_cast<std::size_t>((o * k + j) * inner + i);
        vals.floats()[dst] = val(order[static_cast<std::size_t>(j)]);
        idxs.ints()[dst] = order[static_cast<std::size_t>(j)];
      }
    }
  return {std::move(vals), std::move(idxs)};
}

} // namespace ref

/// Evaluates functions of one Top module. Weights are materialized on first use and cached for
/// the interpreter's lifetime (the module must outlive it).
class TopInterpreter {
public:
  /// Interprets functions of `module` (kept by reference).
  explicit TopInterpreter(const ir::Module& module) : module_(module), weights_(module) {}

  /// Runs function @name on `inputs` (one per argument, exact shape and dtype of the argument:
  /// ids / position_ids i32 [B, L] as declared, activations float) and returns the Return
  /// operands in order. Throws tpullm::Error: unknown function, input count / type mismatch,
  /// a weight without data, or an op that cannot be evaluated (message names function and op).
  std::vector<Tensor> run(const std::string& function, const std::vector<Tensor>& inputs) {
    const ir::Function* f = module_.find_function(function);
    check(f != nullptr, ErrorKind::invalid_input, "module @" + module_.name(), "has no function @",
          function);
    return run(*f, inputs);
  }

  /// Runs `f` (a function of this interpreter's module) on `inputs`; see run(name, inputs).
  std::vector<Tensor> run(const ir::Function& f, const std::vector<Tensor>& inputs) {
    const std::string where = "@" + f.name();
    check(inputs.size() == f.num_arguments(), ErrorKind::invalid_input, where, "expects ",
          f.num_arguments(), " inputs, got ", inputs.size());
    std::unordered_map<const ir::Value*, Ptr> env;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const ir::TensorType& want = f.argument(i)->type();
      check(inputs[i].shape() == want.shape && inputs[i].dtype() == want.dtype && !want.quant,
            ErrorKind::invalid_input, where, "argument #", i, " %", f.argument_name(i), " expects ",
            want.str(), ", got ", inputs[i].type().str());
      env[f.argument(i)] = std::make_shared<const Tensor>(inputs[i]);
    }
    for (const auto& op : f.ops()) {
      std::vector<Ptr> args;
      for (const ir::Value* v : op->operands()) {
        auto it = env.find(v);
        check(it != env.end(), ErrorKind::internal, where, op->name(),
              " uses a value that is not defined before it");
        args.push_back(it->second);
      }
      if (op->is<ir::builtin::ReturnOp>()) {
        std::vector<Tensor> out;
        for (const auto& a : args)
          out.push_back(*a);
        return out;
      }
      std::vector<Ptr> results;
      const std::string at = where + ": " + std::string(op->name()) +
                             (op->loc().known() ? " at " + op->loc().str() : std::string());
      try {
        results = ir::visit_op(op->op(), [&](const auto& o) { return eval(o, args); });
      } catch (const Error& e) {
        throw e.within(at);
      } catch (const std::invalid_argument& e) {
        throw Error(ErrorKind::invalid_input, at, e.what());
      }
      check(results.size() == op->num_results(), ErrorKind::internal, at, "produced ",
            results.size(), " results, the op declares ", op->num_results());
      for (std::size_t r = 0; r < results.size(); ++r) {
        const ir::TensorType& want = op->result(r)->type();
        check(results[r]->shape() == want.shape &&
                  (want.quant || results[r]->dtype() == want.dtype),
              ErrorKind::internal, at, "result #", r, " is ", results[r]->type().str(),
              " but the op declares ", want.str());
        env[op->result(r)] = results[r];
      }
    }
    throw_error(ErrorKind::invalid_input, where, "has no builtin.Return");
  }

  /// The materialized weights (dequantized / widened), cached by name.
  WeightCache& weights() { return weights_; }

private:
  using Ptr = std::shared_ptr<const Tensor>;
  using Args = std::vector<Ptr>;
  using Results = std::vector<Ptr>;

  static Results one(Tensor t) { return {std::make_shared<const Tensor>(std::move(t))}; }

  // One evaluation per op kind; ops.def gaining a kind without an overload here fails to
  // compile in run()'s visit.
  Results eval(const ir::builtin::WeightOp& o, const Args&) { return {weights_.get(o.name.name)}; }
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
  Results eval(const ir::top::ConcatOp& o, const Args& a) {
    std::vector<const Tensor*> parts;
    for (const auto& p : a)
      parts.push_back(p.get());
    return one(ref::concat(parts, o.axis));
  }
  Results eval(const ir::top::AddOp&, const Args& a) {
    return one(ref::broadcast_binary(*a[0], *a[1], [](double x, double y) { return x + y; }));
  }
  Results eval(const ir::top::MulOp&, const Args& a) {
    return one(ref::broadcast_binary(*a[0], *a[1], [](double x, double y) { return x * y; }));
  }
  Results eval(const ir::top::SiLUOp&, const Args& a) { return one(ref::silu(*a[0])); }
  Results eval(const ir::top::SoftmaxOp& o, const Args& a) {
    return one(ref::softmax(*a[0], o.axis));
  }
  Results eval(const ir::top::CastOp& o, const Args& a) { return one(a[0]->cast(o.dtype)); }
  Results eval(const ir::top::FAttentionOp& o, const Args& a) {
    const ref::AttentionParams p{
        static_cast<double>(o.scale), o.q_heads, o.kv_heads, o.head_dim, o.history, o.causal};
    return one(ref::attention(*a[0], *a[1], *a[2], *a[3], p));
  }
  Results eval(const ir::top::MLPOp& o, const Args& a) {
    switch (o.activation) {
    case ir::Activation::silu:
      break;
    }
    return one(ref::mlp(*a[0], *a[1], *a[2], *a[3], o.transpose_b));
  }
  Results eval(const ir::top::ArgMaxOp& o, const Args& a) {
    return one(ref::argmax(*a[0], o.axis));
  }
  Results eval(const ir::top::TopKOp& o, const Args& a) {
    auto r = ref::topk(*a[0], o.k, o.axis);
    return {std::make_shared<const Tensor>(std::move(r[0])),
            std::make_shared<const Tensor>(std::move(r[1]))};
  }
  Results eval(const ir::builtin::ReturnOp&, const Args&) { return {}; } // handled by run()
  template <class Op>
  Results eval(const Op&, const Args&) {
    throw_error(ErrorKind::unsupported, "", "the old interpreter has no case for this op");
  }

  const ir::Module& module_;
  WeightCache weights_;
};

} // namespace tpullm::old_interp
