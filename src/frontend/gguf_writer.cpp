// Out-of-line definitions of tpullm/frontend/gguf_writer.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/gguf_writer.hpp"

#include "tpullm/support/checked.hpp"
#include "tpullm/support/utf8.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace tpullm::frontend {

namespace gguf_write {

static_assert(std::endian::native == std::endian::little, "GGUF is written little-endian");

template <class T>
void put_le(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_str(std::string& out, std::string_view s) {
  put_le<std::uint64_t>(out, s.size());
  out.append(s);
}

/// `s` as an integer of type T, or nullopt when it is not an integer or does not fit.
template <class T>
std::optional<T> as_int(const GgufScalar& s) {
  if (const auto* i = std::get_if<std::int64_t>(&s))
    return std::in_range<T>(*i) ? std::optional<T>(static_cast<T>(*i)) : std::nullopt;
  if (const auto* u = std::get_if<std::uint64_t>(&s))
    return std::in_range<T>(*u) ? std::optional<T>(static_cast<T>(*u)) : std::nullopt;
  return std::nullopt;
}

template <class T>
void put_int(std::string& out, const GgufScalar& s, GgufValueType t, const std::string& where) {
  const auto v = as_int<T>(s);
  check(v.has_value(), ErrorKind::invalid_input, where, "value is not an integer that fits ",
        gguf_value_type_name(t));
  put_le<T>(out, *v);
}

/// Appends the stored bytes of scalar `s` as type `t` (not array); throws when it does not fit.
void put_scalar(std::string& out, GgufValueType t, const GgufScalar& s, const std::string& where) {
  switch (t) {
  case GgufValueType::u8:
    return put_int<std::uint8_t>(out, s, t, where);
  case GgufValueType::i8:
    return put_int<std::int8_t>(out, s, t, where);
  case GgufValueType::u16:
    return put_int<std::uint16_t>(out, s, t, where);
  case GgufValueType::i16:
    return put_int<std::int16_t>(out, s, t, where);
  case GgufValueType::u32:
    return put_int<std::uint32_t>(out, s, t, where);
  case GgufValueType::i32:
    return put_int<std::int32_t>(out, s, t, where);
  case GgufValueType::u64:
    return put_int<std::uint64_t>(out, s, t, where);
  case GgufValueType::i64:
    return put_int<std::int64_t>(out, s, t, where);
  case GgufValueType::f32:
  case GgufValueType::f64: {
    const auto* d = std::get_if<double>(&s);
    check(d != nullptr, ErrorKind::invalid_input, where, "value is not a float (",
          gguf_value_type_name(t), ")");
    if (t == GgufValueType::f32)
      put_le<float>(out, static_cast<float>(*d));
    else
      put_le<double>(out, *d);
    return;
  }
  case GgufValueType::boolean: {
    const auto* b = std::get_if<bool>(&s);
    check(b != nullptr, ErrorKind::invalid_input, where, "value is not a bool");
    put_le<std::uint8_t>(out, *b ? 1 : 0);
    return;
  }
  case GgufValueType::string: {
    const auto* str = std::get_if<std::string>(&s);
    check(str != nullptr, ErrorKind::invalid_input, where, "value is not a string");
    check(str->size() <= kGgufMaxString, ErrorKind::invalid_input, where, "string of ", str->size(),
          " bytes is longer than the ", kGgufMaxString, "-byte limit");
    const auto bad = find_invalid_utf8(*str);
    check(!bad, ErrorKind::invalid_input, where, "string is not valid UTF-8 (byte ",
          bad.value_or(0), ")");
    put_str(out, *str);
    return;
  }
  case GgufValueType::array:
    break;
  }
  throw_error(ErrorKind::invalid_input, where, "value type ", static_cast<std::uint32_t>(t),
              " is not a scalar GGUF value type");
}

bool known_value_type(GgufValueType t) {
  return static_cast<std::uint32_t>(t) <= static_cast<std::uint32_t>(GgufValueType::f64);
}

/// Appends the stored form of `v` (without the key and the u32 type); `depth` 1 inside an
/// array of arrays.
void put_value(std::string& out, const GgufValue& v, const std::string& where, int depth) {
  check(known_value_type(v.type), ErrorKind::invalid_input, where, "unknown value type ",
        static_cast<std::uint32_t>(v.type));
  if (!v.is_array()) {
    put_scalar(out, v.type, v.scalar, where);
    return;
  }
  check(known_value_type(v.elem_type), ErrorKind::invalid_input, where,
        "unknown array element type ", static_cast<std::uint32_t>(v.elem_type));
  put_le<std::uint32_t>(out, static_cast<std::uint32_t>(v.elem_type));
  if (v.elem_type == GgufValueType::array) {
    check(depth == 0, ErrorKind::invalid_input, where,
          "arrays of arrays are written one level deep only");
    check(v.array.empty(), ErrorKind::invalid_input, where,
          "an array of arrays holds its elements in `nested`, not `array`");
    check(v.nested.size() <= kGgufMaxArray, ErrorKind::invalid_input, where, "array of ",
          v.nested.size(), " elements is longer than the ", kGgufMaxArray, "-element limit");
    put_le<std::uint64_t>(out, v.nested.size());
    for (const GgufValue& inner : v.nested) {
      check(inner.is_array(), ErrorKind::invalid_input, where,
            "an element of an array of arrays is not an array");
      put_value(out, inner, where, depth + 1);
    }
    return;
  }
  check(v.nested.empty(), ErrorKind::invalid_input, where, "an array of ",
        gguf_value_type_name(v.elem_type), " holds its elements in `array`, not `nested`");
  check(v.array.size() <= kGgufMaxArray, ErrorKind::invalid_input, where, "array of ",
        v.array.size(), " elements is longer than the ", kGgufMaxArray, "-element limit");
  put_le<std::uint64_t>(out, v.array.size());
  for (const GgufScalar& s : v.array)
    put_scalar(out, v.elem_type, s, where);
}

} // namespace gguf_write

auto GgufWriter::set_version(std::uint32_t version) -> void {
  check(version == 2 || version == 3, ErrorKind::invalid_input, where(), "GGUF version ", version,
        " cannot be written (2 or 3)");
  version_ = version;
}

auto GgufWriter::set_alignment(std::uint64_t alignment) -> void {
  check(alignment >= 1 && alignment <= kGgufMaxAlignment && std::has_single_bit(alignment),
        ErrorKind::invalid_input, where_key("general.alignment"), "alignment ", alignment,
        " is not a power of two in [1, ", kGgufMaxAlignment, "]");
  alignment_ = alignment;
  GgufValue v;
  v.type = GgufValueType::u32;
  v.scalar = static_cast<std::int64_t>(alignment);
  for (Kv& kv : kv_)
    if (kv.key == "general.alignment") {
      kv.value = std::move(v);
      return;
    }
  keys_.insert("general.alignment");
  kv_.push_back({"general.alignment", std::move(v)});
}

auto GgufWriter::check_key(const std::string& key) const -> void {
  check(!key.empty(), ErrorKind::invalid_input, where(), "empty metadata key");
  check(key.size() <= kGgufMaxString, ErrorKind::invalid_input, where(), "metadata key of ",
        key.size(), " bytes is longer than the ", kGgufMaxString, "-byte limit");
  check(is_valid_utf8(key), ErrorKind::invalid_input, where(), "metadata key is not valid UTF-8");
  check(key != "general.alignment", ErrorKind::invalid_input, where_key(key),
        "set through set_alignment()");
  check(!keys_.contains(key), ErrorKind::invalid_input, where_key(key), "set twice");
  check(kv_.size() < kGgufMaxKeys, ErrorKind::invalid_input, where_key(key), "more than ",
        kGgufMaxKeys, " metadata keys");
}

auto GgufWriter::check_value(const std::string& key, const GgufValue& v, int depth) const -> void {
  using namespace gguf_write;
  std::string scratch;
  put_value(scratch, v, where_key(key), depth);
}

auto GgufWriter::set(std::string key, GgufValue value) -> void {
  check_key(key);
  check_value(key, value, 0);
  keys_.insert(key);
  kv_.push_back({std::move(key), std::move(value)});
}

auto GgufWriter::set_scalar(std::string key, GgufValueType type, GgufScalar v) -> void {
  GgufValue value;
  value.type = type;
  value.scalar = std::move(v);
  set(std::move(key), std::move(value));
}

auto GgufWriter::set_array(std::string key, GgufValueType elem, std::vector<GgufScalar> values)
    -> void {
  check(elem != GgufValueType::array, ErrorKind::invalid_input, where_key(key),
        "set_array writes arrays of scalars; set() writes arrays of arrays");
  GgufValue value;
  value.type = GgufValueType::array;
  value.elem_type = elem;
  value.array = std::move(values);
  set(std::move(key), std::move(value));
}

auto GgufWriter::set_string_array(std::string key, const std::vector<std::string>& values) -> void {
  std::vector<GgufScalar> v(values.begin(), values.end());
  set_array(std::move(key), GgufValueType::string, std::move(v));
}

auto GgufWriter::set_i32_array(std::string key, std::span<const std::int32_t> values) -> void {
  std::vector<GgufScalar> v;
  v.reserve(values.size());
  for (std::int32_t x : values)
    v.emplace_back(std::int64_t{x});
  set_array(std::move(key), GgufValueType::i32, std::move(v));
}

auto GgufWriter::set_f32_array(std::string key, std::span<const float> values) -> void {
  std::vector<GgufScalar> v;
  v.reserve(values.size());
  for (float x : values)
    v.emplace_back(double{x});
  set_array(std::move(key), GgufValueType::f32, std::move(v));
}

auto GgufWriter::add_tensor(std::string name, conversion::GgmlType type,
                            std::vector<std::int64_t> ne, std::span<const std::byte> bytes)
    -> void {
  const std::string w = str_cat(where(), ": tensor '", name, "'");
  check(!name.empty(), ErrorKind::invalid_input, where(), "empty tensor name");
  check(name.size() <= kGgufMaxString, ErrorKind::invalid_input, where(), "tensor name of ",
        name.size(), " bytes is longer than the ", kGgufMaxString, "-byte limit");
  check(is_valid_utf8(name), ErrorKind::invalid_input, where(), "tensor name is not valid UTF-8");
  check(!names_.contains(name), ErrorKind::invalid_input, w, "added twice");
  check(tensors_.size() < kGgufMaxTensors, ErrorKind::invalid_input, w, "more than ",
        kGgufMaxTensors, " tensors");
  const auto info = conversion::ggml_type_info(static_cast<std::uint32_t>(type));
  check(info.has_value(), ErrorKind::invalid_input, w, "unknown ggml type ",
        static_cast<std::uint32_t>(type));
  check(!ne.empty() && ne.size() <= kGgufMaxDims, ErrorKind::invalid_input, w, ne.size(),
        " dimensions (1 to ", kGgufMaxDims, ")");
  std::int64_t rows = 1;
  for (std::size_t i = 0; i < ne.size(); ++i) {
    check(ne[i] >= 0, ErrorKind::invalid_input, w, "negative dimension ne[", i, "] = ", ne[i]);
    if (i > 0) {
      const auto r = tpullm::checked_mul(rows, ne[i]);
      check(r.has_value(), ErrorKind::invalid_input, w, "row count overflows 64 bits");
      rows = *r;
    }
  }
  const auto row = conversion::ggml_row_bytes(type, ne[0]);
  check(row.has_value(), ErrorKind::invalid_input, w, "a row of ", ne[0],
        " elements is not a whole number of ", info->name, " blocks (", info->block_elems, ")");
  const auto total = tpullm::checked_mul(*row, rows);
  check(total.has_value(), ErrorKind::invalid_input, w, "byte size overflows 64 bits");
  check(static_cast<std::uint64_t>(*total) == bytes.size(), ErrorKind::invalid_input, w, "has ",
        bytes.size(), " bytes but ", info->name, " x ", rows, " rows of ", ne[0], " needs ",
        *total);
  names_.insert(name);
  tensors_.push_back({std::move(name), type, std::move(ne), {bytes.begin(), bytes.end()}});
}

auto GgufWriter::add_tensor_f32(std::string name, std::vector<std::int64_t> ne,
                                std::span<const float> values) -> void {
  add_tensor(std::move(name), conversion::GgmlType::f32, std::move(ne), std::as_bytes(values));
}

auto GgufWriter::tensor_offset(std::size_t index) const -> std::uint64_t {
  check(index < tensors_.size(), ErrorKind::internal, where(), "tensor index ", index,
        " out of range (", tensors_.size(), " tensors)");
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < index; ++i)
    off = align_up(off + tensors_[i].bytes.size());
  return off;
}

