// Normalizers: see normalizer.hpp.
#include "normalizer.hpp"

#include "unicode.hpp"

namespace tpullm::text::detail {
namespace {

void parse_into(const json& j, const std::string& path, Normalizer& n, int depth) {
  const std::string type = type_of(j, path);
  if (type == "Sequence") {
    const json& list = sequence_list(j, "normalizers", path, depth, n.steps.size());
    for (std::size_t i = 0; i < list.size(); ++i)
      parse_into(list[i], path + ".normalizers[" + std::to_string(i) + "]", n, depth + 1);
  } else if (type == "NFC") {
    n.steps.emplace_back(NfcStep{});
  } else if (type == "Prepend") {
    n.steps.emplace_back(PrependStep{str_field(j, "prepend", path)});
  } else if (type == "Replace") {
    n.steps.emplace_back(ReplaceStep{pattern_field(j, path), str_field(j, "content", path)});
  } else {
    unsupported_type("normalizer", type);
  }
}

} // namespace

std::string replace_all(const Pattern& p, std::string_view s, const std::string& content) {
  std::vector<std::pair<std::size_t, std::size_t>> m;
  p.find_all(s, m);
  if (m.empty())
    return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::size_t prev = 0;
  for (const auto& [b, e] : m) {
    out.append(s.substr(prev, b - prev));
    out += content;
    prev = e;
  }
  out.append(s.substr(prev));
  return out;
}

std::string Normalizer::apply(std::string s) const {
  for (const auto& step : steps)
    std::visit(Overload{[&](const NfcStep&) { s = nfc(s); },
                        [&](const PrependStep& p) {
                          if (!s.empty())
                            s.insert(0, p.text);
                        },
                        [&](const ReplaceStep& r) { s = replace_all(r.pattern, s, r.content); }},
               step);
  return s;
}

Normalizer parse_normalizer(const json& j) {
  Normalizer n;
  if (!j.is_null())
    parse_into(j, "normalizer", n, 1);
  return n;
}

} // namespace tpullm::text::detail
