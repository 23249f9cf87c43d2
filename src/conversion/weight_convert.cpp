// Top -> Tpu weight conversion: float packing, GPTQ/AWQ repacking, the conversion cache.
#include "tpullm/conversion/weight_convert.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "tpullm/conversion/ggml_blocks.hpp"
#include "tpullm/support/float16.hpp"

namespace tpullm::conversion {

using kernels::PackedWeights;
using kernels::WeightFormat;

namespace {

std::string where_of(const ir::Weight& w) {
  return "weight @" + w.name;
}

/// A part's bytes as a vector of T (copied: part bytes may be unaligned), checking its dtype
/// and size.
template <class T>
std::vector<T> part_as(const ir::Weight& w, const ir::WeightPart& p, ir::DType want) {
  check(p.dtype == want, ErrorKind::unsupported, where_of(w), "part '", p.role, "' is ",
        ir::name(p.dtype), ", expected ", ir::name(want));
  std::int64_t n = 1;
  for (auto d : p.shape)
    n *= d;
  check(static_cast<std::int64_t>(p.bytes.size()) == n * static_cast<std::int64_t>(sizeof(T)),
        ErrorKind::invalid_input, where_of(w), "part '", p.role, "' ", ir::shape_str(p.shape),
        " has ", p.bytes.size(), " bytes, expected ", n * static_cast<std::int64_t>(sizeof(T)));
  std::vector<T> v(static_cast<std::size_t>(n));
  if (n > 0)
    std::memcpy(v.data(), p.bytes.data(), p.bytes.size());
  return v;
}

float read_float(const std::byte* p, ir::DType t) {
  switch (t) {
  case ir::DType::f32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case ir::DType::f64: {
    double d;
    std::memcpy(&d, p, 8);
    return static_cast<float>(d);
  }
  case ir::DType::bf16: {
    std::uint16_t b;
    std::memcpy(&b, p, 2);
    return bf16_to_f32(b);
  }
  case ir::DType::f16: {
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
  }
  default:
    break;
  }
  throw_error(ErrorKind::unsupported, "", "not a float element type: ", ir::name(t));
}

/// Element bits of `v` stored as `t` (f32 / bf16 / f16) in `out`; throws when a finite value
/// does not fit f16.
void write_float(std::uint8_t* out, float v, ir::DType t, const std::string& where) {
  switch (t) {
  case ir::DType::f32:
    std::memcpy(out, &v, 4);
    return;
  case ir::DType::bf16: {
    const std::uint16_t b = f32_to_bf16(v);
    std::memcpy(out, &b, 2);
    return;
  }
  case ir::DType::f16: {
    const std::uint16_t h = f32_to_f16(v);
    check(!std::isfinite(v) || std::isfinite(f16_to_f32(h)), ErrorKind::invalid_input, where,
          "value ", v, " does not fit f16; compile in bf16 or f32 mode");
    std::memcpy(out, &h, 2);
    return;
  }
  default:
    break;
  }
  throw_error(ErrorKind::unsupported, where, "cannot store weights as ", ir::name(t));
}

WeightFormat float_format(ir::DType t, const std::string& where) {
  switch (t) {
  case ir::DType::f32:
    return WeightFormat::f32;
  case ir::DType::bf16:
    return WeightFormat::bf16;
  case ir::DType::f16:
    return WeightFormat::f16;
  default:
    break;
  }
  throw_error(ErrorKind::unsupported, where,
              "float weights can be stored as f32, bf16 or f16, not ", ir::name(t));
}

/// Packs a float weight stored [rows, cols] (row-major, any float dtype) as W [K, N] in `f`:
/// W[k][n] = src[n][k] when transposed, else src[k][n]. Streams 32 source rows at a time.
PackedWeights pack_float(const ir::Weight& w, bool transposed, WeightFormat f, ir::DType dt) {
  const ir::WeightPart& p = w.part("data");
  check(p.shape.size() == 2, ErrorKind::invalid_input, where_of(w), "must be rank 2, stored as ",
        ir::shape_str(p.shape));
  const std::int64_t rows = p.shape[0], cols = p.shape[1];
  const std::int64_t K = transposed ? cols : rows, N = transposed ? rows : cols;
  const std::int64_t esz = ir::byte_size(p.dtype, 1);
  check(static_cast<std::int64_t>(p.bytes.size()) == rows * cols * esz, ErrorKind::invalid_input,
        where_of(w), "data has ", p.bytes.size(), " bytes, expected ", rows * cols * esz);
  PackedWeights out = kernels::detail::make_packed(f, K, N, K);
  const std::int64_t Kp = out.stored_rows();
  const std::byte* src = p.bytes.data();
  const std::string where = where_of(w);
  const std::int64_t osz = kernels::row_bytes(f) / kernels::kPanelCols;
  for (std::int64_t n0 = 0; n0 < N; n0 += kernels::kPanelCols) {
    const std::int64_t n1 = std::min(N, n0 + kernels::kPanelCols);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = n0; n < n1; ++n) {
        const std::int64_t idx = transposed ? n * K + k : k * N + n;
        const float v = read_float(src + idx * esz, p.dtype);
        std::uint8_t* dst = out.data.data() + kernels::detail::elem_offset(f, Kp, k, n);
        write_float(dst, v, dt, where);
        (void)osz;
      }
  }
  return out;
}

} // namespace

