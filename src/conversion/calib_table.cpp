// The int8 calibration table: parsing, formatting, model identity (conversion/calib_table.hpp).
#include "tpullm/conversion/calib_table.hpp"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "tpullm/support/error.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/json.hpp"

namespace tpullm::conversion {

namespace {

using Json = nlohmann::ordered_json;

const Json& member(const Json& o, const char* key, const std::string& where) {
  check(o.is_object() && o.contains(key), ErrorKind::invalid_input, where, "missing member '", key,
        "'");
  return o.at(key);
}

float finite_float(const Json& v, const std::string& where) {
  check(v.is_number(), ErrorKind::invalid_input, where, "must be a number, got ", v.type_name());
  const double d = v.get<double>();
  check(std::isfinite(d) && std::fabs(d) <= std::numeric_limits<float>::max(),
        ErrorKind::invalid_input, where, "must be a finite f32 value, got ", d);
  return static_cast<float>(d);
}

std::int64_t count(const Json& v, const std::string& where, std::int64_t lo) {
  check(v.is_number_integer(), ErrorKind::invalid_input, where, "must be an integer, got ",
        v.type_name());
  const auto n = v.get<std::int64_t>();
  check(n >= lo, ErrorKind::invalid_input, where, "must be >= ", lo, ", got ", n);
  return n;
}

std::string text(const Json& v, const std::string& where) {
  check(v.is_string(), ErrorKind::invalid_input, where, "must be a string, got ", v.type_name());
  return v.get<std::string>();
}

CalibEntry parse_entry(const Json& e, const std::string& where) {
  check(e.is_object(), ErrorKind::invalid_input, where, "must be an object");
  CalibEntry c;
  c.name = text(member(e, "name", where), where + ".name");
  check(!c.name.empty(), ErrorKind::invalid_input, where + ".name", "must not be empty");
  const std::string at = where + " (" + c.name + ")";
  c.min = finite_float(member(e, "min", at), at + ".min");
  c.max = finite_float(member(e, "max", at), at + ".max");
  c.absmax = finite_float(member(e, "absmax", at), at + ".absmax");
  c.threshold = finite_float(member(e, "threshold", at), at + ".threshold");
  check(c.min <= c.max, ErrorKind::invalid_input, at, "min ", c.min, " > max ", c.max);
  const float am = std::max(std::fabs(c.min), std::fabs(c.max));
  check(std::fabs(c.absmax - am) <= 1e-6f * am, ErrorKind::invalid_input, at, "absmax ", c.absmax,
        " is not max(|min|, |max|) = ", am);
  check((c.threshold > 0 && c.threshold <= c.absmax) || (c.threshold == 0 && c.absmax == 0),
        ErrorKind::invalid_input, at, "threshold ", c.threshold,
        " is outside (0, absmax = ", c.absmax, "]");
  const Json& ch = member(e, "channel_absmax", at);
  check(ch.is_array() && !ch.empty(), ErrorKind::invalid_input, at + ".channel_absmax",
        "must be a non-empty array");
  c.channel_absmax.reserve(ch.size());
  for (std::size_t j = 0; j < ch.size(); ++j) {
    const std::string cj = at + ".channel_absmax[" + std::to_string(j) + "]";
    const float v = finite_float(ch[j], cj);
    check(v >= 0 && v <= c.absmax, ErrorKind::invalid_input, cj, v,
          " is outside [0, absmax = ", c.absmax, "]");
    c.channel_absmax.push_back(v);
  }
  return c;
}

} // namespace

const CalibEntry* CalibTable::find(std::string_view name) const {
  for (const auto& e : inputs)
    if (e.name == name)
      return &e;
  return nullptr;
}

CalibTable parse_calib_table(std::string_view text_in, const std::string& where) {
  const Json j = parse_ordered_json(text_in, where, "is not a calibration table (JSON)");
  check(j.is_object(), ErrorKind::invalid_input, where, "must hold a JSON object");
  CalibTable t;
  const std::int64_t v = count(member(j, "format_version", where), where + ": format_version", 0);
  check(v == CalibTable::kFormatVersion, ErrorKind::invalid_input, where, "format_version ", v,
        " is not supported (this tpullm reads ", CalibTable::kFormatVersion, ")");
  const Json& m = member(j, "model", where);
  const std::string mw = where + ": model";
  t.model.architecture = text(member(m, "architecture", mw), mw + ".architecture");
  t.model.layers = count(member(m, "layers", mw), mw + ".layers", 1);
  t.model.hidden = count(member(m, "hidden", mw), mw + ".hidden", 1);
  t.model.intermediate = count(member(m, "intermediate", mw), mw + ".intermediate", 1);
  t.model.vocab = count(member(m, "vocab", mw), mw + ".vocab", 1);
  t.method = text(member(j, "method", where), where + ": method");
  check(t.method == "max" || t.method == "percentile" || t.method == "kl", ErrorKind::invalid_input,
        where + ": method", "must be max, percentile or kl, got '", t.method, "'");
  t.samples = count(member(j, "samples", where), where + ": samples", 1);
  t.tokens = count(member(j, "tokens", where), where + ": tokens", 1);
  const Json& in = member(j, "inputs", where);
  check(in.is_array(), ErrorKind::invalid_input, where + ": inputs", "must be an array");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < in.size(); ++i) {
    CalibEntry e = parse_entry(in[i], where + ": inputs[" + std::to_string(i) + "]");
    check(seen.insert(e.name).second, ErrorKind::invalid_input, where, "input '", e.name,
          "' is listed twice");
    t.inputs.push_back(std::move(e));
  }
  return t;
}

std::string format_calib_table(const CalibTable& t) {
  Json j;
  j["format_version"] = CalibTable::kFormatVersion;
  j["model"] = {{"architecture", t.model.architecture},
                {"layers", t.model.layers},
                {"hidden", t.model.hidden},
                {"intermediate", t.model.intermediate},
                {"vocab", t.model.vocab}};
  j["method"] = t.method;
  j["samples"] = t.samples;
  j["tokens"] = t.tokens;
  Json in = Json::array();
  for (const auto& e : t.inputs) {
    Json o;
    o["name"] = e.name;
    o["min"] = e.min;
    o["max"] = e.max;
    o["absmax"] = e.absmax;
    o["threshold"] = e.threshold;
    o["channel_absmax"] = e.channel_absmax;
    in.push_back(std::move(o));
  }
  j["inputs"] = std::move(in);
  return j.dump(1) + "\n";
}

CalibTable load_calib_table(const std::filesystem::path& path) {
  return parse_calib_table(read_regular_file(path), path.string());
}

void check_calib_model(const CalibTable& t, const CalibModel& m, const std::string& where) {
  const CalibModel& c = t.model;
  check(c == m, ErrorKind::invalid_input, where, "was measured on another model (", c.architecture,
        ", ", c.layers, " layers, hidden ", c.hidden, ", intermediate ", c.intermediate, ", vocab ",
        c.vocab, "), not this one (", m.architecture, ", ", m.layers, " layers, hidden ", m.hidden,
        ", intermediate ", m.intermediate, ", vocab ", m.vocab, ")");
}

} // namespace tpullm::conversion
