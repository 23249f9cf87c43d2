#pragma once
/// Stages of Top modules run by the reference interpreter (runtime/stages.hpp): what
/// `tpullm verify --level top` and the frontend's golden tests drive the Session with. It does
/// not own a KV cache: the Session passes history and receives new keys / values.

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tpullm/interp/top_interpreter.hpp"
#include "tpullm/runtime/stages.hpp"

namespace tpullm::runtime {

/// Runs stage functions by interpreting the Top modules that define them.
class InterpretedStages : public Stages {
public:
  /// Takes the stage modules (one function each, or more); function names must be unique.
  /// Every module's interpreter materializes weights into `weights`, so a weight referenced by
  /// several stage modules (a layer's block_i, block_kv_i and decode variants; the embedding
  /// of embedding, embedding_cache and a tied lm_head) is widened once per model.
  explicit InterpretedStages(
      std::vector<ir::Module> modules,
      std::shared_ptr<interp::WeightStore> weights = std::make_shared<interp::WeightStore>());

  bool has_function(const std::string& name) const override { return by_function_.count(name) > 0; }

  using Stages::run;
  void run(const std::string& name, std::span<const ConstBytes> inputs,
           std::span<const MutBytes> outputs) override;

  const std::vector<ir::Module>& modules() const { return modules_; }
  /// Installs observation hook `o` on every module's interpreter (TopInterpreter::set_observer).
  void set_observer(const interp::TopInterpreter::Observer& o) {
    for (auto& [name, e] : by_function_)
      e.interp->set_observer(o);
  }
  /// The weight store every module's interpreter shares.
  interp::WeightStore& weights() { return *weights_; }

private:
  struct Entry {
    std::shared_ptr<interp::TopInterpreter> interp;
    const ir::Function* function = nullptr;
  };
  std::vector<ir::Module> modules_;
  std::shared_ptr<interp::WeightStore> weights_;
  std::map<std::string, Entry> by_function_;
};

} // namespace tpullm::runtime
