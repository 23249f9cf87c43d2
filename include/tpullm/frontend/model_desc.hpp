#pragma once
/// A framework-agnostic description of a llama-shaped decoder: dims, RoPE, norms, quantization,
/// and for every weight a WeightRef (a zero-copy view into the checkpoint), validated against the
/// config (presence, dtype, shape) by load_model(). Downstream code (Top builders, interpreter)
/// sees only slots (layer.q, layer.mlp_norm, ...), never HuggingFace names.
///
/// Decoder layer (x: [L, hidden]):
///   h  = x + o( attn( rope(qk_norm(q(attn_norm(x)) + q_bias)), rope(qk_norm(k(..) + k_bias)),
///                     v(..) + v_bias ) ) + o_bias
///   y  = h + down( silu(gate(mlp_norm(h))) * up(mlp_norm(h)) )
///        (a sparse layer: h + the routed experts of mlp_norm(h), frontend/moe_config.hpp)
/// logits = lm_head(final_norm(x_last)).

#include "tpullm/conversion/ggml_types.hpp"
#include "tpullm/frontend/families.hpp"
#include "tpullm/frontend/hf_config.hpp"
#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/frontend/text_files.hpp"
#include "tpullm/support/error.hpp"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace tpullm::frontend {

/// How a plain tensor is laid out.
///   vector: [n] (norm gamma, bias);
///   out_in: [out_features, in_features] row-major, the HF nn.Linear orientation (y = x W^T);
///   table:  [vocab, hidden] row-major, rows gathered by token id (embedding).
enum class WeightLayout { vector, out_in, table };

/// Packed-integer weight formats (all pack 32/bits values per int32, low bits first).
///   gptq: qweight [K/pack, N] (packed along K), qzeros [groups, N/pack] (packed along N),
///         sequential order; stored zero = real zero - zero_offset.
///   awq:  qweight [K, N/pack], qzeros [groups, N/pack], both packed along N with the
///         interleaved order 0,2,4,6,1,3,5,7 (conversion::kAwqOrder; 4-bit only); no zero offset.
///   compressed: compressed-tensors pack-quantized, checked in its own layout (weight_packed
///         [N, K/pack] packed along K with values stored + 2^(bits-1), weight_scale [N, groups]
///         F16 / BF16 / F32, weight_zero_point [N/pack, groups] packed along N, stored +
///         2^(bits-1), absent when symmetric; weight_g_idx [K] optional) and then held
///         transposed, once, in the GPTQ layout with exact zeros: weight_packed is word for
///         word the transpose of a GPTQ qweight [K/pack, N] (both pack K sequentially and store
///         the unsigned value), weight_zero_point of qzeros [groups, N/pack], weight_scale of
///         scales [groups, N] (bits unchanged). Nothing is dequantized.
enum class QuantFormat { gptq, awq, compressed };

/// A plain (unquantized) float tensor (F32, F16 or BF16) and its layout.
struct PlainWeight {
  /// The stored tensor; shape [n], [out, in] or [vocab, hidden] according to `layout`.
  TensorView tensor;
  /// Orientation of the stored data.
  WeightLayout layout = WeightLayout::vector;
};

/// A GPTQ/AWQ quantized linear y = x W^T, W: [N=out_features, K=in_features] logically.
/// Dequantization of logical W^T[k][n]: g = g_idx ? g_idx[k] : k / group_size;
///   w = (q[k][n] - (z[g][n] + zero_offset)) * scales[g][n]
/// with q, z the unpacked unsigned `bits`-bit values (z = 2^(bits-1) - zero_offset when qzeros
/// is absent, i.e. AWQ without zero points).
struct QuantizedWeight {
  QuantFormat format = QuantFormat::gptq;
  /// 4 or 8.
  int bits = 4;
  /// K rows per group (config group_size, or K when the config says -1).
  std::int64_t group_size = 0;
  /// ceil(K / group_size): rows of scales / qzeros.
  std::int64_t groups = 0;
  /// K: input features.
  std::int64_t in_features = 0;
  /// N: output features.
  std::int64_t out_features = 0;
  /// Added to the unpacked stored zero (1 for GPTQ v1 checkpoints, else 0).
  int zero_offset = 0;
  /// Symmetric quantization (informational; the stored zeros are authoritative).
  bool sym = true;
  /// GPTQ act-order (desc_act): g_idx is not k / group_size.
  bool act_order = false;
  /// int32; gptq [K/pack, N], awq [K, N/pack], pack = 32 / bits.
  TensorView qweight;
  /// float (F16 usually) [groups, N].
  TensorView scales;
  /// int32 [groups, N/pack]; absent only for AWQ with zero_point=false.
  std::optional<TensorView> qzeros;
  /// int32 [K], values in [0, groups); GPTQ only, optional unless act_order.
  std::optional<TensorView> g_idx;
  /// True when g_idx is absent or equals k / group_size for every k.
  bool g_idx_trivial = true;
};

