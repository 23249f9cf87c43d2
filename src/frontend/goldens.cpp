// Out-of-line definitions of tpullm/frontend/goldens.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/goldens.hpp"

namespace tpullm::frontend {

auto GoldenLogits::row(std::int64_t r) const -> std::span<const float> {
  check(r >= 0 && r < rows, ErrorKind::invalid_input, "GoldenLogits", "row ", r,
        " out of range [0, ", rows, ")");
  return std::span<const float>(data).subspan(static_cast<std::size_t>(r * vocab),
                                              static_cast<std::size_t>(vocab));
}

auto GoldenLogits::max_abs() const -> float {
  float m = 0;
  for (float x : data) {
    if (std::isnan(x))
      return x;
    m = std::max(m, std::abs(x));
  }
  return m;
}

LogitsMatch compare_logits(std::span<const float> ours, const GoldenLogits& golden, float rel_tol) {
  check_rel_tol(rel_tol);
  check(ours.size() == golden.data.size(), ErrorKind::invalid_input, "compare_logits", "got ",
        ours.size(), " logits, golden has ", golden.data.size(), " (", golden.rows, " x ",
        golden.vocab, ")");
  const float scale = golden.max_abs();
  check(std::isfinite(scale), ErrorKind::invalid_input, "compare_logits",
        "golden logits are not finite");
  LogitsMatch r;
  r.tolerance = rel_tol * scale;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const float e = std::abs(ours[i] - golden.data[i]);
    if (!(e <= r.max_abs_err)) { // also catches NaN
      r.max_abs_err = std::isnan(e) ? INFINITY : e;
      r.worst_index = static_cast<std::int64_t>(i);
    }
  }
  r.ok = r.max_abs_err <= r.tolerance;
  return r;
}

} // namespace tpullm::frontend

namespace tpullm::frontend::detail {

std::vector<std::int32_t> golden_ids(const SafetensorsFile& f, const std::string& name) {
  const TensorView& v = f.at(name);
  check(v.dtype == DType::i32 && v.rank() == 1, ErrorKind::invalid_input, v.where(),
        "expected a 1-D I32 tensor, got ", dtype_name(v.dtype), " ", shape_str(v.shape));
  return v.to_i32();
}

GoldenLogits golden_logits(const SafetensorsFile& f, const std::string& name, std::int64_t rows,
                           std::int64_t& vocab) {
  const TensorView& v = f.at(name);
  check(v.rank() == 2 && is_float(v.dtype), ErrorKind::invalid_input, v.where(),
        "expected 2-D float logits, got ", dtype_name(v.dtype), " ", shape_str(v.shape));
  if (vocab == 0)
    vocab = v.shape[1];
  check(v.shape[0] == rows && v.shape[1] == vocab && vocab > 0, ErrorKind::invalid_input, v.where(),
        "shape ", shape_str(v.shape), ", expected [", rows, ", ", vocab, "]");
  GoldenLogits g{rows, vocab, v.to_f32()};
  for (std::size_t i = 0; i < g.data.size(); ++i)
    if (!std::isfinite(g.data[i])) [[unlikely]]
      throw_error(ErrorKind::invalid_input, v.where(), "element [",
                  static_cast<std::int64_t>(i) / vocab, ", ", static_cast<std::int64_t>(i) % vocab,
                  "] is ", g.data[i], ": goldens must be finite");
  return g;
}

GoldenScenario golden_scenario(const SafetensorsFile& f, const std::string& s, bool last_only,
                               std::int64_t start, std::int64_t& vocab) {
  GoldenScenario g;
  g.start_position = start;
  g.last_only = last_only;
  g.prompt = golden_ids(f, s + ".prompt");
  check(!g.prompt.empty(), ErrorKind::invalid_input, f.source(), "empty ", s, ".prompt");
  g.prefill_logits =
      golden_logits(f, s + (last_only ? ".last_logits" : ".prefill_logits"),
                    last_only ? 1 : static_cast<std::int64_t>(g.prompt.size()), vocab);
  g.decode_tokens = golden_ids(f, s + ".decode_tokens");
  g.decode_logits = golden_logits(f, s + ".decode_logits",
                                  static_cast<std::int64_t>(g.decode_tokens.size()), vocab);
  for (const auto* ids : {&g.prompt, &g.decode_tokens})
    for (std::int32_t t : *ids)
      check(t >= 0 && t < vocab, ErrorKind::invalid_input, f.source(), s, ": token id ", t,
            " outside the vocabulary [0, ", vocab, ")");
  return g;
}

} // namespace tpullm::frontend::detail

namespace tpullm::frontend {

Goldens load_goldens(const std::filesystem::path& path, FileAccess access) {
  std::error_code ec;
  const std::filesystem::path file =
      std::filesystem::is_directory(path, ec) ? path / "goldens.safetensors" : path;
  const SafetensorsFile f = SafetensorsFile::open(file, access);
  Goldens g;
  g.a = detail::golden_scenario(f, "a", false, 0, g.vocab);
  const auto b_start = static_cast<std::int64_t>(g.a.prompt.size() + g.a.decode_tokens.size());
  g.b = detail::golden_scenario(f, "b", false, b_start, g.vocab);
  g.c = detail::golden_scenario(f, "c", true, 0, g.vocab);
  return g;
}

} // namespace tpullm::frontend