WeightFormat packed_format(const ir::TensorType& t) {
  check(t.layout == ir::Layout::panels && t.rank() == 2, ErrorKind::invalid_input, t.str(),
        "is not a packed weight type");
  if (!t.quant)
    return float_format(t.dtype, t.str());
  check(t.quant->format == ir::QuantFormat::packed, ErrorKind::invalid_input, t.str(),
        "quantized panels must use the packed format");
  switch (t.dtype) {
  case ir::DType::i8:
    return WeightFormat::int8;
  case ir::DType::i4:
    return WeightFormat::int4_sym;
  case ir::DType::i6:
    return WeightFormat::int6_sym;
  case ir::DType::u6:
    check(t.quant->min, ErrorKind::invalid_input, t.str(), "u6 panels carry mins");
    return WeightFormat::int6_min;
  case ir::DType::u4:
    return t.quant->min ? WeightFormat::int4_min : WeightFormat::int4_asym;
  case ir::DType::u8:
    return t.quant->min ? WeightFormat::int8_min : WeightFormat::int8_asym;
  default:
    break;
  }
  throw_error(ErrorKind::unsupported, t.str(), "no packed kernel format for this weight type");
}

ir::TensorType packed_type(WeightFormat f, std::int64_t K, std::int64_t N, std::int64_t group,
                           bool act_order, std::int64_t super_rows) {
  ir::TensorType t({K, N}, ir::DType::f32, std::nullopt, ir::Layout::panels);
  ir::QuantSpec q;
  q.format = ir::QuantFormat::packed;
  q.group_size = group;
  q.act_order = act_order;
  q.super_rows = super_rows;
  switch (f) {
  case WeightFormat::f32:
    t.dtype = ir::DType::f32;
    return t;
  case WeightFormat::bf16:
    t.dtype = ir::DType::bf16;
    return t;
  case WeightFormat::f16:
    t.dtype = ir::DType::f16;
    return t;
  case WeightFormat::int8:
    t.dtype = ir::DType::i8;
    break;
  case WeightFormat::int4_sym:
    t.dtype = ir::DType::i4;
    break;
  case WeightFormat::int4_asym:
    t.dtype = ir::DType::u4;
    q.zero_point = true;
    break;
  case WeightFormat::int8_asym:
    t.dtype = ir::DType::u8;
    q.zero_point = true;
    break;
  case WeightFormat::int4_min:
    t.dtype = ir::DType::u4;
    q.min = true;
    break;
  case WeightFormat::int8_min:
    t.dtype = ir::DType::u8;
    q.min = true;
    break;
  case WeightFormat::int6_sym:
    t.dtype = ir::DType::i6;
    break;
  case WeightFormat::int6_min:
    t.dtype = ir::DType::u6;
    q.min = true;
    break;
  }
  t.quant = q;
  return t;
}

