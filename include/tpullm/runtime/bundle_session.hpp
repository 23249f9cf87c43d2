#pragma once
/// One Session over an opened bundle: the mapped bundle (bundle/bundle.hpp), the executor
/// runtime::make_executor made from it (its programs and weights, shared with the mapping, not
/// copied, and its own KV cache of one conversation), the CompiledStages on that cache, and the
/// Session over them. What `tpullm run`, `chat`, `bench` and programs using the library hold;
/// `tpullm serve` holds a SlotPool of many sessions over one executor instead.

#include <filesystem>
#include <memory>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/session.hpp"

namespace tpullm::runtime {

/// Session dimensions of a bundle's model.
SessionDims session_dims(const bundle::ModelInfo& m);

/// See the file comment. Not copyable or movable (the session refers to the executor).
class BundleSession {
public:
  /// Opens `path` (Bundle::open: validated, refused with Error when bad); `cores` 0 = the
  /// bundle target's cores.
  explicit BundleSession(const std::filesystem::path& path, std::int64_t cores = 0)
      : BundleSession(bundle::Bundle::open(path), cores) {}
  /// A session over an opened bundle (make_executor's cores rule and memory check), its
  /// executor's KV cache holding `slots` conversations (the session's is slot 0; a SlotPool
  /// over executor() may use them all).
  explicit BundleSession(std::shared_ptr<const bundle::Bundle> b, std::int64_t cores = 0,
                         std::int64_t slots = 1)
      : bundle_(std::move(b)), exec_(make_executor(*bundle_, cores, slots)), stages_(*exec_),
        session_(stages_, session_dims(bundle_->model()), bundle_->model().params) {}
  BundleSession(const BundleSession&) = delete;
  BundleSession& operator=(const BundleSession&) = delete;

  /// The generation loop (prefill / prefill_kv / decode) over this bundle.
  Session& session() { return session_; }
  /// The executor (timings, the KV cache).
  Executor& executor() { return *exec_; }
  /// The opened bundle (model info, target, programs, weights).
  const bundle::Bundle& bundle() const { return *bundle_; }
  /// The opened bundle, shared (another session over it keeps it alive).
  const std::shared_ptr<const bundle::Bundle>& shared_bundle() const { return bundle_; }

private:
  std::shared_ptr<const bundle::Bundle> bundle_;
  std::unique_ptr<Executor> exec_;
  CompiledStages stages_;
  Session session_;
};

} // namespace tpullm::runtime