/// A matrix stored as a GGUF tensor's ggml blocks (conversion/ggml_blocks.hpp): `rows` rows of
/// `cols` elements, each row cols / block_elems blocks along the row, row-major, so a linear is
/// [N = out_features, K = in_features] (the HF orientation) and a table [vocab, hidden]. The
/// bytes are a zero-copy view into the mapped file, or owned (a permuted copy of llama's q / k).
struct GgmlWeight {
  conversion::GgmlType type = conversion::GgmlType::q8_0;
  /// N (linear) or vocab (table).
  std::int64_t rows = 0;
  /// K (linear) or hidden (table): elements of one row.
  std::int64_t cols = 0;
  /// rows * ggml_row_bytes(type, cols) bytes.
  std::span<const std::byte> bytes;
  /// Owner of `bytes` (the mapped file, or a copy).
  std::shared_ptr<const void> keepalive;
  /// The GGUF tensor name ("blk.0.attn_q.weight").
  std::string name;
  /// The file, for error messages.
  std::string source;
  /// out_in for a linear, table for an embedding.
  WeightLayout layout = WeightLayout::out_in;
  /// "<source>: tensor '<name>'".
  std::string where() const { return str_cat(source, ": tensor '", name, "'"); }
};

/// One weight slot: absent, a plain tensor, a quantized linear, or ggml blocks.
struct WeightRef {
  std::variant<std::monostate, PlainWeight, QuantizedWeight, GgmlWeight> storage;

  /// False for an absent optional slot (e.g. q_bias of llama).
  bool present() const noexcept { return !std::holds_alternative<std::monostate>(storage); }
  /// True for a quantized linear (GPTQ / AWQ layouts, or ggml blocks).
  bool is_quantized() const noexcept {
    return std::holds_alternative<QuantizedWeight>(storage) ||
           std::holds_alternative<GgmlWeight>(storage);
  }
  /// True for ggml blocks from a GGUF file.
  bool is_ggml() const noexcept { return std::holds_alternative<GgmlWeight>(storage); }
  /// True when the slot is stored [out, in] and read with transpose_b (plain and ggml weights;
  /// GPTQ / AWQ linears are logical [in, out]).
  bool stored_out_in() const noexcept {
    return std::holds_alternative<PlainWeight>(storage) || is_ggml();
  }
  /// The ggml blocks; throws Error(internal) otherwise.
  const GgmlWeight& ggml() const {
    const auto* p = std::get_if<GgmlWeight>(&storage);
    check(p != nullptr, ErrorKind::internal, "WeightRef", "not a ggml weight");
    return *p;
  }
  /// The plain tensor; throws Error(internal) if absent or quantized.
  const PlainWeight& plain() const {
    const auto* p = std::get_if<PlainWeight>(&storage);
    check(p != nullptr, ErrorKind::internal, "WeightRef", "not a plain weight");
    return *p;
  }
  /// The GPTQ / AWQ linear; throws Error(internal) otherwise.
  const QuantizedWeight& quantized() const {
    const auto* p = std::get_if<QuantizedWeight>(&storage);
    check(p != nullptr, ErrorKind::internal, "WeightRef", "not a quantized weight");
    return *p;
  }
  /// Shortcut for plain().tensor.
  const TensorView& tensor() const { return plain().tensor; }
  /// Stored name (plain: tensor name; quantized: the qweight tensor name); "" when absent.
  std::string name() const;
};

/// One routed expert's SwiGLU linears (plain, [out, in]): gate, up [expert_intermediate, hidden];
/// down [hidden, expert_intermediate].
struct ExpertWeights {
  WeightRef gate, up, down;
};

/// The routed MLP of a sparse layer: router [experts, hidden] (plain, [out, in]) and the experts
/// in index order. Empty (no router) for a dense layer.
struct MoeWeights {
  WeightRef router;
  std::vector<ExpertWeights> experts;
};

