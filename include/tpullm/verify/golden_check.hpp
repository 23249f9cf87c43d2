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
struct Bounds {
  float rel_tol = 1e-4f; ///< |ours - golden| <= rel_tol * max|golden| per logits tensor
  float min_argmax = 0;  ///< fraction of rows whose argmax must agree, per scenario
};
inline Bounds bounds_for_mode(const std::string& mode) {
  if (mode == "bf16")
    return {5e-2f, 0.85f};
  if (mode == "f16")
    return {1e-2f, 0.90f};
  return {1e-4f, 0.0f};
}

/// Runs scenarios a, b (continuing a's cache) and c (fresh) on `session`; a scenario is ok
/// when its error is within `rel_tol` and at least `min_argmax` of its rows agree on argmax.
/// Throws Error(invalid_input) naming "--rel-tol" unless rel_tol is finite and > 0.
inline std::vector<ScenarioReport> check_goldens(runtime::Session& session,
                                                 const frontend::Goldens& g, float rel_tol = 1e-4f,
                                                 float min_argmax = 0) {
  frontend::check_rel_tol(rel_tol);
  std::vector<ScenarioReport> out;
  session.reset();
  out.push_back(detail::run_scenario(session, "a", g.a, rel_tol));
  out.push_back(detail::run_scenario(session, "b", g.b, rel_tol));
  session.reset();
  out.push_back(detail::run_scenario(session, "c", g.c, rel_tol));
  for (auto& r : out)
    r.ok = r.ok && static_cast<double>(r.argmax_agree) >=
                       static_cast<double>(min_argmax) * static_cast<double>(r.rows) - 1e-9;
  return out;
}

} // namespace tpullm::verify
