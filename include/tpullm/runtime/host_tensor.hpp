#pragma once
/// Host-side tensors exchanged with stage functions: f32 activations and KV rows, i32 token ids
/// and positions. Row-major, batch 1.

#include <cstdint>
#include <string>
#include <vector>

#include "tpullm/ir/type.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

/// A dense row-major host tensor holding f32 (`f`) or i32 (`i`) elements.
struct HostTensor {
  ir::DType dtype = ir::DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<float> f;        ///< elements when dtype == f32
  std::vector<std::int32_t> i; ///< elements when dtype == i32

  /// i32 tensor with the given values.
  static HostTensor ids(std::vector<std::int64_t> shape, std::vector<std::int32_t> values) {
    HostTensor t{ir::DType::i32, std::move(shape), {}, std::move(values)};
    check(static_cast<std::int64_t>(t.i.size()) == t.numel(), ErrorKind::internal, "HostTensor",
          "value count does not match shape");
    return t;
  }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape)
      n *= d;
    return n;
  }
};

/// Runs compiled or interpreted stage functions by name: the only thing the generation loop
/// needs from a back end.
class StageExecutor {
public:
  virtual ~StageExecutor() = default;
  /// Runs function `name` on `inputs` (in argument order) and returns its results.
  virtual std::vector<HostTensor> run(const std::string& name,
                                      const std::vector<HostTensor>& inputs) = 0;
  /// True when function `name` exists.
  virtual bool has_function(const std::string& name) const = 0;
};

} // namespace tpullm::runtime
