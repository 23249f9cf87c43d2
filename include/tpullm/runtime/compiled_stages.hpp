#pragma once
/// A StageExecutor over the compiled executor (runtime/executor.hpp): what `tpullm verify
/// --level tpu` and the runtime drive the Session with. The executor owns the KV cache, so the
/// Session passes no history and receives no keys / values.

#include "tpullm/runtime/executor.hpp"
#include "tpullm/runtime/stage_executor.hpp"

namespace tpullm::runtime {

/// Stage functions run by an Executor.
class CompiledStages : public StageExecutor {
public:
  explicit CompiledStages(Executor& e) : exec_(e) {}
  void run(const std::string& name, std::span<const ConstBytes> inputs,
           std::span<const MutBytes> outputs) override {
    exec_.run(name, inputs, outputs);
  }
  StageHandle resolve(const std::string& name) override { return {exec_.program_id(name)}; }
  void run(StageHandle h, std::span<const ConstBytes> inputs,
           std::span<const MutBytes> outputs) override {
    exec_.run(h.id, inputs, outputs);
  }
  bool has_function(const std::string& name) const override { return exec_.has_program(name); }
  bool owns_kv_cache() const override { return true; }
  Executor& executor() { return exec_; }

private:
  Executor& exec_;
};

} // namespace tpullm::runtime
