#pragma once
/// A bundle ready to generate from: the mapped bundle (bundle/bundle.hpp), an executor holding
/// its programs and weights (shared with the mapping, not copied) and its own KV cache, and one
/// Session over them. What `tpullm run`, `tpullm bench` and programs using the library hold.

#include <filesystem>
#include <memory>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/session.hpp"

namespace tpullm::runtime {

/// See the file comment. Not copyable or movable (the session refers to the executor).
class Engine {
public:
  /// Opens `path` (Bundle::open: validated, refused with Error when bad); `cores` 0 = the
  /// bundle target's cores.
  explicit Engine(const std::filesystem::path& path, std::int64_t cores = 0)
      : Engine(bundle::Bundle::open(path), cores) {}
  /// Runs an opened bundle.
  explicit Engine(std::shared_ptr<const bundle::Bundle> b, std::int64_t cores = 0)
      : bundle_(std::move(b)), exec_(make_executor(*bundle_, cores)), stages_(*exec_),
        session_(stages_, dims_of(bundle_->model()), bundle_->model().params) {}
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// The generation loop (prefill / prefill_kv / decode) over this bundle.
  Session& session() { return session_; }
  /// The executor (timings, the KV cache).
  Executor& executor() { return *exec_; }
  /// The opened bundle (model info, target, programs, weights).
  const bundle::Bundle& bundle() const { return *bundle_; }

  /// Session dimensions of a bundle's model.
  static SessionDims dims_of(const bundle::ModelInfo& m) {
    return {m.layers, m.hidden, m.kv_heads, m.head_dim, m.vocab};
  }

private:
  std::shared_ptr<const bundle::Bundle> bundle_;
  std::unique_ptr<Executor> exec_;
  CompiledStages stages_;
  Session session_;
};

} // namespace tpullm::runtime
