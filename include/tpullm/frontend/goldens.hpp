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
  std::span<const float> row(std::int64_t r) const;
  /// max |x| over all logits (the scale of the match tolerance); NaN when any logit is NaN.
  float max_abs() const;
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
LogitsMatch compare_logits(std::span<const float> ours, const GoldenLogits& golden,
                           float rel_tol = 1e-4f);

namespace detail {

std::vector<std::int32_t> golden_ids(const SafetensorsFile& f, const std::string& name);

GoldenLogits golden_logits(const SafetensorsFile& f, const std::string& name, std::int64_t rows,
                           std::int64_t& vocab);

GoldenScenario golden_scenario(const SafetensorsFile& f, const std::string& s, bool last_only,
                               std::int64_t start, std::int64_t& vocab);

} // namespace detail

/// Loads goldens from `path`: the goldens.safetensors file or the model folder holding it.
/// Every logit must be finite (Error(invalid_input) naming the tensor and element otherwise:
/// an infinite golden would make the tolerance infinite and pass anything). The values are
/// copied out, so the file is not used after this returns.
Goldens load_goldens(const std::filesystem::path& path, FileAccess access = FileAccess::map);

} // namespace tpullm::frontend
