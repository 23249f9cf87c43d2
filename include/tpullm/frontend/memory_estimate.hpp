#pragma once
/// An up-front estimate of the memory a command will need for a model and its stage parameters,
/// so that a huge `--seq-length` (or `--max-input-length`, or a model too large for the f64
/// reference interpreter) is refused in milliseconds with a message naming the option, instead
/// of growing until the allocator or the kernel's OOM killer stops the process.
///
/// The figures are estimates of the dominant terms (tables, caches, f64 copies, activations of
/// the largest call), computed in double so that no input can overflow them. They are meant to
/// catch requests that cannot fit, not to predict the peak to the byte: check_memory() refuses
/// only what exceeds the memory the process may use.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/ir/dtype.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::frontend {

/// What a command does with the stage modules.
enum class Workload {
  build,     ///< builds (and writes) the Top modules: import, compile
  interpret, ///< also runs them in the f64 Top interpreter with a KV cache: verify --level top
  run,       ///< compiles them to Tpu programs and runs them on the executor: verify --level tpu
             ///< (weights converted once, f32 KV cache, f32 activations)
};

/// Estimated peak memory by cause, in bytes.
struct MemoryEstimate {
  double seq_length = 0;       ///< grows with --seq-length: RoPE tables, KV cache, decode calls
  double max_input_length = 0; ///< grows with --max-input-length: prefill activations
  double weights = 0;          ///< the weights as the command holds them (copies, f64 widening)
  double block_modules = 0;    ///< block modules per layer (1 + prefill_kv + decode variants)
  /// Sum of the three causes.
  double total() const { return seq_length + max_input_length + weights; }
};

namespace detail {

/// Elements of one decoder layer's weights (linears counted at their logical size).
double layer_elements(const ModelDims& d);

/// Elements of the largest decoder layer's weights of `d` (a sparse layer counted as in
/// all_layer_elements).
double max_layer_elements(const ModelDesc& d);
/// Elements of every decoder layer's weights of `d`: a sparse layer (mixture of experts) holds
/// its router [E, H] and E experts of 3 * H * expert_intermediate instead of the dense MLP.
double all_layer_elements(const ModelDesc& d);

/// "12.3 GiB" for messages.
std::string human_bytes(double b);

/// First unsigned number in a small system file, or nullopt ("max", missing, unreadable).
std::optional<double> read_limit_file(const std::string& path);

} // namespace detail

/// The memory `d` under `p` needs for `w` (see Workload). `access` says whether the checkpoint
/// is mapped (its pages are the page cache's, not counted) or read into memory (counted).
/// `kv_dtype`: the KV cache's element type of a compiled run (f32, f16, bf16, or i8: codes and
/// a 4-byte scale per position and head, memory::kv_row_bytes).
MemoryEstimate estimate_memory(const ModelDesc& d, const StageParams& p, Workload w,
                               FileAccess access = FileAccess::map,
                               ir::DType kv_dtype = ir::DType::f32);

/// The memory `tpullm calibrate` needs for `d` under `p`: `sessions` samples run at once in the
/// f64 interpreter, each with its KV cache, RoPE tables and prefill activations (the interpret
/// workload's figures per session), and one shared store of widened weights that never holds
/// more than `store_bytes` (its budget) or, when larger, `sessions` layers' weights in f64 at once
/// (the store's minimum). Not the interpret workload's f64 copy of every weight per module: the
/// store widens a layer when it runs and drops the least recently used.
MemoryEstimate estimate_calibrate_memory(const ModelDesc& d, const StageParams& p,
                                         FileAccess access, int sessions, double store_bytes);
/// Memory this process may use: physical memory, lowered by the cgroup limit (v2 or v1) and by
/// RLIMIT_AS / RLIMIT_DATA when they are set.
double memory_limit_bytes();

/// Throws Error(invalid_input) when `e` exceeds `limit` bytes. The error's "where" names the
/// option behind the largest share (--seq-length, --max-input-length, or --decode-chunk / the
/// model directory when the weights dominate) and the message gives the figures.
void check_memory(const MemoryEstimate& e, const StageParams& p, const ModelDesc& d,
                  double limit = memory_limit_bytes());

/// check_memory() of the run workload (a bundle compiled from `d` under `p`, run with a KV cache
/// in `kv_dtype`). When that does not fit but a smaller cache would (f16 for an f32 cache, else
/// int8 for a 16- or 32-bit one), the refusal (Error(invalid_input) on --seq-length) names the
/// first --kv-dtype that fits and both figures, so the user is told the option that makes the
/// run fit.
void check_run_memory(const ModelDesc& d, const StageParams& p, FileAccess access,
                      ir::DType kv_dtype, double limit = memory_limit_bytes());

} // namespace tpullm::frontend