/// The weights of one decoder layer. Linears are [out, in] (plain) or QuantizedWeight.
struct LayerWeights {
  /// [hidden] RMSNorm gamma before attention.
  WeightRef attn_norm;
  /// q: [heads*head_dim, hidden]; k, v: [kv_heads*head_dim, hidden]; o: [hidden, heads*head_dim].
  WeightRef q, k, v, o;
  /// Optional biases: q [heads*head_dim], k/v [kv_heads*head_dim], o [hidden].
  WeightRef q_bias, k_bias, v_bias, o_bias;
  /// Optional per-head RMSNorm gammas [head_dim] applied to q / k before RoPE (qwen3).
  WeightRef q_norm, k_norm;
  /// [hidden] RMSNorm gamma before the MLP.
  WeightRef mlp_norm;
  /// gate, up: [intermediate, hidden]; down: [hidden, intermediate] (absent in a sparse layer).
  WeightRef gate, up, down;
  /// The routed experts of a sparse layer (MoeConfig::sparse_layer); router absent otherwise.
  MoeWeights moe;
  /// True when this layer's MLP is routed through experts.
  bool sparse() const noexcept { return moe.router.present(); }
};

/// Model dimensions.
struct ModelDims {
  std::int64_t hidden = 0;
  std::int64_t intermediate = 0;
  std::int64_t layers = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t vocab = 0;
  /// The longest sequence the model is meant for: max_position_embeddings, or for yarn RoPE
  /// original_max_position_embeddings * factor when larger (Qwen2.5 configs keep 32768 beside a
  /// yarn factor of 4). Bounds every compiled seq_length.
  std::int64_t max_position = 0;
  /// heads * head_dim (may differ from hidden).
  std::int64_t q_dim() const noexcept { return heads * head_dim; }
  /// kv_heads * head_dim.
  std::int64_t kv_dim() const noexcept { return kv_heads * head_dim; }
};

/// A validated model: config-derived parameters plus views of every weight.
struct ModelDesc {
  ModelFamily family = ModelFamily::llama;
  /// Checkpoint directory.
  std::filesystem::path dir;
  ModelDims dims;
  RopeConfig rope;
  /// Per-frequency divisors of inv_freq [head_dim / 2] applied after rope.type (a GGUF's
  /// rope_freqs tensor, which llama.cpp's converter writes for llama3 scaling); empty for none.
  std::vector<float> rope_freq_factors;
  /// RMSNorm epsilon (all norms).
  double norm_eps = 1e-6;
  /// Per layer, its sliding window in positions (0: full attention); empty: none anywhere.
  std::vector<std::int64_t> sliding_windows;
  /// lm_head shares the embedding table (lm_head refers to the same tensor as embedding).
  bool tie_word_embeddings = false;
  /// q/k/v have biases; o has a bias.
  bool qkv_bias = false, o_bias = false;
  /// Per-head q/k RMSNorm before RoPE.
  bool qk_norm = false;
  /// Quantization of the layer linears (method none: all plain).
  QuantConfig quant;
  /// Routed experts (layout none for a dense model); which layers are sparse.
  MoeConfig moe;
  /// Beginning-of-sequence token id, when the config gives one.
  std::optional<std::int64_t> bos_token_id;
  /// End-of-sequence token ids (possibly several).
  std::vector<std::int64_t> eos_token_ids;
  /// torch_dtype from the config, when given.
  std::optional<DType> torch_dtype;
  /// [vocab, hidden], layout table.
  WeightRef embedding;
  /// One entry per decoder layer.
  std::vector<LayerWeights> layers;
  /// [hidden].
  WeightRef final_norm;
  /// [vocab, hidden] out_in (equal to the embedding tensor when tied).
  WeightRef lm_head;
  /// Tensors in the checkpoint not used by the model (only with allow_unused_tensors).
  std::vector<std::string> unused_tensors;
  /// The parsed config.json.
  HfConfig config;
  /// The checkpoint the views point into (views also keep their files mapped on their own);
  /// null for a GGUF source.
  std::shared_ptr<const Checkpoint> checkpoint;
  /// The GGUF file a model was loaded from (frontend/gguf_model.hpp); empty for a checkpoint
  /// folder.
  std::filesystem::path source_file;
  /// The text side carried inside the source (a GGUF's vocabulary and chat template), or nullopt
  /// when it sits beside config.json as files (frontend::read_text_files(dir)).
  std::optional<TextFiles> text;
};

