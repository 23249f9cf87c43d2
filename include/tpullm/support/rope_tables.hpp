#pragma once
/// RoPE cos/sin tables computed at compile time (stored as weights, gathered by position at run
/// time by kernels/rope_gather.hpp). This header is deliberately neutral: standard library only,
/// no intrinsics, no OpenMP, so the frontend can build the tables without the kernel library.
///
/// Table layout: `cos` and `sin` are each [seq_length, d/2] f32 row-major; entry [p, i] is
/// cos/sin(p * inv_freq[i]) for frequency i in [0, d/2). The tables mirror HF's float32
/// arithmetic: inv_freq = 1 / theta^(2i/d) rounded to f32, angle = f32(position) * inv_freq in
/// f32, then cos/sin of that angle rounded to f32.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace tpullm::kernels {

/// RoPE frequency scaling (HF `rope_scaling`): none, linear, or llama3.
struct RopeScaling {
  enum class Kind { none, linear, llama3 };
  Kind kind = Kind::none;
  double factor = 1.0;                                  ///< linear and llama3
  double low_freq_factor = 1.0;                         ///< llama3
  double high_freq_factor = 4.0;                        ///< llama3
  std::int64_t original_max_position_embeddings = 8192; ///< llama3
  /// Per-frequency divisors [d/2] applied after `kind` (a GGUF's rope_freqs tensor, which
  /// llama.cpp's converter writes for llama3 scaling: inv_freq[i] / freq_factors[i] in f32);
  /// empty for none.
  std::vector<float> freq_factors{};
};

/// Owning cos/sin tables: cos, sin: [seq_length, half_dim] f32 row-major, half_dim = d/2.
struct RopeTables {
  std::int64_t seq_length = 0;
  std::int64_t half_dim = 0;
  std::vector<float> cos;
  std::vector<float> sin;
};

/// inv_freq[i], i in [0, d/2), for rope_theta and scaling, in HF's f32 arithmetic.
std::vector<float> rope_inv_freq(std::int64_t head_dim, double theta,
                                 const RopeScaling& scaling = {});

/// Builds cos/sin tables [seq_length, d/2] for positions [0, seq_length).
RopeTables build_rope_tables(std::int64_t seq_length, std::int64_t head_dim, double theta,
                             const RopeScaling& scaling = {});

} // namespace tpullm::kernels
