#pragma once
/// Golden token ids and logits of a test checkpoint (`goldens.safetensors`, computed by
/// HF transformers in float64): three scenarios a (fresh prefill + decode), b (second turn with
/// the KV cache of a kept: prefill_kv + decode), c (long 300-token prompt, last logits + decode).

#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/support/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace tpullm::frontend {

/// Row-major logits [rows, vocab].
struct GoldenLogits {
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  /// rows * vocab floats, row-major.
  std::vector<float> data;

  /// Row r: [vocab].
  std::span<const float> row(std::int64_t r) const {
    check(r >= 0 && r < rows, ErrorKind::invalid_input, "GoldenLogits", "row ", r,
          " out of range [0, ", rows, ")");
    return std::span<const float>(data).subspan(static_cast<std::size_t>(r * vocab),
                                                static_cast<std::size_t>(vocab));
  }
  /// max |x| over all logits (the scale of the match tolerance); NaN when any logit is NaN.
  float max_abs() const {
    float m = 0;
    for (float x : data) {
      if (std::isnan(x))
        return x;
      m = std::max(m, std::abs(x));
    }
    return m;
  }
};

/// One scenario: prompt tokens fed at positions start_position.., then greedy decode.
struct GoldenScenario {
  /// Position of prompt[0] (a, c: 0; b: len(a.prompt) + len(a.decode_tokens)).
  std::int64_t start_position = 0;
  /// Prompt token ids [P].
  std::vector<std::int32_t> prompt;
  /// a, b: logits at every prompt position [P, V]; c: logits at the last position only [1, V].
  GoldenLogits prefill_logits;
  /// True for c (prefill_logits holds only the last prompt position, from "c.last_logits").
  bool last_only = false;
  /// Greedy tokens [D]; decode_tokens[0] = argmax of the last prefill row.
  std::vector<std::int32_t> decode_tokens;
  /// decode_logits[k]: logits after feeding decode_tokens[k] at position
  /// start_position + P + k, [D, V].
  GoldenLogits decode_logits;
};

/// All goldens of one model folder.
struct Goldens {
  /// Vocabulary size (columns of every logits tensor).
  std::int64_t vocab = 0;
  GoldenScenario a, b, c;
};

/// Result of comparing computed logits to golden logits.
struct LogitsMatch {
  /// max |ours - golden|.
  float max_abs_err = 0;
  /// rel_tol * max|golden|.
  float tolerance = 0;
  /// Flat index of the worst element.
  std::int64_t worst_index = 0;
  /// max_abs_err <= tolerance.
  bool ok = false;
};

/// Throws Error(invalid_input) naming "--rel-tol" unless `rel_tol` is finite and > 0 (an
/// infinite or NaN bound would pass anything, a negative one nothing).
inline void check_rel_tol(double rel_tol) {
  check(std::isfinite(rel_tol) && rel_tol > 0, ErrorKind::invalid_input, "--rel-tol",
        "must be a finite number > 0, got ", rel_tol);
}

/// Compares `ours` (row-major, same shape) to `golden` with the project's criterion
/// |ours - golden| <= rel_tol * max|golden| (default 1e-4). Throws Error on a size mismatch, a
/// non-finite golden or a rel_tol that is not finite and > 0.
inline LogitsMatch compare_logits(std::span<const float> ours, const GoldenLogits& golden,
                                  float rel_tol = 1e-4f) {
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

namespace detail {

inline std::vector<std::int32_t> golden_ids(const SafetensorsFile& f, const std::string& name) {
  const TensorView& v = f.at(name);
  check(v.dtype == DType::i32 && v.rank() == 1, ErrorKind::invalid_input, v.where(),
        "expected a 1-D I32 tensor, got ", dtype_name(v.dtype), " ", shape_str(v.shape));
  return v.to_i32();
}

inline GoldenLogits golden_logits(const SafetensorsFile& f, const std::string& name,
                                  std::int64_t rows, std::int64_t& vocab) {
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

inline GoldenScenario golden_scenario(const SafetensorsFile& f, const std::string& s,
                                      bool last_only, std::int64_t start, std::int64_t& vocab) {
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

} // namespace detail

/// Loads goldens from `path`: the goldens.safetensors file or the model folder holding it.
/// Every logit must be finite (Error(invalid_input) naming the tensor and element otherwise:
/// an infinite golden would make the tolerance infinite and pass anything). The values are
/// copied out, so the file is not used after this returns.
inline Goldens load_goldens(const std::filesystem::path& path,
                            FileAccess access = FileAccess::map) {
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
