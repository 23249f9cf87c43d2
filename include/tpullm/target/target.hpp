#pragma once
/// The target a model is compiled for: the paper's TPU, played here by the CPU. A target says
/// how many cores run in parallel, how much local memory each core has (the budget a layer
/// group's tiles must fit), the alignment of every buffer, and which weight types its kernels
/// support. `host_target()` reads the machine (cores = usable hardware threads, local memory =
/// the L2 cache of one core); a JSON file or flags override any field, so the same model can be
/// compiled for a smaller or larger "chip" and the effect seen in the plans.
///
/// JSON form (every key optional; missing keys keep the host's value):
///   {"name": "cpu", "cores": 2, "local_memory": 1048576, "alignment": 64,
///    "weight_dtypes": ["f32", "bf16", "f16", "i8", "i4", "u4"]}

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tpullm/ir/dtype.hpp"

namespace tpullm::target {

/// A compilation target.
struct Target {
  std::string name = "cpu";             ///< free-form label printed in plans and bundles
  std::int64_t cores = 1;               ///< parallel cores (threads on the CPU)
  std::int64_t local_memory = 1 << 20;  ///< bytes of local memory per core (CPU: L2 per core)
  std::int64_t alignment = 64;          ///< byte alignment of every planned buffer
  std::vector<ir::DType> weight_dtypes; ///< weight element types its kernels support

  /// True when the kernels handle weights stored as `t`.
  bool supports(ir::DType t) const;
  /// Throws Error(invalid_input) naming the field when a value is unusable.
  void validate() const;
  /// The target as the JSON object documented above.
  std::string to_json() const;
};

/// The machine this process runs on (cores from OpenMP / the affinity mask, local memory from
/// the L2 cache size, 1 MiB when unknown).
Target host_target();

/// Applies the keys of a JSON object to `base`; throws Error(invalid_input) naming the key on
/// an unknown key or a bad value.
Target target_from_json(const std::string& json, Target base = host_target());

/// Reads a JSON target file (see target_from_json); throws Error(io / invalid_input) naming it.
Target load_target(const std::filesystem::path& file, Target base = host_target());

} // namespace tpullm::target
