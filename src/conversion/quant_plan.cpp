// lower-to-tpu's text options -> the typed quantization plan (conversion/quant_plan.hpp): the
// one place they are parsed and checked.
#include "tpullm/conversion/lower_to_tpu.hpp"

namespace tpullm::conversion {

namespace {

constexpr const char* kOption = "lower-to-tpu option";

/// `text` (or `fallback` when empty) as a float dtype; anything else names `option`.
ir::DType float_dtype(const std::string& text, const std::string& fallback, const char* option) {
  const std::string t = text.empty() ? fallback : text;
  if (t == "f32")
    return ir::DType::f32;
  if (t == "bf16")
    return ir::DType::bf16;
  if (t == "f16")
    return ir::DType::f16;
  throw_error(ErrorKind::invalid_input, std::string(kOption) + " '" + option + "'",
              "must be f32, bf16 or f16, got '", t, "'");
}

/// The `mode` option: f32 / bf16 / f16, or w8a16 / w4a16 / int8 (bf16 for what stays float).
WeightFormat mode_format(const std::string& mode) {
  if (mode == "w8a16")
    return {ir::DType::bf16, 8};
  if (mode == "w4a16")
    return {ir::DType::bf16, 4};
  if (mode == "int8")
    return {ir::DType::bf16, 8, true};
  check(mode.empty() || mode == "f32" || mode == "bf16" || mode == "f16", ErrorKind::invalid_input,
        std::string(kOption) + " 'mode'", "must be f32, bf16, f16, w8a16, w4a16 or int8, got '",
        mode, "'");
  return {float_dtype(mode, "f32", "mode"), 0};
}

/// The `lm-head` / `embedding` option: a float dtype or w8 / w4 (empty: the mode's float dtype).
WeightFormat table_format(const std::string& text, const WeightFormat& mode, const char* option) {
  if (text == "w8" || text == "w4")
    return {mode.dtype, text == "w8" ? 8 : 4};
  return {float_dtype(text, std::string(ir::name(mode.dtype)), option), 0};
}

/// The int8 options: checked together; the table taken (or loaded) when static or smoothing.
void plan_int8(QuantPlan& p, const LowerOptions& o, std::shared_ptr<const CalibTable> calib) {
  const std::string opt = kOption;
  check(o.act_quant == "dynamic" || o.act_quant == "static", ErrorKind::invalid_input,
        opt + " 'act-quant'", "must be dynamic or static, got '", o.act_quant, "'");
  p.act.static_tensor = o.act_quant == "static";
  p.act.asymmetric = o.act_asymmetric;
  p.act.smooth_alpha = o.smooth_alpha;
  const double alpha = o.smooth_alpha;
  if (!p.linear.w8a8) {
    check(!p.act.static_tensor && !p.act.asymmetric && o.calib.empty() && alpha == 0,
          ErrorKind::invalid_input,
          opt + "s 'act-quant' / 'act-asymmetric' / 'calib' / 'smooth-alpha'",
          "apply only to mode int8, not '", o.mode, "'");
    return;
  }
  check(!p.act.asymmetric || p.act.static_tensor, ErrorKind::invalid_input,
        opt + " 'act-asymmetric'",
        "applies only to act-quant=static (dynamic scales are symmetric per row)");
  check(alpha == 0 || (alpha > 0 && alpha < 1), ErrorKind::invalid_input, opt + " 'smooth-alpha'",
        "must be in (0, 1) (0: no smoothing), got ", alpha);
  check(!p.act.static_tensor || !o.calib.empty(), ErrorKind::invalid_input, opt + " 'act-quant'",
        "static needs a calibration table (calib=FILE)");
  check(alpha == 0 || !o.calib.empty(), ErrorKind::invalid_input, opt + " 'smooth-alpha'",
        "needs a calibration table (calib=FILE)");
  if (!o.calib.empty())
    p.calib =
        calib ? std::move(calib) : std::make_shared<const CalibTable>(load_calib_table(o.calib));
}

} // namespace

ir::DType kv_cache_dtype(const LowerOptions& o) {
  if (o.kv_dtype.empty())
    return o.mode.empty() || o.mode == "f32" ? ir::DType::f32 : ir::DType::f16;
  return float_dtype(o.kv_dtype, "f32", "kv-dtype");
}

QuantPlan make_quant_plan(const LowerOptions& o, std::shared_ptr<const CalibTable> calib) {
  QuantPlan p;
  p.linear = mode_format(o.mode);
  p.embedding = table_format(o.embedding, p.linear, "embedding");
  p.lm_head = table_format(o.lm_head, p.linear, "lm-head");
  p.kv_dtype = kv_cache_dtype(o);
  p.rtn.group_size = o.group_size;
  p.rtn.symmetric = o.symmetric;
  plan_int8(p, o, std::move(calib));
  check(o.group_size >= 0, ErrorKind::invalid_input, std::string(kOption) + " 'group-size'",
        "must be >= 0 (0: per output channel), got ", o.group_size);
  if (!o.keep_float.empty()) {
    check(p.linear.bits > 0, ErrorKind::invalid_input, std::string(kOption) + " 'keep-float'",
          "applies only to the quantizing modes w8a16 / w4a16 / int8, not '", o.mode, "'");
    if (auto names = literal_alternation(o.keep_float)) {
      p.keep_float_names.insert(names->begin(), names->end());
    } else {
      RegexLimits limits;
      limits.max_length = 64 * 1024;
      p.keep_float.emplace(o.keep_float, std::string(kOption) + " 'keep-float'", limits);
    }
  }
  return p;
}

} // namespace tpullm::conversion