PackedWeights packed_view(const ir::Weight& w) {
  const WeightFormat f = packed_format(w.type);
  const std::int64_t K = w.type.shape[0], N = w.type.shape[1];
  PackedWeights p;
  p.format = f;
  p.K = K;
  p.N = N;
  p.group_size = kernels::is_quantized(f) ? w.type.quant->group_size : K;
  p.super_rows = kernels::is_quantized(f) ? w.type.quant->super_rows : 0;
  const std::string where = where_of(w);
  auto bytes_of = [&](const char* role, std::int64_t want, ir::DType dt) {
    const ir::WeightPart* part = w.find_part(role);
    check(part != nullptr, ErrorKind::invalid_input, where, "has no part '", role, "'");
    check(part->dtype == dt && static_cast<std::int64_t>(part->bytes.size()) == want,
          ErrorKind::invalid_input, where, "part '", role, "' has ", part->bytes.size(),
          " bytes of ", ir::name(part->dtype), ", expected ", want, " bytes of ", ir::name(dt));
    return part->bytes.data();
  };
  const std::int64_t data_bytes = p.panels() * p.panel_bytes();
  p.data = kernels::AlignedArray<std::uint8_t>::borrow(
      reinterpret_cast<const std::uint8_t*>(bytes_of("data", data_bytes, ir::DType::u8)),
      static_cast<std::size_t>(data_bytes));
  if (kernels::is_quantized(f)) {
    const std::int64_t n = p.panels() * p.groups() * kernels::kPanelCols;
    const std::int64_t ns = p.panels() * p.scale_rows() * kernels::kPanelCols;
    check(kernels::super_rows_fit(f, K, p.group_size, p.super_rows), ErrorKind::invalid_input,
          where, "has two-level scales of ", p.super_rows,
          " rows that do not fit its groups (a multiple of the group size dividing K)");
    if (p.two_level()) {
      p.scale_codes = kernels::AlignedArray<std::int8_t>::borrow(
          reinterpret_cast<const std::int8_t*>(bytes_of("scale_codes", n, ir::DType::i8)),
          static_cast<std::size_t>(n));
      if (kernels::has_mins(f))
        p.min_codes = kernels::AlignedArray<std::int8_t>::borrow(
            reinterpret_cast<const std::int8_t*>(bytes_of("min_codes", n, ir::DType::i8)),
            static_cast<std::size_t>(n));
    }
    const auto* s = bytes_of("scales", ns * 4, ir::DType::f32);
    check(reinterpret_cast<std::uintptr_t>(s) % alignof(float) == 0, ErrorKind::invalid_input,
          where, "scales are not 4-byte aligned");
    p.scales = kernels::AlignedArray<float>::borrow(reinterpret_cast<const float*>(s),
                                                    static_cast<std::size_t>(ns));
    if (kernels::has_zeros(f))
      p.zeros = kernels::AlignedArray<std::uint8_t>::borrow(
          reinterpret_cast<const std::uint8_t*>(bytes_of("zeros", n, ir::DType::u8)),
          static_cast<std::size_t>(n));
    if (kernels::has_mins(f)) {
      const auto* m = bytes_of("mins", ns * 4, ir::DType::f32);
      check(reinterpret_cast<std::uintptr_t>(m) % alignof(float) == 0, ErrorKind::invalid_input,
            where, "mins are not 4-byte aligned");
      p.mins = kernels::AlignedArray<float>::borrow(reinterpret_cast<const float*>(m),
                                                    static_cast<std::size_t>(ns));
    }
  }
  if (const ir::WeightPart* perm = w.find_part("k_perm")) {
    check(perm->dtype == ir::DType::i32 && static_cast<std::int64_t>(perm->bytes.size()) == K * 4,
          ErrorKind::invalid_input, where, "part 'k_perm' must be [K] i32");
    p.k_perm.resize(static_cast<std::size_t>(K));
    std::memcpy(p.k_perm.data(), perm->bytes.data(), perm->bytes.size());
  }
  return p;
}

