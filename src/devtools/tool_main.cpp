// Out-of-line definitions of tpullm/devtools/tool_main.hpp (compiled once into tpullm_devtools).
#include "tpullm/devtools/tool_main.hpp"

namespace tpullm::detail {

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\n')
      out += "; ";
    else if (c != '\r')
      out += c;
  }
  return out;
}

void report_line(std::string_view message) noexcept {
  try {
    std::cerr << g_tool_program << ": " << message << std::endl;
  } catch (...) {
  }
}

void on_terminate() noexcept {
  std::string what = "terminate called without an active exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
      what = "unknown exception";
    }
  }
  report_line("internal error: " + one_line(what));
  std::_Exit(g_tool_internal_exit);
}

} // namespace tpullm::detail