auto GgufWriter::header_bytes() const -> std::string {
  using namespace gguf_write;
  std::string out;
  out.append("GGUF", 4);
  put_le<std::uint32_t>(out, version_);
  put_le<std::uint64_t>(out, tensors_.size());
  put_le<std::uint64_t>(out, kv_.size());
  for (const Kv& kv : kv_) {
    put_str(out, kv.key);
    put_le<std::uint32_t>(out, static_cast<std::uint32_t>(kv.value.type));
    put_value(out, kv.value, where_key(kv.key), 0);
  }
  std::uint64_t off = 0;
  for (const Tensor& t : tensors_) {
    put_str(out, t.name);
    put_le<std::uint32_t>(out, static_cast<std::uint32_t>(t.ne.size()));
    for (std::int64_t d : t.ne)
      put_le<std::uint64_t>(out, static_cast<std::uint64_t>(d));
    put_le<std::uint32_t>(out, static_cast<std::uint32_t>(t.type));
    put_le<std::uint64_t>(out, off);
    off = align_up(off + t.bytes.size());
  }
  return out;
}

auto GgufWriter::image() const -> std::vector<std::byte> {
  std::string h = header_bytes();
  h.resize(align_up(h.size()), '\0');
  std::vector<std::byte> out(reinterpret_cast<const std::byte*>(h.data()),
                             reinterpret_cast<const std::byte*>(h.data()) + h.size());
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    out.resize(align_up(out.size()), std::byte{0});
  }
  return out;
}

auto GgufWriter::finish() const -> void {
  check(!path_.empty(), ErrorKind::internal, where(), "finish() without an output path");
  OutputFile out(path_, options_);
  std::string h = header_bytes();
  h.resize(align_up(h.size()), '\0');
  out.write(h);
  const std::string zeros(alignment_ < 4096 ? alignment_ : 4096, '\0');
  for (const Tensor& t : tensors_) {
    out.write(std::span<const std::byte>(t.bytes));
    std::uint64_t pad = align_up(t.bytes.size()) - t.bytes.size();
    while (pad > 0) {
      const std::size_t n = pad < zeros.size() ? static_cast<std::size_t>(pad) : zeros.size();
      out.write(std::string_view(zeros.data(), n));
      pad -= n;
    }
  }
  out.commit();
}

} // namespace tpullm::frontend