ir::Weight make_packed_weight(std::string name, PackedWeights pw, bool act_order) {
  auto owner = std::make_shared<PackedWeights>(std::move(pw));
  const PackedWeights& p = *owner;
  ir::Weight w;
  w.name = std::move(name);
  w.type =
      packed_type(p.format, p.K, p.N, p.group_size, act_order && !p.k_perm.empty(), p.super_rows);
  auto as_bytes = [](const void* d, std::size_t n) {
    return std::span<const std::byte>(static_cast<const std::byte*>(d), n);
  };
  w.parts.push_back({"data",
                     ir::DType::u8,
                     {static_cast<std::int64_t>(p.data.size())},
                     as_bytes(p.data.data(), p.data.size()),
                     owner});
  if (!p.scales.empty())
    w.parts.push_back({"scales",
                       ir::DType::f32,
                       {static_cast<std::int64_t>(p.scales.size())},
                       as_bytes(p.scales.data(), p.scales.size() * sizeof(float)),
                       owner});
  if (!p.zeros.empty())
    w.parts.push_back({"zeros",
                       ir::DType::u8,
                       {static_cast<std::int64_t>(p.zeros.size())},
                       as_bytes(p.zeros.data(), p.zeros.size()),
                       owner});
  if (!p.mins.empty())
    w.parts.push_back({"mins",
                       ir::DType::f32,
                       {static_cast<std::int64_t>(p.mins.size())},
                       as_bytes(p.mins.data(), p.mins.size() * sizeof(float)),
                       owner});
  for (const auto& [role, codes] :
       {std::pair{"scale_codes", &p.scale_codes}, std::pair{"min_codes", &p.min_codes}})
    if (!codes->empty())
      w.parts.push_back({role,
                         ir::DType::i8,
                         {static_cast<std::int64_t>(codes->size())},
                         as_bytes(codes->data(), codes->size()),
                         owner});
  if (!p.k_perm.empty())
    w.parts.push_back({"k_perm",
                       ir::DType::i32,
                       {static_cast<std::int64_t>(p.k_perm.size())},
                       as_bytes(p.k_perm.data(), p.k_perm.size() * sizeof(std::int32_t)),
                       owner});
  return w;
}

