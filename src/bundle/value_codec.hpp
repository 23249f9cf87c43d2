#pragma once
// Encoding of IR attribute values (ir/attributes.hpp) and tensor types as bundle FlatBuffer
// tables (bundle.fbs), and back. Driven by the same `fields()` / `attrs()` reflection the IR
// printer uses, so every attribute a Tpu op, a plan or a buffer holds is stored with its type.
// Decoding checks every kind and name and throws DecodeError with the path of the bad value.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "bundle_generated.h"
#include "tpullm/ir/attributes.hpp"
#include "tpullm/ir/type.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::bundle::codec {

namespace fb = ::tpullm::fbs;
using Builder = flatbuffers::FlatBufferBuilder;

/// A value in the metadata that does not decode; `what` says which and why.
struct DecodeError {
  std::string what;
};

[[noreturn]] inline void fail(std::string_view path, std::string_view why) {
  throw DecodeError{std::string(path) + ": " + std::string(why)};
}

// ---- encoding -----------------------------------------------------------------------------

template <class T>
flatbuffers::Offset<fb::Value> encode(Builder& b, const T& v);

template <class T>
flatbuffers::Offset<fb::Value> encode_record(Builder& b, const T& v, bool op_attrs) {
  std::vector<flatbuffers::Offset<fb::Field>> fields;
  auto one = [&](const char* key, const auto& m) {
    using M = std::decay_t<decltype(m)>;
    if constexpr (ir::is_optional_v<M>) {
      if (!m)
        return;
      auto val = encode(b, *m);
      auto k = b.CreateString(key);
      fields.push_back(fb::CreateField(b, k, val));
    } else {
      auto val = encode(b, m);
      auto k = b.CreateString(key);
      fields.push_back(fb::CreateField(b, k, val));
    }
  };
  static_cast<void>(op_attrs);
  if constexpr (ir::AttrStruct<T>)
    T::fields(v, one);
  else
    T::attrs(v, one);
  auto fv = b.CreateVector(fields);
  fb::ValueBuilder vb(b);
  vb.add_kind(fb::ValueKind::record);
  vb.add_fields(fv);
  return vb.Finish();
}

template <class T>
flatbuffers::Offset<fb::Value> encode(Builder& b, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return fb::CreateValue(b, fb::ValueKind::boolean, v ? 1 : 0);
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return fb::CreateValue(b, fb::ValueKind::integer, v);
  } else if constexpr (std::is_same_v<T, float>) {
    return fb::CreateValue(b, fb::ValueKind::real, 0, v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    auto s = b.CreateString(v);
    return fb::CreateValue(b, fb::ValueKind::text, 0, 0, s);
  } else if constexpr (std::is_same_v<T, ir::SymbolRef>) {
    auto s = b.CreateString(v.name);
    return fb::CreateValue(b, fb::ValueKind::symbol, 0, 0, s);
  } else if constexpr (std::is_same_v<T, ir::DType>) {
    auto s = b.CreateString(std::string(ir::name(v)));
    return fb::CreateValue(b, fb::ValueKind::enumeration, 0, 0, s);
  } else if constexpr (ir::NamedEnum<T>) {
    auto s = b.CreateString(std::string(ir::enum_name(v)));
    return fb::CreateValue(b, fb::ValueKind::enumeration, 0, 0, s);
  } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
    auto iv = b.CreateVector(v);
    return fb::CreateValue(b, fb::ValueKind::ints, 0, 0, 0, iv);
  } else if constexpr (ir::is_vector_v<T>) {
    std::vector<flatbuffers::Offset<fb::Value>> items;
    for (const auto& e : v)
      items.push_back(encode(b, e));
    auto iv = b.CreateVector(items);
    return fb::CreateValue(b, fb::ValueKind::list, 0, 0, 0, 0, 0, iv);
  } else if constexpr (ir::AttrStruct<T>) {
    return encode_record(b, v, false);
  } else {
    static_assert(sizeof(T) == 0, "attribute member type without a bundle encoding");
  }
}

/// An op struct's attributes as one record.
template <class Op>
flatbuffers::Offset<fb::Value> encode_attrs(Builder& b, const Op& op) {
  return encode_record(b, op, true);
}

inline flatbuffers::Offset<fb::Type> encode_type(Builder& b, const ir::TensorType& t) {
  flatbuffers::Offset<fb::Quant> q = 0;
  if (t.quant)
    q = fb::CreateQuant(b, b.CreateString(std::string(ir::name(t.quant->format))),
                        t.quant->group_size, t.quant->zero_point, t.quant->act_order, t.quant->min,
                        t.quant->super_rows);
  auto shape = b.CreateVector(t.shape);
  auto dt = b.CreateString(std::string(ir::name(t.dtype)));
  auto lay = b.CreateString(t.layout == ir::Layout::panels ? "panels" : "row_major");
  return fb::CreateType(b, shape, dt, lay, q);
}

// ---- decoding -----------------------------------------------------------------------------

inline const fb::Value& need(const fb::Value* v, std::string_view path) {
  if (v == nullptr)
    fail(path, "missing value");
  return *v;
}

inline void expect_kind(const fb::Value& v, fb::ValueKind k, std::string_view path) {
  if (v.kind() != k)
    fail(path, std::string("expected a value of kind ") + fb::EnumNameValueKind(k) + ", got " +
                   (v.kind() <= fb::ValueKind::MAX ? fb::EnumNameValueKind(v.kind()) : "?"));
}

inline std::string need_string(const flatbuffers::String* s, std::string_view path) {
  if (s == nullptr)
    fail(path, "missing text");
  return s->str();
}

