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

/// RoPE frequency scaling (HF `rope_scaling`): none, linear, llama3 or yarn.
struct RopeScaling {
  enum class Kind { none, linear, llama3, yarn };
  Kind kind = Kind::none;
  double factor = 1.0;                                  ///< linear, llama3 and yarn
  double low_freq_factor = 1.0;                         ///< llama3
  double high_freq_factor = 4.0;                        ///< llama3
  std::int64_t original_max_position_embeddings = 8192; ///< llama3 and yarn
  /// Per-frequency divisors [d/2] applied after `kind` (a GGUF's rope_freqs tensor, which
  /// llama.cpp's converter writes for llama3 scaling: inv_freq[i] / freq_factors[i] in f32);
  /// empty for none.
  std::vector<float> freq_factors{};
  /// cos and sin are multiplied by it in f32 (yarn's attention factor; 1 for the others).
  double attention_factor = 1.0;
  double beta_fast = 32.0; ///< yarn: rotations at the low end of the ramp
  double beta_slow = 1.0;  ///< yarn: rotations at the high end of the ramp
  bool truncate = true;    ///< yarn: correction dims rounded outward (floor / ceil)
};

/// Owning cos/sin tables: cos, sin: [seq_length, half_dim] f32 row-major, half_dim = d/2.
struct RopeTables {
  std::int64_t seq_length = 0;
  std::int64_t half_dim = 0;
  std::vector<float> cos;
  std::vector<float> sin;
};

/// inv_freq[i], i in [0, d/2), for rope_theta and scaling, in HF's f32 arithmetic. yarn, as
/// transformers' _compute_yarn_parameters: with p[i] = theta^(2i/d) in f32, low / high the
/// correction dims d ln(orig / (2 pi beta)) / (2 ln theta) of beta_fast / beta_slow (floor /
/// ceil when truncate), clamped to [0, d - 1], and ramp[i] = clamp((i - low) / (high - low), 0,
/// 1) (high - low at least 0.001), inv_freq = (1 / (factor p)) ramp + (1 / p) (1 - ramp), each
/// operation rounded to f32.
std::vector<float> rope_inv_freq(std::int64_t head_dim, double theta,
                                 const RopeScaling& scaling = {});

/// Builds cos/sin tables [seq_length, d/2] for positions [0, seq_length), each entry multiplied
/// by scaling.attention_factor in f32 when it is not 1.
RopeTables build_rope_tables(std::int64_t seq_length, std::int64_t head_dim, double theta,
                             const RopeScaling& scaling = {});

} // namespace tpullm::kernels