QuantPlain unpack_quant_weight(const ir::Weight& w) {
  const std::string where = where_of(w);
  check(w.type.quant.has_value() && w.type.rank() == 2, ErrorKind::invalid_input, where,
        "is not a quantized [K, N] weight: ", w.type.str());
  const ir::QuantSpec& q = *w.type.quant;
  check(q.format != ir::QuantFormat::packed, ErrorKind::unsupported, where,
        "is already packed; expected a GPTQ or AWQ weight");
  if (q.format == ir::QuantFormat::ggml) {
    // Stored rows [N, K]: decoded into the plain [K, N] form every other layout unpacks to.
    const auto info = ggml_type_info(q.ggml_type);
    check(info.has_value(), ErrorKind::invalid_input, where, "unknown ggml type id ", q.ggml_type);
    const ir::WeightPart& b = w.part("blocks");
    try {
      return decode_ggml_rows(info->type, b.bytes, w.type.shape[1], w.type.shape[0]);
    } catch (const Error& e) {
      throw e.within(where);
    }
  }
  check(w.type.dtype == ir::DType::u4 || w.type.dtype == ir::DType::u8, ErrorKind::unsupported,
        where, "only 4-bit (u4) and 8-bit (u8) GPTQ / AWQ weights are supported, got ",
        w.type.str());
  const int bits = w.type.dtype == ir::DType::u4 ? 4 : 8;
  const bool awq = q.format == ir::QuantFormat::awq;
  check(!awq || bits == 4, ErrorKind::unsupported, where, "AWQ GEMM weights are 4-bit, got ",
        w.type.str());
  const std::int64_t K = w.type.shape[0], N = w.type.shape[1];
  const std::int64_t group = q.group_size == 0 ? K : q.group_size;
  const int pack = 32 / bits;
  const auto qweight = part_as<std::int32_t>(w, w.part("qweight"), ir::DType::i32);
  // Scales in any float dtype (GPTQ / AWQ store F16; compressed-tensors also BF16 / F32),
  // widened exactly.
  const ir::WeightPart& sp = w.part("scales");
  check(sp.dtype == ir::DType::f16 || sp.dtype == ir::DType::bf16 || sp.dtype == ir::DType::f32,
        ErrorKind::invalid_input, where, "part 'scales' is ", ir::name(sp.dtype),
        ", expected f16, bf16 or f32");
  const std::size_t s_esz = static_cast<std::size_t>(ir::byte_size(sp.dtype, 1));
  std::vector<float> scales(sp.bytes.size() / s_esz);
  for (std::size_t i = 0; i < scales.size(); ++i)
    scales[i] = read_float(sp.bytes.data() + i * s_esz, sp.dtype);
  const int zero_offset = q.format == ir::QuantFormat::gptq ? 1 : 0;
  std::vector<std::int32_t> qzeros;
  if (const auto* z = w.find_part("qzeros")) {
    check(q.zero_point, ErrorKind::invalid_input, where,
          "has a 'qzeros' part but its quant spec has no zero_point");
    qzeros = part_as<std::int32_t>(w, *z, ir::DType::i32);
  } else {
    check(!q.zero_point, ErrorKind::invalid_input, where,
          "quant spec has zero_point but the weight has no 'qzeros' part");
    check(group > 0 && K % group == 0 && N % pack == 0, ErrorKind::invalid_input, where, "K=", K,
          " must be a multiple of group ", group, " and N=", N, " of ", pack);
    // No stored zeros: every zero is the midpoint 2^(bits-1) (signed values stored offset).
    std::uint32_t word = 0;
    for (int i = 0; i < pack; ++i)
      word |= static_cast<std::uint32_t>((1 << (bits - 1)) - zero_offset) << (bits * i);
    qzeros.assign(static_cast<std::size_t>(K / group * N / pack), static_cast<std::int32_t>(word));
  }
  try {
    if (awq)
      return unpack_awq(qweight, qzeros, std::span<const float>(scales), K, N, group);
    std::vector<std::int32_t> g_idx;
    if (const auto* g = w.find_part("g_idx"))
      g_idx = part_as<std::int32_t>(w, *g, ir::DType::i32);
    return unpack_gptq(qweight, qzeros, std::span<const float>(scales), g_idx, K, N, group,
                       zero_offset, bits);
  } catch (const Error& e) {
    throw e.within(where);
  }
}

std::vector<float> float_values(const ir::Weight& w) {
  const ir::WeightPart& p = w.part("data");
  check(ir::is_float(p.dtype), ErrorKind::unsupported, where_of(w), "stored as ", ir::name(p.dtype),
        ", not a float type");
  const std::int64_t esz = ir::byte_size(p.dtype, 1);
  const std::size_t n = p.bytes.size() / static_cast<std::size_t>(esz);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = read_float(p.bytes.data() + i * static_cast<std::size_t>(esz), p.dtype);
  return v;
}

template <class F>
const ir::Weight& WeightConverter::memo(const std::string& key, F&& make) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = cache_[key];
    if (!slot)
      slot = std::make_shared<Entry>();
    e = slot;
  }
  bool made = false;
  std::call_once(e->once, [&] {
    e->weight = make();
    made = true;
  });
  std::lock_guard<std::mutex> lock(mutex_);
  (made ? conversions_ : hits_) += 1;
  return e->weight;
}

namespace {
/// Identity of a weight's data: its first part's address and size, or its name without data.
std::string identity(const ir::Weight& w) {
  if (!w.has_data())
    return "name:" + w.name;
  std::ostringstream os;
  os << "data:" << static_cast<const void*>(w.parts.front().bytes.data()) << ":"
     << w.parts.front().bytes.size() << ":" << w.name;
  return os.str();
}
} // namespace

