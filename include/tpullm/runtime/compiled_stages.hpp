#pragma once
/// Stages of compiled Programs run by the Executor (runtime/executor.hpp): what `tpullm verify
/// --level tpu` and the runtime drive the Session with. The executor owns the KV cache, so the
/// Session passes no history and receives no keys / values.

#include "tpullm/runtime/executor.hpp"
#include "tpullm/runtime/stages.hpp"

namespace tpullm::runtime {

/// Stage functions run by an Executor, on one of its KV slots (one conversation's caches).
class CompiledStages : public Stages {
public:
  /// Runs on KV slot `slot` of `e` (in [0, e.kv_geometry().slots)).
  explicit CompiledStages(Executor& e, std::int32_t slot = 0) : exec_(e), slot_(slot) {
    check(slot >= 0 && slot < e.kv_geometry().slots, ErrorKind::invalid_input, "KV slot", slot,
          " is outside [0, ", e.kv_geometry().slots, ")");
  }
  void run(const std::string& name, std::span<const ConstBytes> inputs,
           std::span<const MutBytes> outputs) override {
    exec_.run(exec_.program_id(name), inputs, outputs, {&slot_, 1});
  }
  StageHandle resolve(const std::string& name) override { return {exec_.program_id(name)}; }
  void run(StageHandle h, std::span<const ConstBytes> inputs,
           std::span<const MutBytes> outputs) override {
    exec_.run(h.id, inputs, outputs, {&slot_, 1});
  }
  void run_on(StageHandle h, std::span<const ConstBytes> inputs, std::span<const MutBytes> outputs,
              std::span<const std::int32_t> slots) override {
    exec_.run(h.id, inputs, outputs, slots);
  }
  /// The KV slot this runs on.
  std::int32_t slot() const { return slot_; }
  bool has_function(const std::string& name) const override { return exec_.has_program(name); }
  bool owns_kv_cache() const override { return true; }
  bool kv_keeps(std::int64_t written, std::int64_t keep) const override {
    return exec_.kv_rings().keeps(written, keep);
  }
  Executor& executor() { return exec_; }

private:
  Executor& exec_;
  std::int32_t slot_;
};

} // namespace tpullm::runtime
