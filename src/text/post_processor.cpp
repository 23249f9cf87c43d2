// Post-processors: see post_processor.hpp.
#include "post_processor.hpp"

namespace tpullm::text::detail {
namespace {

void template_into(const json& j, const std::string& path, PostProcessor& p) {
  const json& single = member(j, "single");
  if (!single.is_array())
    bad_field(path + ".single", "expected a list");
  const json& specials = member(j, "special_tokens");
  PostProcessor t;
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const json& item = single[i];
    const std::string ip = path + ".single[" + std::to_string(i) + "]";
    if (item.is_object() && item.contains("Sequence")) {
      const json& seq = item["Sequence"];
      if (member(seq, "id") != "A")
        bad_field(ip, "a single template holds only sequence \"A\"");
      if (seen_sequence)
        bad_field(ip, "sequence \"A\" appears twice");
      seen_sequence = true;
    } else if (item.is_object() && item.contains("SpecialToken")) {
      const std::string name = str_field(item["SpecialToken"], "id", ip + ".SpecialToken");
      const json& st = member(specials, name.c_str());
      const json& ids = member(st, "ids");
      if (!ids.is_array())
        bad_field(path + ".special_tokens", "no ids for '" + name + "'");
      for (const json& id : ids) {
        if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
            id.get<std::int64_t>() >= (1 << 26))
          bad_field(path + ".special_tokens", "an id of '" + name + "' is not in [0, 2^26)");
        (seen_sequence ? t.after : t.before)
            .push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
      }
    } else {
      bad_field(ip, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  if (!seen_sequence)
    bad_field(path + ".single", "has no sequence \"A\"");
  // Applied after what came before it in a Sequence: the earlier wrapping ends up inside.
  t.before.insert(t.before.end(), p.before.begin(), p.before.end());
  t.after.insert(t.after.begin(), p.after.begin(), p.after.end());
  p = std::move(t);
}

void parse_into(const json& j, const std::string& path, PostProcessor& p, int depth) {
  const std::string type = type_of(j, path);
  if (type == "Sequence") {
    const json& list = sequence_list(j, "processors", path, depth, 0);
    for (std::size_t i = 0; i < list.size(); ++i)
      parse_into(list[i], path + ".processors[" + std::to_string(i) + "]", p, depth + 1);
  } else if (type == "ByteLevel") {
    // Only trims offsets: the ids are unchanged.
  } else if (type == "TemplateProcessing") {
    template_into(j, path, p);
  } else {
    unsupported_type("post_processor", type);
  }
}

} // namespace

void PostProcessor::apply(std::vector<std::int32_t>& ids) const {
  if (before.empty() && after.empty())
    return;
  ids.insert(ids.begin(), before.begin(), before.end());
  ids.insert(ids.end(), after.begin(), after.end());
}

PostProcessor parse_post_processor(const json& j) {
  PostProcessor p;
  if (!j.is_null())
    parse_into(j, "post_processor", p, 1);
  return p;
}

} // namespace tpullm::text::detail
