// Out-of-line definitions of tpullm/ir/type.hpp (compiled once into tpullm_core).
#include "tpullm/ir/type.hpp"

#include <cctype>

#include "tpullm/conversion/ggml_types.hpp"

namespace tpullm::ir {

std::string quant_spelling(const QuantSpec& q) {
  if (q.format != QuantFormat::ggml)
    return std::string(name(q.format));
  std::string s = "ggml_";
  if (const auto t = conversion::ggml_type_info(q.ggml_type))
    for (char c : t->name)
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  else
    s += std::to_string(q.ggml_type);
  return s;
}

bool parse_quant_spelling(std::string_view s, QuantSpec& q) {
  if (auto f = parse_quant_format(s)) {
    q.format = *f;
    return true;
  }
  for (const auto& t : conversion::kGgmlTypes) {
    QuantSpec g;
    g.format = QuantFormat::ggml;
    g.ggml_type = static_cast<std::uint32_t>(t.type);
    if (quant_spelling(g) == s) {
      q.format = QuantFormat::ggml;
      q.ggml_type = g.ggml_type;
      return true;
    }
  }
  return false;
}

std::optional<QuantFormat> parse_quant_format(std::string_view s) {
  for (auto f : {QuantFormat::gptq, QuantFormat::awq, QuantFormat::packed, QuantFormat::gptq_v2,
                 QuantFormat::kv_rows})
    if (name(f) == s)
      return f;
  return std::nullopt;
}

auto TensorType::limit_violation() const -> std::optional<std::string> {
  std::int64_t n = 1; // stays <= kMaxElements
  bool zero = false, too_many = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::int64_t d = shape[i];
    if (d < 0 || d > kMaxDim)
      return "dimension #" + std::to_string(i) + " = " + std::to_string(d) +
             " is outside [0, 2^48] in " + summary();
    if (d == 0)
      zero = true;
    else if (!too_many && n > kMaxElements / d)
      too_many = true;
    else if (!too_many)
      n *= d;
  }
  if (too_many && !zero)
    return "more than 2^48 elements in " + summary();
  return std::nullopt;
}

auto TensorType::num_elements() const -> std::int64_t {
  if (auto why = limit_violation())
    throw Error(ErrorKind::invalid_input, "", *why);
  std::int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

auto TensorType::dim(std::int64_t i) const -> std::int64_t {
  const std::int64_t a = i < 0 ? i + rank() : i;
  if (a < 0 || a >= rank())
    throw Error(ErrorKind::invalid_input, "",
                "axis " + std::to_string(i) + " does not exist in " + str());
  return shape[static_cast<std::size_t>(a)];
}

auto TensorType::summary() const -> std::string {
  if (shape.size() <= 16)
    return str();
  std::string s = "tensor<";
  for (std::size_t i = 0; i < 8; ++i)
    s += std::to_string(shape[i]) + "x";
  return s + "...(" + std::to_string(shape.size()) + " dims)x" + std::string(name(dtype)) + ">";
}

auto TensorType::str() const -> std::string {
  std::string s = "tensor<";
  for (auto d : shape)
    s += std::to_string(d) + "x";
  s += std::string(name(dtype));
  if (layout == Layout::panels)
    s += ", panels";
  if (quant && quant->format == QuantFormat::kv_rows) {
    s += ", quant<kv_rows>";
  } else if (quant) {
    s += ", quant<" + quant_spelling(*quant) + ", group = " + std::to_string(quant->group_size);
    if (quant->zero_point)
      s += ", zero_point";
    if (quant->act_order)
      s += ", act_order";
    if (quant->min)
      s += ", min";
    if (quant->super_rows != 0)
      s += ", super = " + std::to_string(quant->super_rows);
    s += ">";
  }
  return s + ">";
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace tpullm::ir