const ir::Weight& WeightConverter::packed(const ir::Weight& src, bool transposed, ir::DType dtype) {
  const std::string where = where_of(src);
  if (src.type.quant) {
    const bool rows = ir::quant_stored_as_rows(*src.type.quant);
    check(transposed == rows, ErrorKind::invalid_input, where,
          rows ? "a ggml weight is stored [N, K] and is read transposed"
               : "a quantized weight is logical [K, N] and cannot be transposed");
    check(src.type.quant->format != ir::QuantFormat::packed, ErrorKind::invalid_input, where,
          "is already packed");
    const bool eight = src.type.dtype == ir::DType::u8;
    return memo(str_cat(eight ? "q8|" : "q4|", identity(src)), [&] {
      const std::int64_t K = src.type.shape.at(rows ? 1 : 0), N = src.type.shape.at(rows ? 0 : 1);
      // A ggml weight's name keeps its source type ("layers.0.q.ggml_q4_k"): `inspect` shows it.
      const std::string name = src.name + (rows    ? "." + ir::quant_spelling(*src.type.quant)
                                           : eight ? ".pq8"
                                                   : ".pq4");
      if (!src.has_data() && rows) {
        // Types only, a ggml weight: its type decides the container (ggml_blocks.hpp).
        const auto info = ggml_type_info(src.type.quant->ggml_type);
        const GgmlPacking pk = info ? ggml_packing(info->type) : GgmlPacking{};
        check(pk.bits != 0, ErrorKind::invalid_input, where, "is not an importable ggml type");
        return ir::Weight{
            name, packed_type(pk.format(), K, N, pk.group_size, false, pk.super_rows), {}};
      }
      if (!src.has_data()) {
        // Types only: act-order and symmetry are decided by the data; assume asymmetric 4-bit
        // (8-bit packs only symmetrically).
        ir::Weight w{name,
                     packed_type(eight ? WeightFormat::int8 : WeightFormat::int4_asym, K, N,
                                 src.type.quant->group_size == 0 ? K : src.type.quant->group_size,
                                 src.type.quant->act_order),
                     {}};
        return w;
      }
      const QuantPlain plain = unpack_quant_weight(src);
      try {
        return make_packed_weight(name, repack_quant(plain), true);
      } catch (const Error& e) {
        throw e.within(where);
      }
    });
  }
  check(ir::is_float(src.type.dtype) && src.type.rank() == 2, ErrorKind::invalid_input, where,
        "must be a float matrix or a GPTQ / AWQ weight, got ", src.type.str());
  const WeightFormat f = float_format(dtype, where);
  return memo(str_cat("p", ir::name(dtype), transposed ? "t|" : "|", identity(src)), [&] {
    const std::int64_t r = src.type.shape[0], c = src.type.shape[1];
    const std::int64_t K = transposed ? c : r, N = transposed ? r : c;
    const std::string name = src.name + ".p" + std::string(ir::name(dtype));
    if (!src.has_data())
      return ir::Weight{name, packed_type(f, K, N, K, false), {}};
    return make_packed_weight(name, pack_float(src, transposed, f, dtype), false);
  });
}

