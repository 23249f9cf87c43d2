// Out-of-line definitions of tpullm/frontend/quant_config.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/quant_config.hpp"

namespace tpullm::frontend {

std::optional<LinearQuant> linear_quant(const QuantConfig& qc, std::string_view module) {
  if (qc.method == QuantMethod::none)
    return std::nullopt;
  const bool is_head = module == "lm_head";
  const QuantRule* hit = nullptr;
  for (const QuantRule& r : qc.rules) {
    bool m = false;
    switch (r.match) {
    case QuantRule::Match::exact:
      m = r.pattern == module;
      break;
    case QuantRule::Match::full:
      m = r.re->full_match(module);
      break;
    case QuantRule::Match::prefix:
      m = r.re->prefix_match(module);
      break;
    case QuantRule::Match::any:
      m = !is_head; // "Linear" targets: the lm_head only when named
      break;
    }
    if (m) {
      hit = &r;
      break;
    }
  }
  if (hit && hit->skip)
    return std::nullopt;
  if (!hit) {
    if (is_head ? !qc.lm_head : !qc.default_quantized)
      return std::nullopt;
    for (const std::string& s : qc.not_convert)
      if (module.find(s) != std::string_view::npos)
        return std::nullopt;
    if (!qc.blocks.empty() && !is_head) {
      bool under = false;
      for (const std::string& b : qc.blocks)
        under = under || module.substr(0, b.size()) == b;
      if (!under)
        return std::nullopt;
    }
  }
  LinearQuant q;
  q.layout = qc.layout;
  q.bits = hit && hit->bits ? *hit->bits : qc.bits;
  q.group_size = hit && hit->group_size ? *hit->group_size : qc.group_size;
  q.sym = hit && hit->sym ? *hit->sym : qc.sym;
  q.desc_act = hit && hit->desc_act ? *hit->desc_act : qc.desc_act;
  q.zero_point =
      qc.layout == QuantLayout::awq ? (hit && hit->sym ? !*hit->sym : qc.zero_point) : !q.sym;
  q.zero_offset = qc.zero_offset;
  return q;
}

} // namespace tpullm::frontend

