#pragma once
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

namespace tpullm::interp {

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

} // namespace tpullm::interp