template <class T>
void decode(const fb::Value& v, T& out, const std::string& path);

template <class T>
void decode_record(const fb::Value& v, T& out, const std::string& path, bool op_attrs) {
  expect_kind(v, fb::ValueKind::record, path);
  const auto* fields = v.fields();
  std::size_t used = 0;
  auto find = [&](const char* key) -> const fb::Value* {
    if (fields == nullptr)
      return nullptr;
    for (const auto* f : *fields)
      if (f->key()->string_view() == key)
        return f->value();
    return nullptr;
  };
  auto one = [&](const char* key, auto& m) {
    using M = std::decay_t<decltype(m)>;
    const fb::Value* fv = find(key);
    const std::string sub = path + "." + key;
    if constexpr (ir::is_optional_v<M>) {
      if (fv == nullptr) {
        m.reset();
        return;
      }
      m.emplace();
      decode(*fv, *m, sub);
    } else {
      if (fv == nullptr)
        fail(sub, "missing member");
      decode(*fv, m, sub);
    }
    ++used;
  };
  static_cast<void>(op_attrs);
  if constexpr (ir::AttrStruct<T>)
    T::fields(out, one);
  else
    T::attrs(out, one);
  if (fields != nullptr && fields->size() != used)
    fail(path,
         "has " + std::to_string(fields->size()) + " members, expected " + std::to_string(used));
}

template <class T>
void decode(const fb::Value& v, T& out, const std::string& path) {
  if constexpr (std::is_same_v<T, bool>) {
    expect_kind(v, fb::ValueKind::boolean, path);
    if (v.i() != 0 && v.i() != 1)
      fail(path, "boolean is not 0 or 1");
    out = v.i() == 1;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    expect_kind(v, fb::ValueKind::integer, path);
    out = v.i();
  } else if constexpr (std::is_same_v<T, float>) {
    expect_kind(v, fb::ValueKind::real, path);
    out = v.f();
  } else if constexpr (std::is_same_v<T, std::string>) {
    expect_kind(v, fb::ValueKind::text, path);
    out = need_string(v.s(), path);
  } else if constexpr (std::is_same_v<T, ir::SymbolRef>) {
    expect_kind(v, fb::ValueKind::symbol, path);
    out.name = need_string(v.s(), path);
  } else if constexpr (std::is_same_v<T, ir::DType>) {
    expect_kind(v, fb::ValueKind::enumeration, path);
    auto d = ir::parse_dtype(need_string(v.s(), path));
    if (!d)
      fail(path, "unknown element type '" + v.s()->str() + "'");
    out = *d;
  } else if constexpr (ir::NamedEnum<T>) {
    expect_kind(v, fb::ValueKind::enumeration, path);
    auto e = ir::parse_enum<T>(need_string(v.s(), path));
    if (!e)
      fail(path, "unknown enumerator '" + v.s()->str() + "'");
    out = *e;
  } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
    expect_kind(v, fb::ValueKind::ints, path);
    out.clear();
    if (v.ints() != nullptr)
      out.assign(v.ints()->begin(), v.ints()->end());
  } else if constexpr (ir::is_vector_v<T>) {
    expect_kind(v, fb::ValueKind::list, path);
    out.clear();
    if (v.items() != nullptr)
      for (flatbuffers::uoffset_t i = 0; i < v.items()->size(); ++i) {
        out.emplace_back();
        decode(need(v.items()->Get(i), path), out.back(), path + "[" + std::to_string(i) + "]");
      }
  } else if constexpr (ir::AttrStruct<T>) {
    decode_record(v, out, path, false);
  } else {
    static_assert(sizeof(T) == 0, "attribute member type without a bundle decoding");
  }
}

/// Limits of a decoded type: rank and element count (2^40, far above any model, far below
/// where byte sizes overflow).
inline constexpr std::size_t kMaxRank = 8;
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

inline ir::TensorType decode_type(const fb::Type* t, const std::string& path) {
  if (t == nullptr)
    fail(path, "missing type");
  ir::TensorType r;
  if (t->shape()->size() > kMaxRank)
    fail(path,
         "rank " + std::to_string(t->shape()->size()) + " exceeds " + std::to_string(kMaxRank));
  std::int64_t elements = 1;
  for (std::int64_t d : *t->shape()) {
    if (d < 0 || d > kMaxElements || (d > 0 && elements > kMaxElements / d))
      fail(path,
           "shape is negative or too large (over " + std::to_string(kMaxElements) + " elements)");
    elements *= d;
    r.shape.push_back(d);
  }
  auto d = ir::parse_dtype(t->dtype()->string_view());
  if (!d)
    fail(path, "unknown element type '" + t->dtype()->str() + "'");
  r.dtype = *d;
  const auto lay = t->layout()->string_view();
  if (lay == "panels")
    r.layout = ir::Layout::panels;
  else if (lay != "row_major")
    fail(path, "unknown layout '" + t->layout()->str() + "'");
  if (t->quant() != nullptr) {
    auto f = ir::parse_quant_format(t->quant()->format()->string_view());
    if (!f)
      fail(path, "unknown quantization format '" + t->quant()->format()->str() + "'");
    r.quant = ir::QuantSpec{*f, t->quant()->group_size(), t->quant()->zero_point(),
                            t->quant()->act_order(), t->quant()->min()};
    r.quant->super_rows = t->quant()->super_rows();
    if (auto why = ir::kv_rows_violation(r))
      fail(path, *why);
  }
  return r;
}

} // namespace tpullm::bundle::codec
