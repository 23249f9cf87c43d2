// The weight-quantization options of compile and verify (quant_options.hpp).
#include "quant_options.hpp"

#include <memory>
#include <utility>
#include <vector>

#include "tpullm/frontend/hf_config.hpp"
#include "tpullm/support/regex.hpp"

namespace tpullm::cli {

po::options_description quantization_options(conversion::LowerOptions& l, std::string& keep_float) {
  po::options_description o(
      "weight quantization (--mode w8a16 / w4a16 / int8, --lm-head-dtype w8 / w4, --draft-mode "
      "w8a16 / w4a16)");
  o.add_options()("group-size", po::value(&l.group_size)->default_value(64),
                  "rows of K sharing one scale (and zero point): 32, 64, 128, or 0 for one per "
                  "output channel")("symmetric", po::bool_switch(&l.symmetric),
                                    "symmetric codes, no zero points (default: asymmetric)")(
      "keep-float", po::value(&keep_float),
      "regex of checkpoint tensor names (e.g. 'model\\.layers\\.0\\..*') whose linear weights "
      "stay in bf16");
  o.add_options()("act-quant", po::value(&l.act_quant),
                  "activation quantization. --mode int8: dynamic (a scale per token row, "
                  "computed at run time; the default) or static (one calibrated scale per tensor; "
                  "needs --calib). Every other mode: none (f32 activations, exact) or dynamic "
                  "(where the weights are integer, x is rounded to int8 with a scale per weight "
                  "group, as llama.cpp does: faster, lossy, bounds in docs/kernels.md); default "
                  "none, but dynamic for a GGUF file in compile, run, chat, serve and bench "
                  "(verify stays exact unless given)")(
      "act-asymmetric", po::bool_switch(&l.act_asymmetric),
      "--mode int8 --act-quant static: a zero point from the calibrated min / max (default: "
      "symmetric)")("calib", po::value(&l.calib),
                    "--mode int8: calibration table written by `tpullm calibrate` for this model")(
      "smooth-alpha", po::value(&l.smooth_alpha)->default_value(0.0, "0"),
      "--mode int8: SmoothQuant migration strength in (0, 1), typical 0.5 (needs --calib; 0: no "
      "smoothing)");
  return o;
}

namespace {
/// `s` with the regex metacharacters escaped.
std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos)
      out += '\\';
    out += c;
  }
  return out;
}
} // namespace

std::string resolve_keep_float(const frontend::ModelDesc& d, const std::string& hf) {
  if (hf.empty())
    return {};
  const UserRegex re(hf, "--keep-float");
  // (Top name, slot) of every linear weight the quantizing modes quantize.
  std::vector<std::pair<std::string, const frontend::WeightRef*>> slots;
  for (std::size_t i = 0; i < d.layers.size(); ++i) {
    const auto& w = d.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    for (const auto& [n, r] : {std::pair{"q", &w.q},
                               {"k", &w.k},
                               {"v", &w.v},
                               {"o", &w.o},
                               {"gate", &w.gate},
                               {"up", &w.up},
                               {"down", &w.down}})
      slots.emplace_back(p + n, r);
    for (std::size_t e = 0; e < w.moe.experts.size(); ++e) {
      const auto& x = w.moe.experts[e];
      const std::string ep = p + "expert." + std::to_string(e) + ".";
      for (const auto& [n, r] : {std::pair{"gate", &x.gate}, {"up", &x.up}, {"down", &x.down}})
        slots.emplace_back(ep + n, r);
    }
  }
  std::string alt;
  for (const auto& [top, ref] : slots)
    if (ref->present() && re.full_match(ref->name()))
      alt += (alt.empty() ? "" : "|") + regex_escape(top);
  check(!alt.empty(), ErrorKind::invalid_input, "--keep-float", "'", hf,
        "' matches no linear weight's tensor name (e.g. ",
        d.layers.empty() ? "" : d.layers[0].q.name(), ")");
  return "^(?:" + alt + ")$";
}

conversion::CalibModel calib_model(const frontend::ModelDesc& d) {
  return {std::string(frontend::family_name(d.family)), d.dims.layers, d.dims.hidden,
          d.dims.intermediate, d.dims.vocab};
}

void plan_quantization(const frontend::ModelDesc& d, conversion::LowerOptions& lo,
                       const std::string& keep_float) {
  lo.keep_float = resolve_keep_float(d, keep_float);
  std::shared_ptr<const conversion::CalibTable> table;
  if (!lo.calib.empty()) {
    table = std::make_shared<const conversion::CalibTable>(conversion::load_calib_table(lo.calib));
    conversion::check_calib_model(*table, calib_model(d), lo.calib);
  }
  lo.plan = std::make_shared<const conversion::QuantPlan>(
      conversion::make_quant_plan(lo, table, {.flags = true}));
}

} // namespace tpullm::cli
