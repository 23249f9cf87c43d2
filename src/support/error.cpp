// Out-of-line definitions of tpullm/support/error.hpp (compiled once into tpullm_core).
#include "tpullm/support/error.hpp"

namespace tpullm {

auto Error::within(std::string_view outer) const -> Error {
  if (outer.empty())
    return *this;
  return Error(kind_, where_.empty() ? std::string(outer) : str_cat(outer, ": ", where_), message_);
}

auto Error::compose(ErrorKind kind, const std::string& where, const std::string& msg)
    -> std::string {
  std::string s(to_string(kind));
  s += ": ";
  if (!where.empty()) {
    s += where;
    s += ": ";
  }
  s += msg;
  return s;
}

} // namespace tpullm
