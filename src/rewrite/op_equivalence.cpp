// Out-of-line definitions of tpullm/rewrite/op_equivalence.hpp (compiled once into tpullm_core).
#include "tpullm/rewrite/op_equivalence.hpp"

namespace tpullm::rewrite {

bool attributes_equal(const ir::OpVariant& a, const ir::OpVariant& b) {
  if (a.index() != b.index())
    return false;
  return ir::visit_op(a, [&](const auto& sa) {
    using T = std::decay_t<decltype(sa)>;
    return attributes_equal(sa, std::get<T>(b));
  });
}

std::size_t attributes_hash(const ir::OpVariant& op) {
  std::size_t h = op.index();
  ir::visit_op(op, [&](const auto& s) {
    using T = std::decay_t<decltype(s)>;
    T::attrs(s, [&](const char*, const auto& v) { ir::hash_combine(h, ir::attr_hash(v)); });
  });
  return h;
}

std::size_t op_hash(const ir::Operation& op) {
  std::size_t h = attributes_hash(op.op());
  for (const auto* v : op.operands())
    ir::hash_combine(h, std::hash<const void*>{}(v));
  return h;
}

} // namespace tpullm::rewrite
