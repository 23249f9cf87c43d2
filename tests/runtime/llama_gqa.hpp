#pragma once
/// The model the runtime tests run: tests/data/models/llama-gqa compiled in memory for given
/// stage parameters on 2 cores, with its session dimensions.

#include <filesystem>

#include "small_compile.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/bundle_session.hpp"

namespace tpullm_test {

/// See the file comment.
struct CompiledLlamaGqa {
  explicit CompiledLlamaGqa(tpullm::frontend::StageParams p) : stage_params(std::move(p)) {}
  tpullm::frontend::StageParams stage_params; ///< the stage shapes compiled
  tpullm::frontend::ModelDesc desc = tpullm::frontend::load_model(model_dir("llama-gqa"));
  tpullm::codegen::CompiledModel cm = [this] {
    tpullm::compiler::CompileOptions o;
    o.target.cores = 2;
    return tpullm::compiler::compile(tpullm::frontend::build_top_modules(desc, stage_params), o);
  }();
  /// Session dimensions of the model.
  tpullm::runtime::SessionDims dims() const {
    return tpullm::runtime::session_dims(
        tpullm::bundle::make_model_info(desc, stage_params, "f32"));
  }
};

} // namespace tpullm_test
