// lower-to-tpu's text options -> the typed quantization plan (conversion/quant_plan.hpp): the
// one place they are parsed and checked, named as whoever gave them spells them.
#include "tpullm/conversion/lower_to_tpu.hpp"

namespace tpullm::conversion {

namespace {

/// `text` (or `fallback` when empty) as a float dtype; anything else is refused as not one of
/// `choices`, naming option `key`.
ir::DType float_dtype(const std::string& text, const std::string& fallback, const char* key,
                      const char* choices, const QuantOptionSpelling& s) {
  const std::string t = text.empty() ? fallback : text;
  if (t == "f32")
    return ir::DType::f32;
  if (t == "bf16")
    return ir::DType::bf16;
  if (t == "f16")
    return ir::DType::f16;
  throw_error(ErrorKind::invalid_input, s.subject(key), "'", t, "' is not ", choices);
}

/// The `mode` option: f32 / bf16 / f16, or w8a16 / w4a16 / int8 (bf16 for what stays float).
WeightFormat mode_format(const std::string& mode, const QuantOptionSpelling& s) {
  if (mode == "w8a16")
    return {ir::DType::bf16, 8};
  if (mode == "w4a16")
    return {ir::DType::bf16, 4};
  if (mode == "int8")
    return {ir::DType::bf16, 8, true};
  return {float_dtype(mode, "", "mode", "f32, bf16, f16, w8a16, w4a16 or int8", s), 0};
}

/// The `lm-head` / `embedding` option: a float dtype or w8 / w4 (empty: the mode's float dtype).
WeightFormat table_format(const std::string& text, const WeightFormat& mode, const char* key,
                          const QuantOptionSpelling& s) {
  if (text == "w8" || text == "w4")
    return {mode.dtype, text == "w8" ? 8 : 4};
  return {float_dtype(text, std::string(ir::name(mode.dtype)), key, "f32, bf16, f16, w8 or w4", s),
          0};
}

/// The int8 options, checked together: outside mode int8 none may be given (act-quant: none or
/// dynamic only); inside, static scales and smoothing need a calibration table, asymmetry needs
/// static scales.
void check_int8_options(const LowerOptions& o, bool int8, const QuantOptionSpelling& s) {
  const bool stat = o.act_quant == "static";
  const double alpha = o.smooth_alpha;
  if (!int8) {
    check(o.act_quant.empty() || o.act_quant == "none" || o.act_quant == "dynamic" || stat,
          ErrorKind::invalid_input, s.subject("act-quant"), "must be none or dynamic (or, with ",
          s.setting("mode", "int8"), ", static), got '", o.act_quant, "'");
    for (const auto& [given, key] : {std::pair{stat, "act-quant"},
                                     {o.act_asymmetric, "act-asymmetric"},
                                     {!o.calib.empty(), "calib"},
                                     {alpha != 0, "smooth-alpha"}})
      check(!given, ErrorKind::invalid_input, s.subject(key), "applies only to ",
            s.setting("mode", "int8"), ", not '", o.mode, "'");
    return;
  }
  check(o.act_quant.empty() || o.act_quant == "dynamic" || stat, ErrorKind::invalid_input,
        s.subject("act-quant"), "must be dynamic or static, got '", o.act_quant, "'");
  check(!o.act_asymmetric || stat, ErrorKind::invalid_input, s.subject("act-asymmetric"),
        "applies only to ", s.setting("act-quant", "static"),
        " (dynamic scales are symmetric per row)");
  check(alpha == 0 || (alpha > 0 && alpha < 1), ErrorKind::invalid_input, s.subject("smooth-alpha"),
        "must be in (0, 1) (typical 0.5), got ", alpha);
  const std::string table = str_cat("a calibration table: ", s.setting("calib", "FILE"),
                                    " (written by tpullm calibrate)");
  check(!stat || !o.calib.empty(), ErrorKind::invalid_input, s.subject("act-quant"),
        "static needs ", table);
  check(alpha == 0 || !o.calib.empty(), ErrorKind::invalid_input, s.subject("smooth-alpha"),
        "needs ", table);
}

} // namespace

std::string QuantPlan::moe_refusal() const {
  if (!linear.w8a8 || !act.static_tensor)
    return {};
  return str_cat(spelling.setting("act-quant", "static"),
                 " does not cover mixture-of-experts layers (an expert sees only the tokens "
                 "routed to it: no per-tensor scale is calibrated for it); use ",
                 spelling.setting("act-quant", "dynamic"));
}

std::string QuantPlan::quantized_weight_refusal(const std::string& name) const {
  if (!linear.w8a8)
    return {};
  return str_cat(spelling.setting("mode", "int8"), " quantizes float weights; '", name,
                 "' is already quantized (a GPTQ / AWQ checkpoint: every other mode takes its "
                 "integer weights as they are)");
}

ir::DType kv_cache_dtype(const LowerOptions& o, const QuantOptionSpelling& s) {
  if (o.kv_dtype.empty())
    return o.mode.empty() || o.mode == "f32" ? ir::DType::f32 : ir::DType::f16;
  if (o.kv_dtype == "int8")
    return ir::DType::i8; // codes and a scale per position and head (kernels/kv8.hpp)
  return float_dtype(o.kv_dtype, "f32", "kv-dtype", "f32, f16, bf16 or int8", s);
}

QuantPlan plan_quant_options(const LowerOptions& o, const QuantOptionSpelling& s) {
  QuantPlan p;
  p.spelling = s;
  p.linear = mode_format(o.mode, s);
  p.embedding = table_format(o.embedding, p.linear, "embedding", s);
  p.lm_head = table_format(o.lm_head, p.linear, "lm-head", s);
  p.kv_dtype = kv_cache_dtype(o, s);
  check(o.group_size >= 0, ErrorKind::invalid_input, s.subject("group-size"),
        "must be >= 0 (0: per output channel), got ", o.group_size);
  p.rtn.group_size = o.group_size;
  p.rtn.symmetric = o.symmetric;
  check(p.linear.bits > 0 || o.keep_float.empty(), ErrorKind::invalid_input,
        s.subject("keep-float"), "applies only to ", s.setting("mode", "w8a16"),
        " / w4a16 / int8, not '", o.mode, "'");
  check_int8_options(o, p.linear.w8a8, s);
  p.act.static_tensor = o.act_quant == "static";
  p.act.int8_weight_only = !p.linear.w8a8 && o.act_quant == "dynamic";
  p.act.asymmetric = o.act_asymmetric;
  p.act.smooth_alpha = o.smooth_alpha;
  return p;
}

QuantPlan make_quant_plan(const LowerOptions& o, std::shared_ptr<const CalibTable> calib,
                          const QuantOptionSpelling& s) {
  QuantPlan p = plan_quant_options(o, s);
  if (!o.calib.empty())
    p.calib =
        calib ? std::move(calib) : std::make_shared<const CalibTable>(load_calib_table(o.calib));
  if (o.keep_float.empty())
    return p;
  if (auto names = literal_alternation(o.keep_float)) {
    p.keep_float_names.insert(names->begin(), names->end());
  } else {
    RegexLimits limits;
    limits.max_length = 64 * 1024;
    p.keep_float.emplace(o.keep_float, s.subject("keep-float"), limits);
  }
  return p;
}

} // namespace tpullm::conversion