const ir::Weight& WeightConverter::quantized(const ir::Weight& src, bool transposed,
                                             const RtnOptions& o) {
  if (src.type.quant)
    return packed(src, transposed, ir::DType::f32); // direct-through: already integer
  const std::string where = where_of(src);
  check(ir::is_float(src.type.dtype) && src.type.rank() == 2, ErrorKind::invalid_input, where,
        "must be a float matrix to be quantized, got ", src.type.str());
  check(o.bits == 4 || o.bits == 8, ErrorKind::invalid_input, where, "cannot quantize to ", o.bits,
        " bits (4 or 8)");
  const std::string tag = str_cat("w", o.bits, o.symmetric ? "s" : "a", "g", o.group_size);
  return memo(str_cat("rtn", tag, transposed ? "t|" : "|", identity(src)), [&] {
    const std::int64_t r = src.type.shape[0], c = src.type.shape[1];
    const std::int64_t K = transposed ? c : r, N = transposed ? r : c;
    const std::int64_t group = o.group_size == 0 ? K : o.group_size;
    check(group > 0 && K % group == 0 && (group == K || group % 8 == 0), ErrorKind::invalid_input,
          where, "K = ", K, " is not a multiple of the group size ", o.group_size,
          "; choose a group size (a multiple of 8) that divides it, or 0 (one group per output "
          "channel)");
    const WeightFormat f = o.bits == 4
                               ? (o.symmetric ? WeightFormat::int4_sym : WeightFormat::int4_asym)
                               : (o.symmetric ? WeightFormat::int8 : WeightFormat::int8_asym);
    const std::string name = src.name + ".rtn" + tag;
    if (!src.has_data())
      return ir::Weight{name, packed_type(f, K, N, group, false), {}};
    const std::vector<float> v = float_values(src);
    std::vector<float> kn;
    if (transposed) {
      kn.resize(v.size());
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t k = 0; k < K; ++k)
          kn[static_cast<std::size_t>(k * N + n)] = v[static_cast<std::size_t>(n * K + k)];
    }
    try {
      const QuantPlain plain = rtn_quantize(transposed ? kn : v, K, N, o);
      return make_packed_weight(name, repack_quant(plain, o.symmetric), false);
    } catch (const Error& e) {
      throw e.within(where);
    }
  });
}

const ir::Weight& WeightConverter::row_major(const ir::Weight& src, ir::DType dtype) {
  const std::string where = where_of(src);
  check(ir::is_float(src.type.dtype) && !src.type.quant && src.type.layout == ir::Layout::row_major,
        ErrorKind::invalid_input, where, "must be a row-major float tensor, got ", src.type.str());
  float_format(dtype, where); // refuses anything but f32 / bf16 / f16
  const bool same = src.type.dtype == dtype && (!src.has_data() || src.part("data").dtype == dtype);
  return memo(str_cat("r", ir::name(dtype), "|", identity(src)), [&] {
    if (same)
      return src;
    ir::Weight w{src.name + "." + std::string(ir::name(dtype)), src.type, {}};
    w.type.dtype = dtype;
    if (!src.has_data())
      return w;
    const std::vector<float> v = float_values(src);
    const std::int64_t esz = ir::byte_size(dtype, 1);
    auto buf =
        std::make_shared<std::vector<std::uint8_t>>(v.size() * static_cast<std::size_t>(esz));
    for (std::size_t i = 0; i < v.size(); ++i)
      write_float(buf->data() + i * static_cast<std::size_t>(esz), v[i], dtype, where);
    w.parts.push_back(
        {"data", dtype, src.part("data").shape,
         std::span<const std::byte>(reinterpret_cast<const std::byte*>(buf->data()), buf->size()),
         buf});
    return w;
  });
}

