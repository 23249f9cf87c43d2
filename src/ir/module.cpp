// Out-of-line definitions of tpullm/ir/module.hpp (compiled once into tpullm_core).
#include "tpullm/ir/module.hpp"

namespace tpullm::ir {

auto Weight::part(const std::string& role) const -> const WeightPart& {
  for (const auto& p : parts)
    if (p.role == role)
      return p;
  throw Error(ErrorKind::invalid_input, "weight @" + name, "has no part '" + role + "'");
}

auto Weight::find_part(const std::string& role) const -> const WeightPart* {
  for (const auto& p : parts)
    if (p.role == role)
      return &p;
  return nullptr;
}

auto Module::add_weight(Weight w) -> const Weight& {
  auto it = weights_.find(w.name);
  if (it != weights_.end()) {
    if (!(it->second.type == w.type))
      throw Error(ErrorKind::invalid_input, "",
                  "weight @" + w.name + " redeclared as " + w.type.str() + ", was " +
                      it->second.type.str());
    return it->second;
  }
  return weights_.emplace(w.name, std::move(w)).first->second;
}

auto Module::add_function(std::string name) -> Function& {
  if (find_function(name))
    throw Error(ErrorKind::invalid_input, "",
                "function @" + name + " already exists in module @" + name_);
  functions_.push_back(std::make_unique<Function>(std::move(name)));
  return *functions_.back();
}

auto Module::find_function(const std::string& name) const -> Function* {
  for (const auto& f : functions_)
    if (f->name() == name)
      return f.get();
  return nullptr;
}

auto Module::replace_function(const std::string& name, std::unique_ptr<Function> f)
    -> std::unique_ptr<Function> {
  for (auto& slot : functions_)
    if (slot->name() == name) {
      std::swap(slot, f);
      return f;
    }
  throw Error(ErrorKind::internal, "module @" + name_, "has no function @" + name);
}

} // namespace tpullm::ir
