// Out-of-line definitions of tpullm/bundle/bundle.hpp (compiled once into tpullm_core).
#include "tpullm/bundle/bundle.hpp"

namespace tpullm::bundle {

auto Bundle::find_weight(const std::string& name) const -> const ir::Weight* {
  auto it = std::lower_bound(weights_.begin(), weights_.end(), name,
                             [](const ir::Weight& w, const std::string& n) { return w.name < n; });
  return it != weights_.end() && it->name == name ? &*it : nullptr;
}

} // namespace tpullm::bundle
