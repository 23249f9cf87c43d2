// Out-of-line definitions of tpullm/support/diagnostic.hpp (compiled once into tpullm_core).
#include "tpullm/support/diagnostic.hpp"

namespace tpullm {

auto Location::str() const -> std::string {
  if (line > 0)
    return (file.empty() ? std::string("<input>") : file) + ":" + std::to_string(line) + ":" +
           std::to_string(col);
  return file.empty() ? std::string("<unknown>") : file;
}

} // namespace tpullm