const ir::Weight& WeightConverter::concat_packed(const std::vector<const ir::Weight*>& parts) {
  check(parts.size() >= 2, ErrorKind::internal, "concat_packed", "needs at least two weights");
  std::string key = "cat";
  for (const auto* p : parts)
    key = str_cat(key, "|", identity(*p));
  return memo(key, [&] {
    const ir::Weight& first = *parts.front();
    const WeightFormat f = packed_format(first.type);
    const std::int64_t K = first.type.shape[0];
    std::int64_t N = 0;
    const bool has_data = first.has_data();
    std::vector<PackedWeights> views;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const ir::Weight& w = *parts[i];
      check(packed_format(w.type) == f && w.type.shape[0] == K &&
                w.type.quant == first.type.quant && w.has_data() == has_data,
            ErrorKind::invalid_input, where_of(w), "cannot be concatenated with @", first.name,
            ": ", w.type.str(), " vs ", first.type.str());
      check(i + 1 == parts.size() || w.type.shape[1] % kernels::kPanelCols == 0,
            ErrorKind::invalid_input, where_of(w), "N = ", w.type.shape[1],
            " is not a multiple of ", kernels::kPanelCols, "; it cannot be concatenated in place");
      N += w.type.shape[1];
      if (has_data)
        views.push_back(packed_view(w));
    }
    const std::string name = first.name + ".cat" + std::to_string(parts.size());
    const std::int64_t group = kernels::is_quantized(f) ? first.type.quant->group_size : K;
    const std::int64_t super_rows = kernels::is_quantized(f) ? first.type.quant->super_rows : 0;
    if (!has_data)
      return ir::Weight{
          name,
          packed_type(f, K, N, group, first.type.quant && first.type.quant->act_order, super_rows),
          {}};
    for (const auto& v : views)
      check(v.k_perm == views.front().k_perm, ErrorKind::invalid_input, where_of(first),
            "weights with different act-order row permutations cannot be concatenated");
    PackedWeights out = kernels::detail::make_packed(f, K, N, group, super_rows);
    out.k_perm = views.front().k_perm;
    // Every array is [P][rows][32] per panel, panel after panel: the parts' panels follow each
    // other (every part but the last has whole panels), so each array is the parts' end to end.
    auto append = [](auto& to, const auto& from, std::size_t& off) {
      if (!from.empty())
        std::memcpy(to.data() + off, from.data(), from.size() * sizeof(from[0]));
      off += from.size();
    };
    std::size_t offs[6] = {};
    for (const auto& v : views) {
      append(out.data, v.data, offs[0]);
      append(out.scales, v.scales, offs[1]);
      append(out.zeros, v.zeros, offs[2]);
      append(out.mins, v.mins, offs[3]);
      append(out.scale_codes, v.scale_codes, offs[4]);
      append(out.min_codes, v.min_codes, offs[5]);
    }
    return make_packed_weight(name, std::move(out), !views.front().k_perm.empty());
  });
}

WeightConverter::MlpOperands WeightConverter::fold_mlp_perm(const ir::Weight& gate,
                                                            const ir::Weight& up,
                                                            const ir::Weight& down) {
  const bool permuted = down.has_data() ? down.find_part("k_perm") != nullptr
                                        : down.type.quant && down.type.quant->act_order;
  if (!permuted)
    return {&gate, &up, &down};
  const std::int64_t I = down.type.shape.at(0);
  for (const ir::Weight* w : {&gate, &up})
    check(w->type.rank() == 2 && w->type.shape[1] == I && w->has_data() == down.has_data(),
          ErrorKind::invalid_input, where_of(*w), "cannot take the act-order permutation of @",
          down.name, ": ", w->type.str(), " vs ", down.type.str());
  const ir::Weight& d = memo(str_cat("noperm|", identity(down)), [&] {
    const std::string name = down.name + ".natural";
    if (!down.has_data()) {
      ir::Weight w{name, down.type, {}};
      w.type.quant->act_order = false;
      return w;
    }
    PackedWeights out = kernels::detail::copy_packed(packed_view(down));
    out.k_perm.clear(); // the rows stay as packed; gate / up take the permutation instead
    return make_packed_weight(name, std::move(out), false);
  });
  auto permuted_cols = [&](const ir::Weight& w) -> const ir::Weight& {
    return memo(str_cat("cols|", identity(w), "|", identity(down)), [&] {
      const std::string name = w.name + ".cols_of_" + down.name;
      if (!w.has_data())
        return ir::Weight{name, w.type, {}};
      const PackedWeights v = packed_view(w);
      const PackedWeights dv = packed_view(down);
      try {
        return make_packed_weight(name, kernels::permute_columns(v, dv.k_perm), !v.k_perm.empty());
      } catch (const Error& e) { // invalid input: the checkpoint's act-order permutation
        throw e.within(where_of(w));
      }
    });
  };
  return {&permuted_cols(gate), &permuted_cols(up), &d};
}

std::int64_t WeightConverter::conversions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return conversions_;
}

std::int64_t WeightConverter::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

} // namespace tpullm::conversion
