#pragma once
/// The reference interpreter's value type: an xtensor array with an IR element type. Float
/// tensors (f32, f16, bf16, f64) hold an `xt::xarray` of double, integer tensors (i8, u8, i4,
/// u4, i32, i64, i1) one of int64, both row-major. The dtype is the IR type label:
/// values are never rounded implicitly, only by `round_to` (what top.Cast does) and by
/// `to_bytes`. Shapes, strides, views and broadcasting are xtensor's; what it cannot do
/// (decoding bf16 / f16 / packed 4-bit bytes) is the small part written here.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <sys/mman.h>

#include "tpullm/interp/xtensor.hpp"
#include "tpullm/ir/dtype.hpp"
#include "tpullm/ir/type.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::interp {

/// Allocates the interpreter's arrays: std::allocator below 8 MiB; from 8 MiB (a model's
/// widened weights) an anonymous mapping advised for transparent huge pages and populated up
/// front where the kernel supports it (MADV_POPULATE_WRITE, Linux 5.14+; otherwise pages
/// fault in as written). Widening Qwen2.5-0.5B's embedding writes 1.1 GB of fresh memory; on
/// the development VM that took 3.4-3.9 s page by page and 0.3 s this way. Under
/// AddressSanitizer every array comes from std::allocator, so all of them keep their redzones.
template <class T>
struct ArrayAllocator {
  using value_type = T;
  /// Arrays of at least this many bytes are mapped.
#if defined(__SANITIZE_ADDRESS__)
  static constexpr std::size_t kMapBytes = SIZE_MAX;
#else
  static constexpr std::size_t kMapBytes = std::size_t{8} << 20;
#endif

  ArrayAllocator() = default;
  template <class U>
  ArrayAllocator(const ArrayAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kMapBytes)
      return std::allocator<T>().allocate(n);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    ::madvise(p, bytes, MADV_HUGEPAGE); // advice only: failure leaves 4 KiB pages
#endif
#ifdef MADV_POPULATE_WRITE
    ::madvise(p, bytes, MADV_POPULATE_WRITE); // advice only: failure leaves lazy faulting
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kMapBytes)
      std::allocator<T>().deallocate(p, n);
    else
      ::munmap(p, bytes);
  }
  friend bool operator==(const ArrayAllocator&, const ArrayAllocator&) noexcept {
    return true;
  }
};

/// Shape of a tensor, outermost first; empty = scalar (the IR's spelling).
using Shape = std::vector<std::int64_t>;
/// A row-major xtensor array of V with the interpreter's allocator.
template <class V>
using Array = xt::xarray<V, xt::layout_type::row_major, ArrayAllocator<V>>;
/// Float elements: a row-major f64 xtensor array.
using FloatArray = Array<double>;
/// Integer elements: a row-major int64 xtensor array.
using IntArray = Array<std::int64_t>;

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

/// `shape` as an xtensor shape (unsigned extents); throws on a negative dimension.
inline std::vector<std::size_t> to_xshape(const Shape& shape) {
  num_elements(shape);
  return std::vector<std::size_t>(shape.begin(), shape.end());
}