/// Options for load_model / describe_model.
struct LoadOptions {
  /// Accept checkpoint tensors the model does not use (listed in ModelDesc::unused_tensors)
  /// instead of failing; "*.rotary_emb.inv_freq" and a tied "lm_head.weight" are always ignored.
  bool allow_unused_tensors = false;
  /// Check every g_idx entry is in [0, groups) and compute g_idx_trivial (reads K ints/linear),
  /// and that every GPTQ zero point is representable (reads the small qzeros tensors).
  bool check_g_idx_values = true;
  /// How the safetensors files are held: mapped (default) or read into memory (`--no-mmap`,
  /// immune to the files changing during the run; see support/mapped_file.hpp).
  FileAccess access = FileAccess::map;
};

namespace detail {

class DescBuilder {
public:
  DescBuilder(const HfConfig& c, const Checkpoint& ck, const LoadOptions& o)
      : cfg(c), ckpt(ck), opts(o) {}

  const TensorView& need(const std::string& name, std::string_view why);
  const TensorView* maybe(const std::string& name);

  static void expect_shape(const TensorView& v, std::vector<std::int64_t> want,
                           std::string_view what) {
    check(v.shape == want, ErrorKind::invalid_input, v.where(), "shape ", shape_str(v.shape),
          ", expected ", shape_str(want), " (", what, ")");
  }
  static void expect_float(const TensorView& v) {
    check(v.dtype == DType::f32 || v.dtype == DType::f16 || v.dtype == DType::bf16,
          ErrorKind::unsupported, v.where(), "dtype ", dtype_name(v.dtype),
          " is not supported for a float weight (F32, F16, BF16)");
  }
  static void expect_i32(const TensorView& v) {
    check(v.dtype == DType::i32, ErrorKind::invalid_input, v.where(), "dtype ", dtype_name(v.dtype),
          ", expected I32 (packed quantized data)");
  }

  WeightRef plain(const std::string& name, std::vector<std::int64_t> shape, WeightLayout layout,
                  std::string_view what);
  WeightRef optional_plain(const std::string& name, bool expected, std::int64_t n,
                           std::string_view what) {
    if (!expected)
      return {};
    return plain(name, {n}, WeightLayout::vector, what);
  }

  /// A linear with K inputs, N outputs at `prefix` (the module name, e.g.
  /// "model.layers.0.mlp.up_proj"): float, or quantized as the config decides for that module.
  WeightRef linear(const std::string& prefix, std::int64_t k, std::int64_t n,
                   std::string_view what);

  /// The tensors of a quantized linear at `prefix` under `lq`, checked against its layout.
  WeightRef quantized(const std::string& prefix, const LinearQuant& lq, std::int64_t k,
                      std::int64_t n, std::string_view what);

  /// The [cols, rows] transpose of a row-major [rows, cols] view (its elements' bits kept),
  /// owning its memory; name and source are kept for error messages.
  static TensorView transposed(const TensorView& t);

  const HfConfig& cfg;
  const Checkpoint& ckpt;
  const LoadOptions& opts;
  std::set<std::string, std::less<>> used;
};

} // namespace detail

/// The model-level facts of `cfg` in a ModelDesc without weights: family, dims, rope, norm eps,
/// tied embeddings, biases, q/k norm, quantization, experts, special token ids, torch dtype and
/// the config itself. Every source's loader (describe_model, load_gguf_model) starts from it.
ModelDesc describe_config(const HfConfig& cfg);

/// Builds the ModelDesc of `ckpt` under `cfg`, checking every expected tensor's presence, dtype
/// and shape (errors name the file, the tensor, and expected vs actual shape), and that no tensor
/// is left unused (unless opts.allow_unused_tensors).
ModelDesc describe_model(const HfConfig& cfg, std::shared_ptr<const Checkpoint> ckpt,
                         const LoadOptions& opts = {});

/// Loads a model source: a checkpoint folder (config.json + safetensors), a GGUF file, or a
/// folder holding no config.json and exactly one .gguf file (e.g. model.gguf beside goldens).
/// Anything else is one Error(invalid_input) line saying what was expected.
ModelDesc load_model(const std::filesystem::path& path, const LoadOptions& opts = {});

/// The GGUF file `path` names (itself, or the one .gguf in a folder without config.json), or
/// nullopt when `path` is a checkpoint folder; throws as load_model for anything else.
std::optional<std::filesystem::path> gguf_source(const std::filesystem::path& path);

} // namespace tpullm::frontend
