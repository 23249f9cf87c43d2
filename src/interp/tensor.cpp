// Out-of-line definitions of tpullm/interp/tensor.hpp (compiled once into tpullm_core).
#include "tpullm/interp/tensor.hpp"

namespace tpullm::interp {

std::int64_t num_elements(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    check(d >= 0, ErrorKind::invalid_input, "", "negative dimension in shape ",
          ir::shape_str(shape));
    n *= d;
  }
  return n;
}

double round_to(double x, ir::DType t) {
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
  case ir::DType::i6:
  case ir::DType::u6:
    break;
  }
  throw_error(ErrorKind::internal, "round_to", "target ", ir::name(t), " is not a float type");
}

Tensor::Tensor(const Shape& shape, ir::DType dtype) : dtype_(dtype) {
  if (ir::is_float(dtype))
    v_ = zeros<double>(shape);
  else
    v_ = zeros<std::int64_t>(shape);
}

auto Tensor::from_bytes(const Shape& shape, ir::DType dtype, std::span<const std::byte> bytes)
    -> Tensor {
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
    return widened<double>(shape, dtype,
                           [p](std::int64_t i) { return bf16_to_f32(load<std::uint16_t>(p, i)); });
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
  case ir::DType::i6: // only ever packed weights' element types (kernels' int6 blocks)
  case ir::DType::u6:
    throw_error(ErrorKind::unsupported, "Tensor::from_bytes",
                std::string(ir::name(dtype)) +
                    " is a packed weight type, not a tensor the interpreter holds");
  }
  throw_error(ErrorKind::internal, "Tensor::from_bytes", "unknown dtype");
}

auto Tensor::to_bytes() const -> std::vector<std::byte> {
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
  case ir::DType::i6:
  case ir::DType::u6:
    throw_error(ErrorKind::unsupported, "Tensor::to_bytes",
                std::string(ir::name(dtype_)) +
                    " is a packed weight type, not a tensor the interpreter holds");
  }
  return out;
}

auto Tensor::to_f32() const -> std::vector<float> {
  const FloatArray& a = floats();
  std::vector<float> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    out[i] = static_cast<float>(a.data()[i]);
  return out;
}

auto Tensor::dim(std::int64_t i) const -> std::int64_t {
  const std::int64_t r = rank();
  const std::int64_t a = i < 0 ? i + r : i;
  check(a >= 0 && a < r, ErrorKind::invalid_input, "Tensor::dim", "axis ", i,
        " out of range for rank ", r);
  return std::visit(
      [a](const auto& x) { return static_cast<std::int64_t>(x.shape()[static_cast<size_t>(a)]); },
      v_);
}

auto Tensor::reshaped(const Shape& shape) const -> Tensor {
  check(num_elements(shape) == numel(), ErrorKind::invalid_input, "Tensor::reshaped",
        ir::shape_str(this->shape()), " -> ", ir::shape_str(shape), " changes the element count");
  Tensor t = *this;
  std::visit([&](auto& a) { a.reshape(to_xshape(shape)); }, t.v_);
  return t;
}

auto Tensor::cast(ir::DType dtype) const -> Tensor {
  check(ir::is_float(dtype), ErrorKind::invalid_input, "Tensor::cast", "target ", ir::name(dtype),
        " is not a float type");
  FloatArray a = floats();
  for (double* v = a.data(); v != a.data() + a.size(); ++v)
    *v = round_to(*v, dtype);
  return Tensor(std::move(a), dtype);
}

auto Tensor::flat_index(std::initializer_list<std::int64_t> idx) const -> std::size_t {
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

} // namespace tpullm::interp
