#pragma once
/// Random checkpoints at real model shapes: presets of real architectures (Qwen2.5-0.5B,
/// Llama-3.2-1B, and a tiny one for tests) written as HuggingFace checkpoints (config.json in
/// the family's own format + model.safetensors) with random weights at a real model's scale.
/// For speed and memory measurements and tests at real sizes; the weights carry no meaning.
///
/// Values are a pure function of (seed, tensor name, element index): every run with the same
/// seed writes byte-identical files, and a tensor's values do not depend on the other tensors
/// (a --layers 1 variant holds the same layer 0 as the full model). With RandomQuant, the
/// decoder linears are written in GPTQ or AWQ layout instead (random integers, not a
/// quantization of the float values). Linear weights, the
/// embedding and biases are approximately normal(0, std) (the sum of four uniform 16-bit
/// integers, rescaled: Irwin-Hall, bounded at 3.46 std; integer arithmetic, so no platform's
/// libm changes a bit); RMSNorm gammas are 1 + the same noise.

#include "tpullm/frontend/families.hpp"
#include "tpullm/frontend/hf_config.hpp"
#include "tpullm/frontend/quant_pack.hpp"
#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/frontend/safetensors_writer.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/float16.hpp"
#include "tpullm/support/output_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpullm::frontend {

/// The architecture of a model to generate: what its config.json says.
struct ModelPreset {
  std::string name;                         ///< "qwen2.5-0.5b", "llama3.2-1b", "tiny"
  ModelFamily family = ModelFamily::llama;  ///< llama or qwen2 (config.json format)
  std::int64_t hidden = 0;                  ///< hidden_size
  std::int64_t intermediate = 0;            ///< intermediate_size
  std::int64_t layers = 0;                  ///< num_hidden_layers
  std::int64_t heads = 0;                   ///< num_attention_heads
  std::int64_t kv_heads = 0;                ///< num_key_value_heads
  std::int64_t head_dim = 0;                ///< per-head dimension
  bool head_dim_in_config = false;          ///< write "head_dim" (Llama 3.2 does)
  std::int64_t vocab = 0;                   ///< vocab_size
  std::int64_t max_position = 0;            ///< max_position_embeddings
  bool tie_word_embeddings = false;         ///< lm_head is the embedding (no lm_head.weight)
  double rms_norm_eps = 1e-6;               ///< rms_norm_eps
  RopeConfig rope;                          ///< rope_theta and rope_scaling
  std::optional<std::int64_t> bos_token_id; ///< written only when inside the vocabulary
  std::optional<std::int64_t> eos_token_id; ///< written only when inside the vocabulary
  /// qwen3_moe only: routed experts per layer (num_experts), experts per token
  /// (num_experts_per_tok) and one expert's width (moe_intermediate_size); every layer sparse,
  /// norm_topk_prob true (as Qwen3-30B-A3B).
  std::int64_t experts = 0, top_k = 0, moe_intermediate = 0;

  /// Throws Error(invalid_input) naming the preset when a dimension is not positive, the
  /// heads do not group, head_dim is odd, or hidden != heads * head_dim without an explicit
  /// head_dim.
  void validate() const;
  /// Number of weights (elements of every tensor in the checkpoint).
  std::int64_t parameters() const;
};

/// The presets: Qwen2.5-0.5B (qwen2: hidden 896, 24 layers, 14/2 heads, head_dim 64,
/// intermediate 4864, vocab 151936, tied, q/k/v bias, rope_theta 1e6, eps 1e-6, 32768
/// positions), Llama-3.2-1B (llama: hidden 2048, 16 layers, 32/8 heads, head_dim 64,
/// intermediate 8192, vocab 128256, tied, rope_theta 5e5 with llama3 scaling factor 32, low 1,
/// high 4, original 8192, eps 1e-5, 131072 positions) and tiny (llama: hidden 64, 2 layers,
/// 4/2 heads, head_dim 16, intermediate 128, vocab 512, untied head, 2048 positions) and
/// Qwen3-30B-A3B (qwen3_moe: hidden 2048, 48 layers, 32/4 heads of 128, q/k norm, 128 experts
/// of width 768, top 8 renormalised, vocab 151936, untied, rope_theta 1e6, eps 1e-6, 40960
/// positions).
const std::vector<ModelPreset>& model_presets();

