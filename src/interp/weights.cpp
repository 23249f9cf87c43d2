// Out-of-line definitions of tpullm/interp/weights.hpp (compiled once into tpullm_core).
#include "tpullm/interp/weights.hpp"

#include <algorithm>

#include "tpullm/conversion/ggml_blocks.hpp"
#include "tpullm/interp/top_interpreter.hpp"

namespace tpullm::interp::detail {

Tensor dequantize_weight(const ir::Weight& w) {
  if (w.type.quant->format == ir::QuantFormat::ggml) {
    // ggml's own dequantization of the stored rows: [N, K] as the type says.
    const auto info = conversion::ggml_type_info(w.type.quant->ggml_type);
    check(info.has_value() && w.type.rank() == 2, ErrorKind::invalid_input, "weight @" + w.name,
          "is not a ggml [rows, cols] weight: ", w.type.str());
    std::vector<float> v;
    try {
      v = conversion::dequantize_ggml(info->type, w.part("blocks").bytes, w.type.num_elements());
    } catch (const Error& e) {
      throw e.within("weight @" + w.name);
    }
    return Tensor::from_f32(w.type.shape, v, ir::DType::f32);
  }
  check(w.type.quant->format != ir::QuantFormat::packed, ErrorKind::unsupported,
        "weight @" + w.name,
        "the kernel 'packed' layout is not a Top weight format; the interpreter reads gptq and "
        "awq checkpoint layouts");
  const conversion::QuantPlain plain = conversion::unpack_quant_weight(w);
  const std::vector<float> deq = plain.dequantize();
  return Tensor::from_f32({plain.K, plain.N}, deq, ir::DType::f32);
}

} // namespace tpullm::interp::detail

