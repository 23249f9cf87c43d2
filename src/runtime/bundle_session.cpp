// A session's dimensions from a bundle's model record (runtime/bundle_session.hpp).
#include "tpullm/runtime/bundle_session.hpp"

namespace tpullm::runtime {

SessionDims session_dims(const bundle::ModelInfo& m) {
  return {m.layers, m.hidden, m.kv_heads, m.head_dim, m.vocab};
}

} // namespace tpullm::runtime
