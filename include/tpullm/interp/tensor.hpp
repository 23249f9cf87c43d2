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
    if (p == MAP_FAILED) // the Allocator requirements: allocate() reports failure as bad_alloc
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
std::int64_t num_elements(const Shape& shape);

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
double round_to(double x, ir::DType t);

/// A dense row-major tensor: a FloatArray (float dtypes) or an IntArray (integer dtypes) and
/// the IR dtype it is labelled with.
class Tensor {
public:
  /// An f32 scalar 0.
  Tensor() : Tensor(Shape{}, ir::DType::f32) {}

  /// Zero-filled tensor of `shape` and `dtype`.
  Tensor(const Shape& shape, ir::DType dtype);

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
  static Tensor from_bytes(const Shape& shape, ir::DType dtype, std::span<const std::byte> bytes);

  /// Raw little-endian row-major bytes in this tensor's dtype (floats rounded to nearest even,
  /// integers must fit the type: throws otherwise).
  std::vector<std::byte> to_bytes() const;

  /// Element values as f32 (float tensors only), row-major, e.g. to compare with a golden file.
  std::vector<float> to_f32() const;
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
  std::int64_t dim(std::int64_t i) const;
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
  Tensor reshaped(const Shape& shape) const;

  /// A float copy with every element rounded to float type `dtype` (what top.Cast computes).
  Tensor cast(ir::DType dtype) const;

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
  std::size_t flat_index(std::initializer_list<std::int64_t> idx) const;

  std::variant<FloatArray, IntArray> v_;
  ir::DType dtype_ = ir::DType::f32;
};

} // namespace tpullm::interp