/// An xtensor shape as the IR's signed spelling.
template <class S>
Shape from_xshape(const S& shape) {
  return Shape(shape.begin(), shape.end());
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

/// A dense row-major tensor: a FloatArray (float dtypes) or an IntArray (integer dtypes) and
/// the IR dtype it is labelled with.
class Tensor {
public:
  /// An f32 scalar 0.
  Tensor() : Tensor(Shape{}, ir::DType::f32) {}

  /// Zero-filled tensor of `shape` and `dtype`.
  Tensor(const Shape& shape, ir::DType dtype) : dtype_(dtype) {
    if (ir::is_float(dtype))
      v_ = zeros<double>(shape);
    else
      v_ = zeros<std::int64_t>(shape);
  }

  /// Float tensor holding `values` (not rounded), labelled `dtype` (a float type).
  Tensor(FloatArray values, ir::DType dtype) : v_(std::move(values)), dtype_(dtype) {
    check(ir::is_float(dtype), ErrorKind::invalid_input, "Tensor", "dtype ", ir::name(dtype),
          " is not a float type");
  }
  /// Integer tensor holding `values`, labelled `dtype` (an integer type).
  Tensor(IntArray values, ir::DType dtype) : v_(std::move(values)), dtype_(dtype) {
    check(ir::is_integer(dtype), ErrorKind::invalid_input, "Tensor", "dtype ", ir::name(dtype),
          " is not an integer type");
  }

  /// Float tensor `shape` with row-major `values` (as given, not rounded), labelled `dtype`.
  static Tensor from_floats(const Shape& shape, const std::vector<double>& values,
                            ir::DType dtype = ir::DType::f32) {
    return from_range<double>(shape, values.data(), values.size(), dtype, "Tensor::from_floats");
  }
  /// Float tensor from f32 values (e.g. a golden file tensor or a HostTensor), labelled `dtype`.
  static Tensor from_f32(const Shape& shape, std::span<const float> values,
                         ir::DType dtype = ir::DType::f32) {
    return from_range<double>(shape, values.data(), values.size(), dtype, "Tensor::from_f32");
  }
  /// Integer tensor `shape` with row-major `values`, labelled `dtype` (i32 for ids/positions).
  static Tensor from_ints(const Shape& shape, const std::vector<std::int64_t>& values,
                          ir::DType dtype = ir::DType::i32) {
    return from_range<std::int64_t>(shape, values.data(), values.size(), dtype,
                                    "Tensor::from_ints");
  }
  /// Integer tensor from i32 values (token ids, positions), labelled `dtype`.
  static Tensor from_i32(const Shape& shape, std::span<const std::int32_t> values,
                         ir::DType dtype = ir::DType::i32) {
    return from_range<std::int64_t>(shape, values.data(), values.size(), dtype, "Tensor::from_i32");
  }

  /// Tensor from raw little-endian row-major bytes of `dtype` (i4/u4 packed two per byte, low
  /// nibble first; i1 one byte each). Widening is exact. Throws when the byte count differs.
  /// Large inputs (a model's weights) are widened on all OpenMP threads.
  static Tensor from_bytes(const Shape& shape, ir::DType dtype, std::span<const std::byte> bytes) {
    const std::int64_t n = num_elements(shape);
    check(static_cast<std::int64_t>(bytes.size()) == ir::byte_size(dtype, n),
          ErrorKind::invalid_input, "Tensor::from_bytes", bytes.size(), " bytes for ", n, " ",
          ir::name(dtype), " elements of shape ", ir::shape_str(shape), " (expected ",
          ir::byte_size(dtype, n), ")");
    const std::byte* p = bytes.data();
    auto nibble = [p](std::int64_t i) {
      const auto byte = std::to_integer<unsigned>(p[i / 2]);
      return (i % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
    };
    switch (dtype) {
    case ir::DType::f32:
      return widened<double>(shape, dtype, [p](std::int64_t i) { return load<float>(p, i); });
    case ir::DType::f64:
      return widened<double>(shape, dtype, [p](std::int64_t i) { return load<double>(p, i); });
    case ir::DType::f16:
      return widened<double>(shape, dtype,
                             [p](std::int64_t i) { return f16_to_f32(load<std::uint16_t>(p, i)); });
    case ir::DType::bf16:
      return widened<double>(
          shape, dtype, [p](std::int64_t i) { return bf16_to_f32(load<std::uint16_t>(p, i)); });
    case ir::DType::i8:
      return widened<std::int64_t>(shape, dtype,
                                   [p](std::int64_t i) { return load<std::int8_t>(p, i); });
    case ir::DType::u8:
    case ir::DType::i1:
      return widened<std::int64_t>(shape, dtype,
                                   [p](std::int64_t i) { return load<std::uint8_t>(p, i); });
    case ir::DType::i32:
      return widened<std::int64_t>(shape, dtype,
                                   [p](std::int64_t i) { return load<std::int32_t>(p, i); });
    case ir::DType::i64:
      return widened<std::int64_t>(shape, dtype,
                                   [p](std::int64_t i) { return load<std::int64_t>(p, i); });
    case ir::DType::u4:
      return widened<std::int64_t>(shape, dtype, nibble);
    case ir::DType::i4:
      return widened<std::int64_t>(shape, dtype, [nibble](std::int64_t i) {
        const unsigned nib = nibble(i);
        return nib >= 8 ? static_cast<std::int64_t>(nib) - 16 : static_cast<std::int64_t>(nib);
      });
    }
    throw_error(ErrorKind::internal, "Tensor::from_bytes", "unknown dtype");
  }

  /// Raw little-endian row-major bytes in this tensor's dtype (floats rounded to nearest even,
  /// integers must fit the type: throws otherwise).
  std::vector<std::byte> to_bytes() const {
    const std::int64_t n = numel();
    std::vector<std::byte> out(static_cast<std::size_t>(ir::byte_size(dtype_, n)));
    auto store_all = [&]<class T>(T, auto convert) {
      for (std::int64_t i = 0; i < n; ++i) {
        const T v = convert(i);
        std::memcpy(out.data() + i * static_cast<std::int64_t>(sizeof(T)), &v, sizeof(T));
      }
    };
    auto fl = [this](std::int64_t i) { return f(i); };
    auto fits = [this](std::int64_t lo, std::int64_t hi) {
      return [this, lo, hi](std::int64_t k) {
        const std::int64_t v = this->i(k);
        check(v >= lo && v <= hi, ErrorKind::invalid_input, "Tensor::to_bytes", "value ", v,
              " does not fit ", ir::name(dtype_));
        return v;
      };
    };
    switch (dtype_) {
    case ir::DType::f32:
      store_all(float{}, [&](std::int64_t i) { return static_cast<float>(fl(i)); });
      break;
    case ir::DType::f64:
      store_all(double{}, fl);
      break;
    case ir::DType::f16:
      store_all(std::uint16_t{},
                [&](std::int64_t i) { return f32_to_f16(static_cast<float>(fl(i))); });
      break;
    case ir::DType::bf16:
      store_all(std::uint16_t{},
                [&](std::int64_t i) { return f32_to_bf16(static_cast<float>(fl(i))); });
      break;
    case ir::DType::i8:
      store_all(std::int8_t{},
                [g = fits(-128, 127)](std::int64_t i) { return static_cast<std::int8_t>(g(i)); });
      break;
    case ir::DType::u8:
      store_all(std::uint8_t{},
                [g = fits(0, 255)](std::int64_t i) { return static_cast<std::uint8_t>(g(i)); });
      break;
    case ir::DType::i1:
      store_all(std::uint8_t{},
                [g = fits(0, 1)](std::int64_t i) { return static_cast<std::uint8_t>(g(i)); });
      break;
    case ir::DType::i32:
      store_all(std::int32_t{}, [g = fits(INT32_MIN, INT32_MAX)](std::int64_t i) {
        return static_cast<std::int32_t>(g(i));
      });
      break;
    case ir::DType::i64:
      store_all(std::int64_t{}, [this](std::int64_t k) { return this->i(k); });
      break;
    case ir::DType::u4:
    case ir::DType::i4: {
      const auto g = dtype_ == ir::DType::i4 ? fits(-8, 7) : fits(0, 15);
      for (std::int64_t k = 0; k < n; ++k) {
        const std::int64_t x = g(k) & 0xF;
        out[static_cast<std::size_t>(k / 2)] |= static_cast<std::byte>(k % 2 == 0 ? x : x << 4);
      }
      break;
    }
    }
    return out;
  }

  /// Element values as f32 (float tensors only), row-major, e.g. to compare with a golden file.
  std::vector<float> to_f32() const {
    const FloatArray& a = floats();
    std::vector<float> out(a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      out[i] = static_cast<float>(a.data()[i]);
    return out;
  }
  /// Element values as f64 (float tensors only), row-major.
  std::vector<double> float_values() const {
    const FloatArray& a = floats();
    return std::vector<double>(a.data(), a.data() + a.size());
  }
  /// Element values (integer tensors only), row-major.
  std::vector<std::int64_t> int_values() const {
    const IntArray& a = ints();
    return std::vector<std::int64_t>(a.data(), a.data() + a.size());
  }

  /// Dimensions, outermost first.
  Shape shape() const {
    return std::visit([](const auto& a) { return from_xshape(a.shape()); }, v_);
  }
  /// Element type label.
  ir::DType dtype() const { return dtype_; }
  /// The IR type this tensor has (never quantized).
  ir::TensorType type() const { return ir::TensorType(shape(), dtype_); }
  /// Number of dimensions.
  std::int64_t rank() const {
    return std::visit([](const auto& a) { return static_cast<std::int64_t>(a.dimension()); }, v_);
  }
  /// Dimension `i`, negative counting from the back.
  std::int64_t dim(std::int64_t i) const {
    const std::int64_t r = rank();
    const std::int64_t a = i < 0 ? i + r : i;
    check(a >= 0 && a < r, ErrorKind::invalid_input, "Tensor::dim", "axis ", i,
          " out of range for rank ", r);
    return std::visit(
        [a](const auto& x) { return static_cast<std::int64_t>(x.shape()[static_cast<size_t>(a)]); },
        v_);
  }
  /// Number of elements (1 for a scalar).
  std::int64_t numel() const {
    return std::visit([](const auto& a) { return static_cast<std::int64_t>(a.size()); }, v_);
  }
  /// True for f32 / f16 / bf16 / f64 (values in floats()).
  bool is_float() const { return ir::is_float(dtype_); }

  /// Float elements; throws Error(invalid_input) for an integer tensor.
  FloatArray& floats() { return get<FloatArray>("floats"); }
  /// Float elements; throws Error(invalid_input) for an integer tensor.
  const FloatArray& floats() const { return get<FloatArray>("floats"); }
  /// Integer elements; throws Error(invalid_input) for a float tensor.
  IntArray& ints() { return get<IntArray>("ints"); }
  /// Integer elements; throws Error(invalid_input) for a float tensor.
  const IntArray& ints() const { return get<IntArray>("ints"); }

  /// Float element at a row-major flat index (unchecked).
  double f(std::int64_t flat) const { return std::get<FloatArray>(v_).data()[flat]; }
  /// Integer element at a row-major flat index (unchecked).
  std::int64_t i(std::int64_t flat) const { return std::get<IntArray>(v_).data()[flat]; }
  /// Float element at a multi-index (bounds-checked, for tests).
  double at(std::initializer_list<std::int64_t> idx) const {
    return floats().data()[flat_index(idx)];
  }
  /// Integer element at a multi-index (bounds-checked, for tests).
  std::int64_t int_at(std::initializer_list<std::int64_t> idx) const {
    return ints().data()[flat_index(idx)];
  }

  /// Same elements with another shape of equal element count.
  Tensor reshaped(const Shape& shape) const {
    check(num_elements(shape) == numel(), ErrorKind::invalid_input, "Tensor::reshaped",
          ir::shape_str(this->shape()), " -> ", ir::shape_str(shape), " changes the element count");
    Tensor t = *this;
    std::visit([&](auto& a) { a.reshape(to_xshape(shape)); }, t.v_);
    return t;
  }

  /// A float copy with every element rounded to float type `dtype` (what top.Cast computes).
  Tensor cast(ir::DType dtype) const {
    check(ir::is_float(dtype), ErrorKind::invalid_input, "Tensor::cast", "target ", ir::name(dtype),
          " is not a float type");
    FloatArray a = floats();
    for (double* v = a.data(); v != a.data() + a.size(); ++v)
      *v = round_to(*v, dtype);
    return Tensor(std::move(a), dtype);
  }

private:
  template <class T>
  static T load(const std::byte* p, std::int64_t i) {
    T v;
    std::memcpy(&v, p + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
    return v;
  }
  template <class V>
  static Array<V> zeros(const Shape& shape) {
    auto a = Array<V>::from_shape(to_xshape(shape));
    std::fill(a.data(), a.data() + a.size(), V{0});
    return a;
  }
  /// A V tensor of `shape` with element i = f(i), filled on every OpenMP thread once large.
  template <class V, class F>
  static Tensor widened(const Shape& shape, ir::DType dtype, F f) {
    auto a = Array<V>::from_shape(to_xshape(shape));
    V* out = a.data();
    const auto n = static_cast<std::int64_t>(a.size());
#pragma omp parallel for schedule(static) if (n >= (std::int64_t{1} << 20))
    for (std::int64_t i = 0; i < n; ++i)
      out[i] = static_cast<V>(f(i));
    return Tensor(std::move(a), dtype);
  }
  template <class V, class In>
  static Tensor from_range(const Shape& shape, const In* values, std::size_t count, ir::DType dtype,
                           const char* where) {
    constexpr bool floats = std::is_same_v<V, double>;
    check(floats ? ir::is_float(dtype) : ir::is_integer(dtype), ErrorKind::invalid_input, where,
          "dtype ", ir::name(dtype), " is not ", floats ? "a float" : "an integer", " type");
    check(static_cast<std::int64_t>(count) == num_elements(shape), ErrorKind::invalid_input, where,
          count, " values for shape ", ir::shape_str(shape));
    auto a = Array<V>::from_shape(to_xshape(shape));
    for (std::size_t k = 0; k < count; ++k)
      a.data()[k] = static_cast<V>(values[k]);
    return Tensor(std::move(a), dtype);
  }
  template <class A>
  A& get(const char* what) {
    return const_cast<A&>(static_cast<const Tensor*>(this)->get<A>(what));
  }
  template <class A>
  const A& get(const char* what) const {
    const A* a = std::get_if<A>(&v_);
    check(a != nullptr, ErrorKind::invalid_input, std::string("Tensor::") + what, "tensor is ",
          ir::name(dtype_), ", not ",
          std::is_same_v<A, FloatArray> ? "a float type" : "an integer type");
    return *a;
  }
  std::size_t flat_index(std::initializer_list<std::int64_t> idx) const {
    const Shape s = shape();
    check(idx.size() == s.size(), ErrorKind::invalid_input, "Tensor", idx.size(),
          " indices for rank ", s.size());
    std::int64_t flat = 0;
    std::size_t a = 0;
    for (auto v : idx) {
      check(v >= 0 && v < s[a], ErrorKind::invalid_input, "Tensor", "index ", v,
            " out of range for axis ", a, " of ", ir::shape_str(s));
      flat = flat * s[a] + v;
      ++a;
    }
    return static_cast<std::size_t>(flat);
  }

  std::variant<FloatArray, IntArray> v_;
  ir::DType dtype_ = ir::DType::f32;
};

} // namespace tpullm::interp
