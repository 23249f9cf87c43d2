#pragma once
/// A test checkpoint named on the command line of the MPI exactness tests
/// (pipeline_exactness.cpp, tensor_exactness.cpp): DIR, or DIR@window=N for the checkpoint with
/// a sliding window of N keys on every layer (its caches then rings on every rank,
/// runtime/kv_region.hpp).

#include <cstdint>
#include <filesystem>
#include <string>

#include "tpullm/frontend/model_desc.hpp"

namespace tpullm_test {

/// The loaded checkpoint, its window (0: none) and a name for the report lines.
struct ModelArg {
  tpullm::frontend::ModelDesc desc;
  std::filesystem::path dir;
  std::int64_t window = 0;
  std::string name;
};

/// Loads `arg` (DIR or DIR@window=N).
inline ModelArg load_model_arg(std::string arg) {
  ModelArg m;
  if (const auto at = arg.find("@window="); at != std::string::npos) {
    m.window = std::stoll(arg.substr(at + 8));
    arg.resize(at);
  }
  m.dir = arg;
  m.desc = tpullm::frontend::load_model(m.dir);
  if (m.window > 0)
    m.desc.sliding_windows.assign(static_cast<std::size_t>(m.desc.dims.layers), m.window);
  m.name = m.dir.filename().string() + (m.window > 0 ? " window " + std::to_string(m.window) : "");
  return m;
}

} // namespace tpullm_test
