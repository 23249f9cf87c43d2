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
inline double kl_divergence(std::span<const float> p, std::span<const float> q) {
  const double pm = *std::max_element(p.begin(), p.end());
  const double qm = *std::max_element(q.begin(), q.end());
  double zp = 0, zq = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    zp += std::exp(double(p[i]) - pm);
    zq += std::exp(double(q[i]) - qm);
  }
  const double lzp = std::log(zp) + pm, lzq = std::log(zq) + qm;
  double kl = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double lp = double(p[i]) - lzp, lq = double(q[i]) - lzq;
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(0.0, kl);
}

/// Adds the comparison of `ours` ([rows, V]) against `golden` to `r`.
inline void accumulate(ScenarioReport& r, const std::vector<float>& ours,
                       const frontend::GoldenLogits& golden, float rel_tol) {
  auto m = frontend::compare_logits(ours, golden, rel_tol);
  const float scale = golden.max_abs();
  r.max_abs_err = std::max(r.max_abs_err, m.max_abs_err);
  r.max_rel_err = std::max(r.max_rel_err, scale > 0 ? m.max_abs_err / scale : m.max_abs_err);
  for (std::int64_t row = 0; row < golden.rows; ++row) {
    std::span<const float> o(ours.data() + row * golden.vocab,
                             static_cast<std::size_t>(golden.vocab));
    r.argmax_agree += argmax(o) == argmax(golden.row(row)) ? 1 : 0;
    r.sum_kl += kl_divergence(golden.row(row), o);
  }
  r.rows += golden.rows;
}

/// Prefill (optionally all rows) then teacher-forced decode of one scenario.
inline ScenarioReport run_scenario(runtime::Session& s, const std::string& name,
                                   const frontend::GoldenScenario& g, float rel_tol) {
  ScenarioReport r;
  r.name = name;
  check(s.length() == g.start_position, ErrorKind::internal, "scenario " + name, "starts at ",
        g.start_position, " but the session holds ", s.length(), " tokens");
  accumulate(r, s.prefill(g.prompt, !g.last_only), g.prefill_logits, rel_tol);
  std::vector<float> decoded;
  for (auto tok : g.decode_tokens) {
    auto l = s.decode(tok);
    decoded.insert(decoded.end(), l.begin(), l.end());
  }
  accumulate(r, decoded, g.decode_logits, rel_tol);
  r.ok = r.max_rel_err <= rel_tol;
  return r;
}
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
struct Bounds {
  float rel_tol = 1e-4f;  ///< |ours - golden| <= rel_tol * max|golden| per logits tensor
  float min_argmax = 0;   ///< fraction of rows whose argmax must agree, per scenario
  double max_mean_kl = 0; ///< mean KL(golden || ours) per row, nats, per scenario (0: none)
};
inline Bounds bounds_for_mode(const std::string& mode) {
  if (mode == "bf16")
    return {5e-2f, 0.85f};
  if (mode == "f16")
    return {1e-2f, 0.90f};
  if (mode == "w8a16")
    return {0.3f, 0.75f, 0.01};
  if (mode == "w4a16")
    return {1.5f, 0.05f, 1.2};
  // int8 (W8A8, docs/guarantees.md "Lossy modes"): dynamic per-row activation scales;
  // static per-tensor ones (symmetric or asymmetric, any calibration method); static after
  // SmoothQuant. The shared random checkpoints reach at worst 0.14 / 78% / 0.012, 0.40 / 66% /
  // 0.057 and 0.45 / 44% / 0.051.
  if (mode == "int8")
    return {0.3f, 0.6f, 0.03};
  if (mode == "int8-static" || mode == "int8-static-asym")
    return {0.8f, 0.4f, 0.15};
  if (mode == "int8-static-smooth")
    return {0.9f, 0.25f, 0.15};
  return {1e-4f, 0.0f};
}
/// The bounds of a compile's weight options: the mode's, loosened to w8a16's / w4a16's when the
/// lm_head or the embedding table is quantized to w8 / w4 (a float mode with a quantized table
/// is held to the quantized mode's bounds).
inline Bounds bounds_for_options(const std::string& mode, const std::string& lm_head,
                                 const std::string& embedding = {}) {
  Bounds b = bounds_for_mode(mode);
  for (const std::string* table : {&lm_head, &embedding}) {
    const char* q = *table == "w8" ? "w8a16" : *table == "w4" ? "w4a16" : nullptr;
    if (!q)
      continue;
    const Bounds o = bounds_for_mode(q);
    b.rel_tol = std::max(b.rel_tol, o.rel_tol);
    b.min_argmax = std::min(b.min_argmax, o.min_argmax);
    b.max_mean_kl = std::max(b.max_mean_kl, o.max_mean_kl);
  }
  return b;
}

/// Runs scenarios a, b (continuing a's cache) and c (fresh) on `session`; a scenario is ok
/// when its error is within `rel_tol`, at least `min_argmax` of its rows agree on argmax and
/// (when `max_mean_kl` > 0) its mean KL divergence is at most `max_mean_kl`.
/// Throws Error(invalid_input) naming "--rel-tol" unless rel_tol is finite and > 0.
inline std::vector<ScenarioReport> check_goldens(runtime::Session& session,
                                                 const frontend::Goldens& g, float rel_tol = 1e-4f,
                                                 float min_argmax = 0, double max_mean_kl = 0) {
  frontend::check_rel_tol(rel_tol);
  std::vector<ScenarioReport> out;
  session.reset();
  out.push_back(detail::run_scenario(session, "a", g.a, rel_tol));
  out.push_back(detail::run_scenario(session, "b", g.b, rel_tol));
  session.reset();
  out.push_back(detail::run_scenario(session, "c", g.c, rel_tol));
  for (auto& r : out)
    r.ok = r.ok &&
           static_cast<double>(r.argmax_agree) >=
               static_cast<double>(min_argmax) * static_cast<double>(r.rows) - 1e-9 &&
           (max_mean_kl <= 0 || r.mean_kl() <= max_mean_kl);
  return out;
}

} // namespace tpullm::verify
