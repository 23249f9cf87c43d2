#pragma once
/// A StageExecutor over Top modules run by the reference interpreter: what
/// `tpullm verify --level top` and the frontend's golden tests drive the Session with.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tpullm/interp/top_interpreter.hpp"
#include "tpullm/runtime/host_tensor.hpp"

namespace tpullm::runtime {

/// Runs stage functions by interpreting the Top modules that define them.
class InterpreterExecutor : public StageExecutor {
public:
  /// Takes the stage modules (one function each, or more); function names must be unique.
  /// Every module's interpreter materializes weights into `weights`, so a weight referenced by
  /// several stage modules (a layer's block_i, block_kv_i and decode variants; the embedding
  /// of embedding, embedding_cache and a tied lm_head) is widened once per model.
  explicit InterpreterExecutor(
      std::vector<ir::Module> modules,
      std::shared_ptr<interp::WeightStore> weights = std::make_shared<interp::WeightStore>())
      : modules_(std::move(modules)), weights_(std::move(weights)) {
    for (auto& m : modules_) {
      auto interp = std::make_shared<interp::TopInterpreter>(m, weights_);
      for (const auto& f : m.functions()) {
        check(!by_function_.count(f->name()), ErrorKind::invalid_input, "@" + f->name(),
              "function defined by two modules");
        by_function_[f->name()] = interp;
      }
    }
  }

  bool has_function(const std::string& name) const override { return by_function_.count(name) > 0; }

  std::vector<HostTensor> run(const std::string& name,
                              const std::vector<HostTensor>& inputs) override {
    auto it = by_function_.find(name);
    check(it != by_function_.end(), ErrorKind::invalid_input, "@" + name,
          "no stage module defines this function");
    std::vector<interp::Tensor> in;
    for (const auto& t : inputs) {
      if (t.dtype == ir::DType::i32)
        in.push_back(interp::Tensor::from_i32(t.shape, t.i, ir::DType::i32));
      else
        in.push_back(interp::Tensor::from_f32(t.shape, t.f, ir::DType::f32));
    }
    std::vector<HostTensor> out;
    for (const auto& r : it->second->run(name, in)) {
      HostTensor h;
      h.shape = r.shape();
      if (r.is_float()) {
        h.dtype = ir::DType::f32;
        h.f = r.to_f32();
      } else {
        h.dtype = ir::DType::i32;
        h.i.assign(r.ints().data(), r.ints().data() + r.ints().size());
      }
      out.push_back(std::move(h));
    }
    return out;
  }

  const std::vector<ir::Module>& modules() const { return modules_; }
  /// The weights materialized so far, shared by every module's interpreter.
  const interp::WeightStore& weights() const { return *weights_; }

private:
  std::vector<ir::Module> modules_;
  std::shared_ptr<interp::WeightStore> weights_;
  std::map<std::string, std::shared_ptr<interp::TopInterpreter>> by_function_;
};

} // namespace tpullm::runtime