/// The preset called `name`; throws Error(invalid_input) listing the known names.
ModelPreset find_preset(std::string_view name);

/// config.json of `p` in its family's HuggingFace format (keys sorted, as transformers writes
/// them), with torch_dtype naming `dtype` (F32, F16 or BF16).
nlohmann::json preset_config_json(const ModelPreset& p, DType dtype);

/// One tensor of a generated checkpoint: its HF name, shape and how it is initialized.
struct PresetTensor {
  /// How values are drawn: normal(0, std) noise, or 1 + noise (RMSNorm gammas).
  enum class Init { noise, one_plus_noise };
  std::string name;                ///< HF tensor name
  std::vector<std::int64_t> shape; ///< row-major, outermost first
  Init init = Init::noise;         ///< value distribution
  /// Number of elements.
  std::int64_t numel() const;
};

/// The tensors of `p`'s checkpoint in the order they are written: the embedding [vocab, hidden],
/// per layer its norms [hidden], q [heads*head_dim, hidden], k/v [kv_heads*head_dim, hidden]
/// (with [out] biases for qwen2), o [hidden, heads*head_dim], gate/up [intermediate, hidden],
/// down [hidden, intermediate]; the final norm [hidden]; lm_head [vocab, hidden] when untied.
std::vector<PresetTensor> preset_tensors(const ModelPreset& p);

namespace detail {
/// splitmix64's finalizer: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// FNV-1a of a name.
constexpr std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s)
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}
} // namespace detail

/// The key of tensor `name` under `seed` (mixes both; element i uses random_normal(key, i)).
constexpr std::uint64_t tensor_key(std::uint64_t seed, std::string_view name) {
  return detail::mix64(detail::fnv1a(name) ^ detail::mix64(seed + 0x9E3779B97F4A7C15ull));
}

/// Element `i` of the stream `key`: approximately normal(0, 1) (Irwin-Hall of four uniform
/// 16-bit lanes of one 64-bit counter hash, centred and scaled to unit variance).
constexpr double random_normal(std::uint64_t key, std::uint64_t i) {
  const std::uint64_t u = detail::mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
  const std::uint64_t s = (u & 0xFFFF) + ((u >> 16) & 0xFFFF) + ((u >> 32) & 0xFFFF) + (u >> 48);
  constexpr double kMean = 4 * 65535.0 / 2, kStd = 37837.22723720648; // sqrt((65536^2 - 1) / 3)
  return (static_cast<double>(s) - kMean) / kStd;
}

/// Caps of what make-model generates (docs/cli.md): decoder layers, vocabulary, and the size of
/// model.safetensors. They are checked, with the free disk space, before anything is written.
inline constexpr std::int64_t kMaxPresetLayers = 1024, kMaxPresetVocab = std::int64_t{1} << 22;
/// Largest model.safetensors make-model writes (64 GiB).
inline constexpr std::uint64_t kMaxRandomModelBytes = std::uint64_t{64} << 30;

/// Bytes of the tensor data of `p` stored as `dtype` (the safetensors header, a few KiB, is
/// not counted). `p` must be valid (validate()); no overflow within the caps above.
inline std::uint64_t estimate_model_bytes(const ModelPreset& p, DType dtype) {
  return static_cast<std::uint64_t>(p.parameters()) * dtype_size(dtype);
}

/// A weight-quantized checkpoint to generate (`make-model --quantize`): every decoder linear
/// (q, k, v, o, gate, up, down) written in the method's real packed layout with random
/// integers, scales and zeros; the embedding, norms, biases and lm_head stay float.
///   gptq: symmetric (every zero 2^(bits-1), stored minus 1: checkpoint_format gptq), bits 4|8,
///         g_idx written; act_order: desc_act true and g_idx a random row permutation's groups.
///   awq:  GEMM layout, 4-bit, zero_point true (random zeros in [0, 15]).
struct RandomQuant {
  std::string method;            ///< "" (float checkpoint), "gptq" or "awq"
  int bits = 4;                  ///< 4 or 8 (awq: 4)
  std::int64_t group_size = 128; ///< rows of K per group; -1 = one group over K
  bool act_order = false;        ///< gptq only
  /// Throws Error(invalid_input) naming the option for an impossible combination.
  void validate() const;
};

