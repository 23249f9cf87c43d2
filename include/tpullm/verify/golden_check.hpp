#pragma once
/// Runs the three golden scenarios of a test checkpoint through a Session exactly as
/// generation does, and measures the logits against transformers' goldens:
///   a: fresh prompt (prefill) + teacher-forced decode,
///   b: second turn on a's KV cache (prefill_kv) + decode,
///   c: a long prompt segmented into 1 prefill + N prefill_kv, + decode.
/// The bound is |ours - golden| <= rel_tol * max|golden| per logits tensor.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tpullm/frontend/goldens.hpp"
#include "tpullm/runtime/session.hpp"

namespace tpullm::verify {

/// Figures of one scenario.
struct ScenarioReport {
  std::string name;              ///< "a", "b" or "c"
  float max_abs_err = 0;         ///< max |ours - golden| over every compared logit
  float max_rel_err = 0;         ///< max over tensors of max|err| / max|golden of that tensor|
  std::int64_t rows = 0;         ///< logits rows compared
  std::int64_t argmax_agree = 0; ///< rows whose argmax equals the golden argmax
  double sum_kl = 0;             ///< sum over rows of KL(softmax(golden) || softmax(ours)), nats
  bool ok = false;               ///< max_rel_err <= the bound
  /// Mean KL divergence per row of our distribution from the golden one (nats).
  double mean_kl() const { return rows > 0 ? sum_kl / static_cast<double>(rows) : 0.0; }
};

namespace detail {
inline std::int64_t argmax(std::span<const float> row) {
  return std::max_element(row.begin(), row.end()) - row.begin();
}

/// KL(softmax(p) || softmax(q)) in nats, computed in double from the logits (max-shifted).
double kl_divergence(std::span<const float> p, std::span<const float> q);

/// Adds the comparison of `ours` ([rows, V]) against `golden` to `r`.
void accumulate(ScenarioReport& r, const std::vector<float>& ours,
                const frontend::GoldenLogits& golden, float rel_tol);

/// Prefill (optionally all rows) then teacher-forced decode of one scenario.
ScenarioReport run_scenario(runtime::Session& s, const std::string& name,
                            const frontend::GoldenScenario& g, float rel_tol);
} // namespace detail

/// The documented bounds of a weight mode (docs/backend.md "Accuracy"): f32 is held to
/// 1e-4 x max|golden|; bf16 and f16 weights round every linear weight (8 and 11 significant
/// bits), so they are held to 5e-2 and 1e-2 x max|golden| and to argmax agreement on at least
/// 85% and 90% of the rows of every scenario (near-ties of the random test models may flip).
/// The lossy modes also bound the mean KL divergence per scenario: w8a16 (round-to-nearest
/// int8 weights, any group size, with or without zero points) 0.3 x max|golden|, argmax >= 75%,
/// mean KL <= 0.01 nats; w4a16 (int4) 1.5, >= 5%, <= 1.2 nats (the shared random checkpoints
/// reach 0.24 / 83% / 4.8e-3 and 1.0 / 11% / 0.83 at worst). int8 (W8A8) is keyed by its
/// activation scheme: "int8" (dynamic), "int8-static", "int8-static-asym", "int8-static-smooth".
/// "act-int8" is what act-quant dynamic adds outside mode int8 (x rounded to int8 per weight
/// group over integer weights): 4e-2 and <= 3e-4 nats, the loosest of llama.cpp's own figures on
/// the shared GGUF goldens (3.9e-2 / 2.8e-4), and argmax >= 75% per scenario (llama.cpp reaches
/// 80/87 over all three; scenario c has 9 rows, so two near-tie flips there are 78%).
struct Bounds {
  float rel_tol = 1e-4f;  ///< |ours - golden| <= rel_tol * max|golden| per logits tensor
  float min_argmax = 0;   ///< fraction of rows whose argmax must agree, per scenario
  double max_mean_kl = 0; ///< mean KL(golden || ours) per row, nats, per scenario (0: none)
};
Bounds bounds_for_mode(const std::string& mode);
/// The bounds a KV cache in `kv_dtype` adds to f32 weights (docs/guarantees.md "KV cache
/// dtype"): f16 5e-3 x max|golden| with argmax agreement on >= 90% of the rows, bf16 5e-2 with
/// >= 85% (the shared checkpoints reach 3.2e-3 / 97% and 1.7e-2 / 89% on f32 weights), int8
/// 8e-2 with >= 85% and a mean KL <= 4e-3 (reached: 5.3e-2 / 89% / 1.8e-3); f32 (or empty) adds
/// nothing.
Bounds bounds_for_kv_dtype(const std::string& kv_dtype);
/// The bounds of a compile's weight options: the mode's, loosened to w8a16's / w4a16's when the
/// lm_head or the embedding table is quantized to w8 / w4 (a float mode with a quantized table
/// is held to the quantized mode's bounds), and to the KV cache dtype's (bounds_for_kv_dtype)
/// when `kv_dtype` is given and looser than the mode's (an f32 compile with --kv-dtype f16), and
/// to "act-int8"'s when `act_int8` (act-quant dynamic outside mode int8).
Bounds bounds_for_options(const std::string& mode, const std::string& lm_head,
                          const std::string& embedding = {}, const std::string& kv_dtype = {},
                          bool act_int8 = false);

/// The rows of every report as one ("all"): the largest errors, the summed rows, argmax
/// agreements and KL; ok when every report's error bound held, at least `min_argmax` of all
/// rows agree on argmax and (when `max_mean_kl` > 0) their mean KL is at most `max_mean_kl`.
ScenarioReport pooled_report(const std::vector<ScenarioReport>& reports, float min_argmax,
                             double max_mean_kl);

/// Runs scenarios a, b (continuing a's cache) and c (fresh) on `session`; a scenario is ok
/// when its error is within `rel_tol`, at least `min_argmax` of its rows agree on argmax and
/// (when `max_mean_kl` > 0) its mean KL divergence is at most `max_mean_kl`.
/// Throws Error(invalid_input) naming "--rel-tol" unless rel_tol is finite and > 0.
std::vector<ScenarioReport> check_goldens(runtime::Session& session, const frontend::Goldens& g,
                                          float rel_tol = 1e-4f, float min_argmax = 0,
                                          double max_mean_kl = 0);

} // namespace tpullm::verify
