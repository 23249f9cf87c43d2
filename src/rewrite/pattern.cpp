// Out-of-line definitions of tpullm/rewrite/pattern.hpp (compiled once into tpullm_core).
#include "tpullm/rewrite/pattern.hpp"

namespace tpullm::rewrite {

auto PatternSet::add(PatternSet&& other) -> PatternSet& {
  for (auto& p : other.patterns_)
    patterns_.push_back(std::move(p));
  other.patterns_.clear();
  return *this;
}

auto PatternSet::for_kind(ir::OpKind k) const -> std::vector<const Pattern*> {
  std::vector<const Pattern*> out;
  for (const auto& p : patterns_)
    if (!p->root_kind() || *p->root_kind() == k)
      out.push_back(p.get());
  std::stable_sort(out.begin(), out.end(),
                   [](const Pattern* a, const Pattern* b) { return a->benefit() > b->benefit(); });
  return out;
}

} // namespace tpullm::rewrite