/// A symmetric integer grid the float weights are rounded to, as a quantization-aware-trained
/// checkpoint's are (`make-model --qat-grid`; bits 0: none). Each group of `group` consecutive
/// input values (along K, the last axis of an HF [N, K] weight) of the dense decoder linears,
/// the embedding and the lm_head becomes code * scale, codes in +-(2^(bits-1) - 1) and
/// scale = max|w| / (2^(bits-1) - 1), then the storage dtype's rounding: the grid that compile's
/// RTN with --symmetric --group-size `group` finds again, code for code, so a w4a16 / w8a16
/// compile or self-speculation draft of the checkpoint differs from it only by that rounding
/// (f32: none; bf16, int4 only: 2^-7 of a group's largest |w|; f16: 2^-10).
struct QatGrid {
  int bits = 0;             ///< 4 or 8; 0: the weights stay as drawn
  std::int64_t group = 128; ///< input values per scale: 32, 64 or 128
  /// Throws Error(invalid_input) naming --qat-grid / --group-size for other values.
  void validate() const;
};

/// How generated weights are drawn and stored.
struct RandomWeights {
  std::uint64_t seed = 0;    ///< same seed, same bytes
  DType dtype = DType::bf16; ///< F32, F16 or BF16
  double std = 0.02;         ///< noise standard deviation (real models initialize with 0.02)
  RandomQuant quant = {};    ///< quantized decoder linears (method "": float)
  QatGrid grid = {};         ///< float weights rounded to an integer grid (bits 0: none)
};

/// The quantization_config of `q` (gptq or awq), as the method's own tools write it.
nlohmann::json random_quant_config(const RandomQuant& q);

namespace detail {

/// True for a decoder linear's weight ("model.layers.N.<block>.<x>_proj.weight"), the tensors
/// --quantize packs.
inline bool is_decoder_linear(const std::string& name) {
  return name.rfind("model.layers.", 0) == 0 && name.size() > 12 &&
         name.compare(name.size() - 12, 12, "_proj.weight") == 0 &&
         name.find(".experts.") == std::string::npos;
}

/// Rounds `v` (whole groups of `g.group` consecutive values) to the grid `g` (g.bits > 0).
void round_to_grid(std::span<float> v, const QatGrid& g);

/// True for the tensors --qat-grid rounds: the dense decoder linears, the embedding, the lm_head.
bool on_qat_grid(const std::string& name);

/// A packed tensor of a quantized linear: name, dtype, shape and its bytes.
struct PackedTensor {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
};

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// The checkpoint tensors of HF linear `name` [N, K] under `q`, drawn from `key`.
std::vector<PackedTensor> random_quant_linear(const std::string& name, std::int64_t N,
                                              std::int64_t K, const RandomQuant& q,
                                              std::uint64_t key, double std);

} // namespace detail

/// What write_random_model wrote.
struct MakeModelReport {
  std::int64_t parameters = 0;  ///< elements of every tensor
  std::uint64_t file_bytes = 0; ///< size of model.safetensors
};

/// Writes `dir`/config.json and `dir`/model.safetensors (streamed, about 4 MiB of buffers) for
/// `p` with weights drawn by `w`; `dir` must exist. `progress(done, total)` is called after
/// each tensor. Each file is written atomically (OutputFile). Throws tpullm::Error on a bad preset
/// or dtype and on I/O failure.
MakeModelReport
write_random_model(const ModelPreset& p, const RandomWeights& w, const std::filesystem::path& dir,
                   const std::function<void(std::size_t, std::size_t)>& progress = {});

} // namespace tpullm::frontend