namespace tpullm::frontend::detail {

auto QuantReader::get(const nlohmann::json& o, std::string_view key) -> const nlohmann::json* {
  if (!o.is_object())
    return nullptr;
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

auto QuantReader::integer(const nlohmann::json& v, std::string_view key) const -> std::int64_t {
  check(v.is_number_integer() || v.is_number_unsigned(), ErrorKind::invalid_input, where,
        "quantization_config \"", key, "\" must be an integer, got ", v.dump());
  check(!v.is_number_unsigned() || v.get<std::uint64_t>() <= (1ull << 62), ErrorKind::invalid_input,
        where, "quantization_config \"", key, "\" = ", v.dump(), " is too large");
  return v.get<std::int64_t>();
}

auto QuantReader::bits(const nlohmann::json& v, std::string_view key, std::string_view who,
                       bool float_ok) const -> int {
  const std::int64_t b = integer(v, key);
  if (float_ok && b >= 16 && b <= 32)
    return static_cast<int>(b);
  check(b == 4 || b == 8, ErrorKind::unsupported, where, who, " bits=", b,
        " is not supported (supported: 4, 8)");
  return static_cast<int>(b);
}

auto QuantReader::group(const nlohmann::json& v, std::string_view key) const -> std::int64_t {
  const std::int64_t g = integer(v, key);
  check(g == -1 || (g > 0 && g <= (1 << 24)), ErrorKind::invalid_input, where, "group_size ", g,
        " is invalid (positive, or -1 for one group)");
  return g;
}

auto QuantReader::regex(const std::string& pattern, std::string_view key) const
    -> std::shared_ptr<const UserRegex> {
  check(pattern.size() <= 256, ErrorKind::invalid_input, where, "quantization_config \"", key,
        "\" pattern of ", pattern.size(), " characters is too long (at most 256)");
  RegexLimits limits;
  limits.max_length = 256;
  return std::make_shared<const UserRegex>(
      pattern, str_cat(where, ": quantization_config \"", key, "\""), limits);
}

std::string lower_ascii(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::vector<std::string> string_list(const QuantReader& r, const nlohmann::json& v,
                                     std::string_view key, bool split_commas) {
  std::vector<std::string> out;
  if (v.is_string() && split_commas) {
    const std::string s = v.get<std::string>();
    std::size_t a = 0;
    while (a <= s.size()) {
      const std::size_t b = std::min(s.find(',', a), s.size());
      if (b > a)
        out.push_back(s.substr(a, b - a));
      a = b + 1;
    }
    return out;
  }
  check(v.is_array(), ErrorKind::invalid_input, r.where, "quantization_config \"", key,
        "\" must be a list of strings, got ", v.dump());
  for (const auto& e : v)
    out.push_back(r.string(e, key));
  return out;
}

void parse_dynamic(const QuantReader& r, const nlohmann::json& d, QuantConfig& qc) {
  check(d.is_object(), ErrorKind::invalid_input, r.where,
        "quantization_config \"dynamic\" must be an object, got ", d.dump());
  for (const auto& [key, val] : d.items()) {
    QuantRule rule;
    rule.match = QuantRule::Match::prefix;
    rule.pattern = key;
    if (key.rfind("-:", 0) == 0) {
      rule.skip = true;
      rule.pattern = key.substr(2);
    } else if (key.rfind("+:", 0) == 0) {
      rule.pattern = key.substr(2);
    }
    rule.re = r.regex(rule.pattern, "dynamic");
    check(val.is_object(), ErrorKind::invalid_input, r.where, "quantization_config dynamic \"", key,
          "\" must map to an object, got ", val.dump());
    for (const auto& [k, v] : val.items()) {
      if (v.is_null())
        continue;
      if (k == "bits")
        rule.bits = r.bits(v, "bits", "dynamic \"" + key + "\"");
      else if (k == "group_size")
        rule.group_size = r.group(v, "group_size");
      else if (k == "sym")
        rule.sym = r.boolean(v, "sym");
      else if (k == "desc_act")
        rule.desc_act = r.boolean(v, "desc_act");
      else
        throw_error(ErrorKind::unsupported, r.where, "quantization_config dynamic \"", key,
                    "\" key \"", k, "\" is not supported (bits, group_size, sym, desc_act)");
    }
    qc.rules.push_back(std::move(rule));
  }
}

void parse_extra_config(const QuantReader& r, const nlohmann::json& e, QuantConfig& qc) {
  check(e.is_object(), ErrorKind::invalid_input, r.where,
        "quantization_config \"extra_config\" must be an object, got ", e.dump());
  std::vector<QuantRule> exact, regex;
  for (const auto& [key, val] : e.items()) {
    check(val.is_object(), ErrorKind::invalid_input, r.where, "quantization_config extra_config \"",
          key, "\" must map to an object, got ", val.dump());
    QuantRule rule;
    rule.pattern = key;
    const std::string who = "extra_config \"" + key + "\"";
    std::string data_type = "int";
    for (const auto& [k, v] : val.items()) {
      if (v.is_null())
        continue;
      if (k == "bits")
        rule.bits = r.bits(v, "bits", who, true);
      else if (k == "group_size")
        rule.group_size = r.group(v, "group_size");
      else if (k == "sym")
        rule.sym = r.boolean(v, "sym");
      else if (k == "data_type")
        data_type = lower_ascii(r.string(v, "data_type"));
      else if (k == "act_bits") {
        const std::int64_t ab = r.integer(v, "act_bits");
        check(ab >= 16, ErrorKind::unsupported, r.where, who, " act_bits=", ab,
              " is not supported (activation quantization)");
      }
      // other keys (act_* settings, super_* of 16-bit layers) carry nothing for weights
    }
    if (rule.bits && *rule.bits >= 16) {
      rule.skip = true;
    } else {
      check(data_type == "int", ErrorKind::unsupported, r.where, who, " data_type '", data_type,
            "' is not supported (only int)");
    }
    if (key.find_first_of("\\^$*+?()[]{}|") == std::string::npos) {
      rule.match = QuantRule::Match::exact;
      exact.push_back(std::move(rule));
    } else {
      rule.match = QuantRule::Match::full;
      rule.re = r.regex(key, "extra_config");
      regex.push_back(std::move(rule));
    }
  }
  for (auto* v : {&exact, &regex})
    for (auto& rule : *v)
      qc.rules.push_back(std::move(rule));
}

QuantRule ct_rule(const QuantReader& r, const std::string& t, std::string_view key) {
  QuantRule rule;
  if (t.rfind("re:", 0) == 0) {
    rule.match = QuantRule::Match::prefix;
    rule.pattern = t.substr(3);
    rule.re = r.regex(rule.pattern, key);
  } else if (t == "Linear") {
    rule.match = QuantRule::Match::any;
    rule.pattern = t;
  } else {
    rule.match = QuantRule::Match::exact;
    rule.pattern = t;
  }
  return rule;
}

void parse_compressed_tensors(const QuantReader& r, const nlohmann::json& q, QuantConfig& qc) {
  qc.layout = QuantLayout::ct_packed;
  qc.default_quantized = false;
  qc.zero_offset = 0;
  const auto* fmt = QuantReader::get(q, "format");
  check(fmt != nullptr, ErrorKind::invalid_input, r.where,
        "compressed-tensors quantization_config has no \"format\"");
  qc.format = r.string(*fmt, "format");
  check(qc.format == "pack-quantized" || qc.format == "mixed-precision", ErrorKind::unsupported,
        r.where, "compressed-tensors format '", qc.format,
        "' is not supported (supported: pack-quantized)");
  if (const auto* kv = QuantReader::get(q, "kv_cache_scheme"))
    throw_error(ErrorKind::unsupported, r.where,
                "compressed-tensors \"kv_cache_scheme\" = ", kv->dump(),
                " is not supported (KV cache quantization)");
  if (const auto* sp = QuantReader::get(q, "sparsity_config")) {
    const auto* sf = QuantReader::get(*sp, "format");
    check(!sf || (sf->is_string() && sf->get<std::string>() == "dense"), ErrorKind::unsupported,
          r.where, "compressed-tensors \"sparsity_config\" format ", sf ? sf->dump() : "",
          " is not supported (dense only)");
  }
  if (const auto* ig = QuantReader::get(q, "ignore"))
    for (const std::string& t : string_list(r, *ig, "ignore", false)) {
      QuantRule rule = ct_rule(r, t, "ignore");
      rule.skip = true;
      if (rule.match == QuantRule::Match::any)
        rule.match = QuantRule::Match::prefix, rule.re = r.regex(".*", "ignore");
      qc.rules.push_back(std::move(rule));
    }
  const auto* groups = QuantReader::get(q, "config_groups");
  check(groups != nullptr && groups->is_object() && !groups->empty(), ErrorKind::invalid_input,
        r.where, "compressed-tensors quantization_config needs a non-empty \"config_groups\"");
  bool first = true;
  // A module named by a target takes that group, else one whose regex matches, else the
  // "Linear" class target (compressed-tensors' order: name, regex, class).
  std::vector<QuantRule> by_name, by_regex, by_class;
  for (const auto& [name, g] : groups->items()) {
    const std::string who = "compressed-tensors config_groups \"" + name + "\"";
    check(g.is_object(), ErrorKind::invalid_input, r.where, who, " must be an object");
    if (const auto* gf = QuantReader::get(g, "format"))
      check(gf->is_string() && gf->get<std::string>() == "pack-quantized", ErrorKind::unsupported,
            r.where, who, " format ", gf->dump(), " is not supported (supported: pack-quantized)");
    for (const char* act : {"input_activations", "output_activations"})
      if (const auto* a = QuantReader::get(g, act))
        throw_error(ErrorKind::unsupported, r.where, who, " \"", act, "\" = ", a->dump(),
                    " is not supported (activation quantization; weight-only int only)");
    const auto* w = QuantReader::get(g, "weights");
    check(w != nullptr && w->is_object(), ErrorKind::invalid_input, r.where, who,
          " has no \"weights\" object");
    const auto* type = QuantReader::get(*w, "type");
    const std::string t = type ? lower_ascii(r.string(*type, "type")) : "int";
    check(t == "int", ErrorKind::unsupported, r.where, who, " weights type '", t,
          "' is not supported (int only; float/FP8 weights are refused)");
    const auto* nb = QuantReader::get(*w, "num_bits");
    check(nb != nullptr, ErrorKind::invalid_input, r.where, who, " weights have no \"num_bits\"");
    QuantRule rule;
    rule.bits = r.bits(*nb, "num_bits", who);
    rule.sym = r.bool_or(*w, "symmetric", true);
    check(!r.bool_or(*w, "dynamic", false), ErrorKind::unsupported, r.where, who,
          " dynamic weight quantization is not supported");
    const auto* st = QuantReader::get(*w, "strategy");
    const std::string strategy = st ? lower_ascii(r.string(*st, "strategy")) : "tensor";
    if (strategy == "group") {
      const auto* gs = QuantReader::get(*w, "group_size");
      check(gs != nullptr, ErrorKind::invalid_input, r.where, who,
            " strategy group needs \"group_size\"");
      rule.group_size = r.group(*gs, "group_size");
      check(*rule.group_size > 0, ErrorKind::invalid_input, r.where, who, " group_size ",
            *rule.group_size, " must be positive");
    } else if (strategy == "channel") {
      rule.group_size = -1;
    } else {
      throw_error(ErrorKind::unsupported, r.where, who, " strategy '", strategy,
                  "' is not supported (supported: group, channel)");
    }
    if (const auto* ao = QuantReader::get(*w, "actorder")) {
      const std::string a = ao->is_boolean() ? (ao->get<bool>() ? "group" : "none")
                                             : lower_ascii(r.string(*ao, "actorder"));
      check(a == "group" || a == "weight" || a == "none", ErrorKind::unsupported, r.where, who,
            " actorder '", a, "' is not supported (group, weight)");
      rule.desc_act = a == "group";
    }
    if (first) { // the config-wide values (for reports); each group carries its own
      qc.bits = *rule.bits;
      qc.group_size = *rule.group_size;
      qc.sym = *rule.sym;
      first = false;
    }
    const auto* targets = QuantReader::get(g, "targets");
    check(targets != nullptr, ErrorKind::invalid_input, r.where, who, " has no \"targets\"");
    for (const std::string& tg : string_list(r, *targets, "targets", false)) {
      QuantRule tr = ct_rule(r, tg, "targets");
      tr.bits = rule.bits;
      tr.group_size = rule.group_size;
      tr.sym = rule.sym;
      tr.desc_act = rule.desc_act;
      if (tr.match == QuantRule::Match::exact && tr.pattern == "lm_head")
        qc.lm_head = true;
      auto& bucket = tr.match == QuantRule::Match::exact    ? by_name
                     : tr.match == QuantRule::Match::prefix ? by_regex
                                                            : by_class;
      bucket.push_back(std::move(tr));
    }
  }
  for (auto* v : {&by_name, &by_regex, &by_class})
    for (auto& rule : *v)
      qc.rules.push_back(std::move(rule));
}

} // namespace tpullm::frontend::detail

namespace tpullm::frontend {

QuantConfig parse_quant_config(const nlohmann::json& q, const std::string& where) {
  const detail::QuantReader r{where};
  QuantConfig qc;
  check(q.is_object(), ErrorKind::invalid_input, where,
        "\"quantization_config\" must be an object");
  const auto* m = detail::QuantReader::get(q, "quant_method");
  check(m != nullptr, ErrorKind::invalid_input, where,
        "\"quantization_config\" has no \"quant_method\"");
  const std::string method = detail::lower_ascii(r.string(*m, "quant_method"));
  if (method == "gptq")
    qc.method = QuantMethod::gptq;
  else if (method == "awq")
    qc.method = QuantMethod::awq;
  else if (method == "auto-round" || method == "intel/auto-round" || method == "auto_round")
    qc.method = QuantMethod::auto_round;
  else if (method == "compressed-tensors")
    qc.method = QuantMethod::compressed_tensors;
  else
    throw_error(ErrorKind::unsupported, where, "quant_method '", method,
                "' is not supported (supported: gptq, awq, auto-round, compressed-tensors)");

  if (qc.method == QuantMethod::compressed_tensors) {
    detail::parse_compressed_tensors(r, q, qc);
    return qc;
  }

  const auto* bits = detail::QuantReader::get(q, "bits");
  check(bits != nullptr, ErrorKind::invalid_input, where,
        "\"quantization_config\" has no \"bits\"");
  qc.bits = r.bits(*bits, "bits", method);
  check(qc.method != QuantMethod::awq || qc.bits == 4, ErrorKind::unsupported, where,
        "awq bits=", qc.bits, " is not supported (AWQ GEMM packing is 4-bit only)");
  const auto* gs = detail::QuantReader::get(q, "group_size");
  check(gs != nullptr, ErrorKind::invalid_input, where,
        "\"quantization_config\" has no \"group_size\"");
  qc.group_size = r.group(*gs, "group_size");
  const auto refuse_nonempty = [&](std::string_view key, std::string_view why) {
    const auto* v = detail::QuantReader::get(q, key);
    check(!v || (v->is_array() && v->empty()) || (v->is_object() && v->empty()),
          ErrorKind::unsupported, where, "quantization_config \"", key, "\" = ", v ? v->dump() : "",
          " is not supported for ", method, " (", why, ")");
  };

  switch (qc.method) {
  case QuantMethod::gptq: {
    qc.desc_act = r.bool_or(q, "desc_act", false);
    qc.sym = r.bool_or(q, "sym", true);
    qc.format = "gptq";
    if (const auto* f = detail::QuantReader::get(q, "checkpoint_format"))
      qc.format = detail::lower_ascii(r.string(*f, "checkpoint_format"));
    if (qc.format == "gptq")
      qc.zero_offset = 1;
    else if (qc.format == "gptq_v2")
      qc.zero_offset = 0;
    else
      throw_error(ErrorKind::unsupported, where, "gptq checkpoint_format '", qc.format,
                  "' is not supported (supported: gptq, gptq_v2)");
    qc.lm_head = r.bool_or(q, "lm_head", false);
    if (const auto* d = detail::QuantReader::get(q, "dynamic"))
      detail::parse_dynamic(r, *d, qc);
    refuse_nonempty("modules_to_not_convert", "an AWQ key");
    break;
  }
  case QuantMethod::awq: {
    qc.layout = QuantLayout::awq;
    qc.zero_point = r.bool_or(q, "zero_point", true);
    qc.sym = !qc.zero_point;
    qc.format = "gemm";
    if (const auto* v = detail::QuantReader::get(q, "version"))
      qc.format = detail::lower_ascii(r.string(*v, "version"));
    check(qc.format == "gemm", ErrorKind::unsupported, where, "awq version '", qc.format,
          "' is not supported (supported: gemm)");
    qc.zero_offset = 0;
    if (const auto* n = detail::QuantReader::get(q, "modules_to_not_convert"))
      qc.not_convert = detail::string_list(r, *n, "modules_to_not_convert", false);
    refuse_nonempty("dynamic", "a GPTQModel key");
    break;
  }
  case QuantMethod::auto_round: {
    qc.sym = r.bool_or(q, "sym", true);
    if (const auto* dt = detail::QuantReader::get(q, "data_type")) {
      const std::string t = detail::lower_ascii(r.string(*dt, "data_type"));
      check(t == "int", ErrorKind::unsupported, where, "auto-round data_type '", t,
            "' is not supported (only int)");
    }
    if (const auto* ab = detail::QuantReader::get(q, "act_bits")) {
      const std::int64_t b = r.integer(*ab, "act_bits");
      check(b >= 16, ErrorKind::unsupported, where, "auto-round act_bits=", b,
            " is not supported (activation quantization)");
    }
    qc.format = "auto_round:auto_gptq";
    if (const auto* f = detail::QuantReader::get(q, "packing_format"))
      qc.format = detail::lower_ascii(r.string(*f, "packing_format"));
    if (qc.format == "auto_round:auto_gptq" || qc.format == "auto_gptq") {
      qc.layout = QuantLayout::gptq;
      qc.zero_offset = 1;
    } else if (qc.format == "auto_round" || qc.format == "auto_round:gptqmodel") {
      qc.layout = QuantLayout::gptq;
      qc.zero_offset = 0;
    } else if (qc.format == "auto_round:auto_awq") {
      qc.layout = QuantLayout::awq;
      qc.zero_offset = 0;
      qc.zero_point = !qc.sym;
      check(qc.bits == 4, ErrorKind::unsupported, where, "auto-round bits=", qc.bits,
            " with packing_format auto_round:auto_awq is not supported (AWQ GEMM is 4-bit)");
    } else {
      throw_error(ErrorKind::unsupported, where, "auto-round packing_format '", qc.format,
                  "' is not supported (supported: auto_round:auto_gptq, auto_round, "
                  "auto_round:gptqmodel, auto_round:auto_awq)");
    }
    qc.lm_head = r.bool_or(q, "lm_head", false);
    const auto* blocks = detail::QuantReader::get(q, "block_name_to_quantize");
    if (!blocks)
      blocks = detail::QuantReader::get(q, "to_quant_block_names");
    if (blocks)
      for (std::string& b : detail::string_list(r, *blocks, "block_name_to_quantize", true))
        qc.blocks.push_back(b.empty() || b.back() == '.' ? b : b + ".");
    if (const auto* e = detail::QuantReader::get(q, "extra_config"))
      detail::parse_extra_config(r, *e, qc);
    for (const QuantRule& rule : qc.rules)
      if (!rule.skip && rule.match == QuantRule::Match::exact && rule.pattern == "lm_head")
        qc.lm_head = true;
    refuse_nonempty("modules_to_not_convert", "an AWQ key");
    refuse_nonempty("dynamic", "a GPTQModel key");
    break;
  }
  case QuantMethod::compressed_tensors:
  case QuantMethod::none:
    break;
  }
  return qc;
}

} // namespace tpullm::frontend
