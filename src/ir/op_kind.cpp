// Out-of-line definitions of tpullm/ir/op_kind.hpp (compiled once into tpullm_core).
#include "tpullm/ir/op_kind.hpp"

namespace tpullm::ir {

OpVariant make_op(OpKind k) {
  OpVariant v;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((static_cast<std::size_t>(k) == I ? (v.template emplace<I>(), 0) : 0), ...);
  }
  (std::make_index_sequence<kNumOpKinds>{});
  return v;
}

} // namespace tpullm::ir
