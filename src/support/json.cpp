// Depth-bounded JSON parsing (tpullm/support/json.hpp).
#include "tpullm/support/json.hpp"

#include "tpullm/support/error.hpp"

namespace tpullm {

void check_json_depth(std::string_view text, const std::string& where) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i; // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw_error(ErrorKind::invalid_input, where, "JSON nested deeper than ", kMaxJsonDepth,
                    " levels (at byte ", i, ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

namespace {
template <class J>
J parse_checked(std::string_view text, const std::string& where, std::string_view what,
                const typename J::parser_callback_t& callback) {
  check_json_depth(text, where);
  try {
    return J::parse(text.begin(), text.end(), callback);
  } catch (const typename J::exception& e) {
    throw_error(ErrorKind::invalid_input, where, what, ": ", e.what());
  }
}
} // namespace

nlohmann::json parse_json(std::string_view text, const std::string& where, std::string_view what,
                          const nlohmann::json::parser_callback_t& callback) {
  return parse_checked<nlohmann::json>(text, where, what, callback);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where,
                                          std::string_view what) {
  return parse_checked<nlohmann::ordered_json>(text, where, what, nullptr);
}

} // namespace tpullm