namespace tpullm::interp {

Tensor materialize_weight(const ir::Weight& w) {
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
    t = t.is_float() ? t.cast(w.type.dtype) : Tensor(std::move(t.ints()), w.type.dtype);
  return t;
}

namespace {
/// Rows of a ggml table, each dequantized alone (ggml rows are whole blocks): indices.shape +
/// [cols] f32.
Tensor gather_ggml_rows(const ir::Weight& w, const Tensor& indices) {
  const std::string where = "weight @" + w.name;
  const auto info = conversion::ggml_type_info(w.type.quant->ggml_type);
  check(info.has_value(), ErrorKind::invalid_input, where, "unknown ggml type id ",
        w.type.quant->ggml_type);
  const std::int64_t D = w.type.shape[0], C = w.type.shape[1];
  const auto row_bytes = conversion::ggml_row_bytes(info->type, C);
  const auto& bytes = w.part("blocks").bytes;
  check(row_bytes.has_value() &&
            bytes.size() == static_cast<std::size_t>(*row_bytes) * static_cast<std::size_t>(D),
        ErrorKind::invalid_input, where, "holds ", bytes.size(), " bytes, not ", D, " rows of ", C,
        " ", info->name, " elements");
  check(!indices.is_float(), ErrorKind::invalid_input, where, "gather indices must be integers");
  const IntArray& idx = indices.ints();
  const auto J = static_cast<std::int64_t>(idx.size());
  std::vector<float> out(static_cast<std::size_t>(J * C));
  for (std::int64_t j = 0; j < J; ++j) {
    const std::int64_t ix = idx.data()[j];
    check(ix >= 0 && ix < D, ErrorKind::invalid_input, "", "gather index ", ix,
          " (at flat position ", j, ") is out of range [0, ", D, ") of axis 0 of ",
          ir::shape_str(w.type.shape));
    const auto row = conversion::dequantize_ggml(
        info->type, bytes.subspan(static_cast<std::size_t>(ix * *row_bytes),
                                  static_cast<std::size_t>(*row_bytes)),
        C);
    std::copy(row.begin(), row.end(), out.begin() + j * C);
  }
  Shape shape = indices.shape();
  shape.push_back(C);
  return Tensor::from_f32(shape, out, ir::DType::f32);
}
} // namespace

Tensor gather_weight_rows(const ir::Weight& w, const Tensor& indices) {
  const std::string where = "weight @" + w.name;
  const Shape& ws = w.type.shape;
  check(!ws.empty(), ErrorKind::invalid_input, where, "is a scalar; gather needs a table");
  const bool by_rows = !w.type.quant && w.has_data() && w.parts.size() == 1 &&
                       w.parts[0].role == "data" && ir::is_float(w.parts[0].dtype) &&
                       ir::is_float(w.type.dtype) &&
                       num_elements(w.parts[0].shape) == w.type.num_elements();
  if (w.type.quant && w.type.quant->format == ir::QuantFormat::ggml && w.has_data() &&
      w.type.rank() == 2)
    return gather_ggml_rows(w, indices);
  if (!by_rows)
    return ref::gather(materialize_weight(w), indices, 0);
  const ir::WeightPart& p = w.part("data");
  const std::int64_t D = ws[0], inner = w.type.num_elements() / std::max<std::int64_t>(D, 1);
  const auto row = static_cast<std::size_t>(ir::byte_size(p.dtype, inner));
  check(p.bytes.size() == row * static_cast<std::size_t>(D), ErrorKind::invalid_input, where,
        "holds ", p.bytes.size(), " bytes; ", ir::shape_str(p.shape), " ", ir::name(p.dtype),
        " needs ", row * static_cast<std::size_t>(D));
  check(!indices.is_float(), ErrorKind::invalid_input, where, "gather indices must be integers");
  const IntArray& idx = indices.ints();
  const auto J = static_cast<std::int64_t>(idx.size());
  std::vector<std::byte> rows(row * static_cast<std::size_t>(J));
  for (std::int64_t j = 0; j < J; ++j) {
    const std::int64_t ix = idx.data()[j];
    check(ix >= 0 && ix < D, ErrorKind::invalid_input, "", "gather index ", ix,
          " (at flat position ", j, ") is out of range [0, ", D, ") of axis 0 of ",
          ir::shape_str(ws));
    std::memcpy(rows.data() + static_cast<std::size_t>(j) * row,
                p.bytes.data() + static_cast<std::size_t>(ix) * row, row);
  }
  Shape shape = indices.shape();
  shape.insert(shape.end(), ws.begin() + 1, ws.end());
  Tensor t;
  try {
    t = Tensor::from_bytes(shape, p.dtype, rows);
  } catch (const Error& e) {
    throw e.within(where);
  }
  if (p.dtype != w.type.dtype)
    t = t.cast(w.type.dtype);
  return t;
}

WeightStore::WeightStore(std::size_t budget_bytes) : budget_(budget_bytes) {
  check(budget_bytes > 0, ErrorKind::invalid_input, "weight store", "the byte budget must be > 0");
}

auto WeightStore::get(const ir::Weight& w) -> std::shared_ptr<const Tensor> {
  const std::string key = key_of(w);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    it->second.last_use = ++tick_;
    return it->second.tensor;
  }
  const auto need = static_cast<std::size_t>(w.type.num_elements()) * 8;
  if (budget_ > 0)
    make_room(need, w.name);
  Entry e;
  e.tensor = std::make_shared<const Tensor>(materialize_weight(w));
  for (const auto& p : w.parts)
    e.owners.push_back(p.owner);
  e.bytes = static_cast<std::size_t>(e.tensor->numel()) * 8;
  e.last_use = ++tick_;
  bytes_ += e.bytes;
  peak_ = std::max(peak_, bytes_);
  ++materialized_;
  return entries_.emplace(key, std::move(e)).first->second.tensor;
}

auto WeightStore::make_room(std::size_t need, const std::string& name) -> void {
  while (bytes_ + need > budget_) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.tensor.use_count() == 1 &&
          (victim == entries_.end() || it->second.last_use < victim->second.last_use))
        victim = it;
    if (victim == entries_.end()) {
      constexpr double MiB = 1024.0 * 1024.0;
      char msg[256];
      std::snprintf(msg, sizeof msg,
                    "needs %.2f MiB but %.2f MiB of weights are in use and the budget is "
                    "%.2f MiB: raise the budget",
                    static_cast<double>(need) / MiB, static_cast<double>(bytes_) / MiB,
                    static_cast<double>(budget_) / MiB);
      throw_error(ErrorKind::invalid_input, "weight @" + name, msg);
    }
    bytes_ -= victim->second.bytes;
    entries_.erase(victim);
  }
}

auto WeightStore::key_of(const ir::Weight& w) -> std::string {
  std::string k = w.type.str();
  for (const auto& p : w.parts) {
    char addr[64];
    std::snprintf(addr, sizeof addr, "%p+%zu", static_cast<const void*>(p.bytes.data()),
                  p.bytes.size());
    k += "|" + p.role + ":" + std::string(ir::name(p.dtype)) + ir::shape_str(p.shape) + "@" + addr;
  }
  return k;
}

} // namespace tpullm::interp
