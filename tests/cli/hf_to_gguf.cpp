// Converts an HF test checkpoint folder (config.json + model.safetensors, F32 or F16 tensors)
// into a GGUF file laid out as llama.cpp's convert_hf_to_gguf.py writes it:
//   tpullm-hf-to-gguf [--synthetic-vocab] OUT_DIR MODELS_DIR MODEL...
// writes OUT_DIR/<model>/model.gguf with MODELS_DIR/<model>/goldens.{safetensors,json} beside.
// Architectures: llama (llama, mistral, mixtral; q / k rows permuted as LlamaModel.permute),
// qwen2, qwen3, qwen3moe. Tensors keep their dtype (F32 stays F32, F16 stays F16); experts are
// stacked into ffn_{gate,up,down}_exps with ne [in, out, experts]. No tokenizer is written, unless
// --synthetic-vocab: then a byte-level BPE vocabulary of the model's vocab_size (the 256 byte
// tokens as GPT-2 spells them, then "[PADn]" unused tokens, no merges), only so that llama.cpp
// loads the file (it refuses a GGUF without tokenizer.ggml.model); bench/vs-llama-cpp.sh uses it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tpullm/conversion/ggml_types.hpp"
#include "tpullm/frontend/gguf_writer.hpp"
#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/support/float16.hpp"

namespace fs = std::filesystem;
using tpullm::conversion::GgmlType;
using tpullm::frontend::DType;
using tpullm::frontend::GgufWriter;
using tpullm::frontend::SafetensorsFile;
using tpullm::frontend::TensorView;

namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::runtime_error(msg);
}

struct Converter {
  const SafetensorsFile& st;
  GgufWriter& w;

  const TensorView& get(const std::string& name) const {
    const TensorView* t = st.find(name);
    if (t == nullptr)
      fail(st.source() + ": missing tensor '" + name + "'");
    return *t;
  }
  static GgmlType type_of(const TensorView& t) {
    if (t.dtype == DType::f32)
      return GgmlType::f32;
    if (t.dtype == DType::f16)
      return GgmlType::f16;
    fail(t.where() + ": only F32 and F16 are converted");
  }
  static std::vector<std::int64_t> ne_of(const std::vector<std::int64_t>& shape) {
    return {shape.rbegin(), shape.rend()};
  }
  /// One tensor, as stored (HF [out, in] is GGUF ne [in, out]: the same bytes), except that a
  /// 1-D F16 tensor (a norm weight, a bias) is widened to F32, as convert_hf_to_gguf.py writes
  /// them (llama.cpp's CPU multiply takes only f32 norm weights).
  void copy(const std::string& hf, const std::string& gguf) {
    const TensorView& t = get(hf);
    if (t.shape.size() == 1 && t.dtype == DType::f16) {
      std::vector<float> v(static_cast<std::size_t>(t.shape[0]));
      for (std::size_t i = 0; i < v.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, t.bytes.data() + 2 * i, 2);
        v[i] = tpullm::f16_to_f32(h);
      }
      w.add_tensor_f32(gguf, ne_of(t.shape), v);
      return;
    }
    w.add_tensor(gguf, type_of(t), ne_of(t.shape), t.bytes);
  }
  /// LlamaModel.permute: stored row h*d + 2i + j = HF row h*d + j*d/2 + i (d the head size).
  void copy_permuted(const std::string& hf, const std::string& gguf, std::int64_t heads) {
    const TensorView& t = get(hf);
    const std::int64_t rows = t.shape[0];
    const std::size_t row_bytes = t.bytes.size() / static_cast<std::size_t>(rows);
    const std::int64_t d = rows / heads;
    std::vector<std::byte> out(t.bytes.size());
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < d / 2; ++i)
        for (std::int64_t j = 0; j < 2; ++j) {
          const std::int64_t dst = h * d + 2 * i + j, src = h * d + j * (d / 2) + i;
          std::memcpy(out.data() + static_cast<std::size_t>(dst) * row_bytes,
                      t.bytes.data() + static_cast<std::size_t>(src) * row_bytes, row_bytes);
        }
    w.add_tensor(gguf, type_of(t), ne_of(t.shape), out);
  }
  /// Experts 0..E-1 of one projection stacked: ne [in, out, experts].
  void stack(const std::string& prefix, const std::string& suffix, std::int64_t experts,
             const std::string& gguf) {
    std::vector<std::byte> out;
    std::vector<std::int64_t> shape;
    GgmlType type = GgmlType::f32;
    for (std::int64_t x = 0; x < experts; ++x) {
      const TensorView& t = get(prefix + std::to_string(x) + suffix);
      if (x == 0) {
        shape = t.shape;
        type = type_of(t);
      } else if (t.shape != shape || type_of(t) != type) {
        fail(t.where() + ": experts differ in shape or dtype");
      }
      out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    }
    std::vector<std::int64_t> ne = ne_of(shape);
    ne.push_back(experts);
    w.add_tensor(gguf, type, ne, out);
  }
};

/// GPT-2's byte-to-unicode table: printable bytes stand for themselves, the rest for U+0100 on.
std::string byte_token(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    int n = 0;
    for (int c = 0; c < b; ++c)
      if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255)))
        ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

void write_synthetic_vocab(GgufWriter& w, std::int64_t vocab) {
  if (vocab < 256)
    fail("--synthetic-vocab needs vocab_size >= 256, got " + std::to_string(vocab));
  std::vector<std::string> tokens;
  std::vector<std::int32_t> types;
  for (std::int64_t i = 0; i < vocab; ++i) {
    tokens.push_back(i < 256 ? byte_token(static_cast<int>(i)) : "[PAD" + std::to_string(i) + "]");
    types.push_back(i < 256 ? 1 : 5); // normal, unused
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {});
  w.set_u32("tokenizer.ggml.bos_token_id", 0);
  w.set_u32("tokenizer.ggml.eos_token_id", 1);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
}

void convert(const fs::path& src, const fs::path& dst, bool synthetic_vocab) {
  nlohmann::json cfg;
  {
    std::ifstream in(src / "config.json");
    if (!in)
      fail((src / "config.json").string() + ": cannot read");
    in >> cfg;
  }
  const std::string model_type = cfg.at("model_type");
  std::string arch;
  if (model_type == "llama" || model_type == "mistral" || model_type == "mixtral")
    arch = "llama";
  else if (model_type == "qwen2" || model_type == "qwen3")
    arch = model_type;
  else if (model_type == "qwen3_moe")
    arch = "qwen3moe";
  else
    fail(src.string() + ": model_type '" + model_type + "' is not converted");

  const auto st = SafetensorsFile::open(src / "model.safetensors");
  fs::create_directories(dst);
  GgufWriter w(dst / "model.gguf");
  Converter c{st, w};
  const auto i64 = [&](const char* k) { return cfg.at(k).get<std::int64_t>(); };
  const auto u32 = [&](const std::string& k, std::int64_t v) {
    w.set_u32(arch + "." + k, static_cast<std::uint32_t>(v));
  };
  const std::int64_t layers = i64("num_hidden_layers"), heads = i64("num_attention_heads");
  const std::int64_t kv_heads = cfg.value("num_key_value_heads", heads);
  double theta = 10000.0;
  if (cfg.contains("rope_theta") && cfg["rope_theta"].is_number())
    theta = cfg["rope_theta"].get<double>();
  else if (cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object() &&
           cfg["rope_parameters"].contains("rope_theta"))
    theta = cfg["rope_parameters"]["rope_theta"].get<double>();
  std::int64_t experts = 0, used = 0;
  if (model_type == "mixtral") {
    experts = i64("num_local_experts");
    used = i64("num_experts_per_tok");
  } else if (model_type == "qwen3_moe") {
    experts = i64("num_experts");
    used = i64("num_experts_per_tok");
  }

  w.set_string("general.architecture", arch);
  w.set_string("general.name", src.filename().string());
  u32("block_count", layers);
  u32("context_length", i64("max_position_embeddings"));
  u32("embedding_length", i64("hidden_size"));
  u32("feed_forward_length", i64("intermediate_size"));
  u32("attention.head_count", heads);
  u32("attention.head_count_kv", kv_heads);
  w.set_f32(arch + ".rope.freq_base", static_cast<float>(theta));
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon",
            static_cast<float>(cfg.at("rms_norm_eps").get<double>()));
  if (cfg.contains("head_dim") && cfg["head_dim"].is_number()) {
    u32("attention.key_length", i64("head_dim"));
    u32("attention.value_length", i64("head_dim"));
  }
  if (experts > 0) {
    u32("expert_count", experts);
    u32("expert_used_count", used);
  }
  if (model_type == "qwen3_moe") {
    u32("expert_feed_forward_length", i64("moe_intermediate_size"));
    // llama.cpp's qwen3moe graph always renormalizes the top-k weights; a checkpoint that does
    // not (norm_topk_prob false) says so with the key llama.cpp has for it.
    if (!cfg.value("norm_topk_prob", true))
      w.set_bool(arch + ".expert_weights_norm", false);
  }
  w.set_u32("general.file_type", 0);
  if (synthetic_vocab)
    write_synthetic_vocab(w, i64("vocab_size"));

  c.copy("model.embed_tokens.weight", "token_embd.weight");
  c.copy("model.norm.weight", "output_norm.weight");
  if (st.contains("lm_head.weight") && !cfg.value("tie_word_embeddings", false))
    c.copy("lm_head.weight", "output.weight");
  std::vector<std::int64_t> dense;
  if (cfg.contains("mlp_only_layers") && cfg["mlp_only_layers"].is_array())
    dense = cfg["mlp_only_layers"].get<std::vector<std::int64_t>>();
  for (std::int64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string b = "blk." + std::to_string(i) + ".";
    const auto opt = [&](const std::string& hf, const std::string& g) {
      if (st.contains(p + hf))
        c.copy(p + hf, b + g);
    };
    c.copy(p + "input_layernorm.weight", b + "attn_norm.weight");
    if (arch == "llama") {
      c.copy_permuted(p + "self_attn.q_proj.weight", b + "attn_q.weight", heads);
      c.copy_permuted(p + "self_attn.k_proj.weight", b + "attn_k.weight", kv_heads);
      if (st.contains(p + "self_attn.q_proj.bias")) {
        c.copy_permuted(p + "self_attn.q_proj.bias", b + "attn_q.bias", heads);
        c.copy_permuted(p + "self_attn.k_proj.bias", b + "attn_k.bias", kv_heads);
      }
    } else {
      c.copy(p + "self_attn.q_proj.weight", b + "attn_q.weight");
      c.copy(p + "self_attn.k_proj.weight", b + "attn_k.weight");
      opt("self_attn.q_proj.bias", "attn_q.bias");
      opt("self_attn.k_proj.bias", "attn_k.bias");
    }
    c.copy(p + "self_attn.v_proj.weight", b + "attn_v.weight");
    opt("self_attn.v_proj.bias", "attn_v.bias");
    c.copy(p + "self_attn.o_proj.weight", b + "attn_output.weight");
    opt("self_attn.o_proj.bias", "attn_output.bias");
    opt("self_attn.q_norm.weight", "attn_q_norm.weight");
    opt("self_attn.k_norm.weight", "attn_k_norm.weight");
    c.copy(p + "post_attention_layernorm.weight", b + "ffn_norm.weight");
    const bool is_dense = std::find(dense.begin(), dense.end(), i) != dense.end();
    if (model_type == "mixtral") {
      const std::string e = p + "block_sparse_moe.";
      c.copy(e + "gate.weight", b + "ffn_gate_inp.weight");
      c.stack(e + "experts.", ".w1.weight", experts, b + "ffn_gate_exps.weight");
      c.stack(e + "experts.", ".w3.weight", experts, b + "ffn_up_exps.weight");
      c.stack(e + "experts.", ".w2.weight", experts, b + "ffn_down_exps.weight");
    } else if (experts > 0 && !is_dense) {
      const std::string e = p + "mlp.";
      c.copy(e + "gate.weight", b + "ffn_gate_inp.weight");
      c.stack(e + "experts.", ".gate_proj.weight", experts, b + "ffn_gate_exps.weight");
      c.stack(e + "experts.", ".up_proj.weight", experts, b + "ffn_up_exps.weight");
      c.stack(e + "experts.", ".down_proj.weight", experts, b + "ffn_down_exps.weight");
    } else {
      c.copy(p + "mlp.gate_proj.weight", b + "ffn_gate.weight");
      c.copy(p + "mlp.up_proj.weight", b + "ffn_up.weight");
      c.copy(p + "mlp.down_proj.weight", b + "ffn_down.weight");
    }
  }
  w.finish();
  for (const char* g : {"goldens.safetensors", "goldens.json"})
    if (fs::exists(src / g))
      fs::copy_file(src / g, dst / g, fs::copy_options::overwrite_existing);
}

} // namespace

int main(int argc, char** argv) {
  const bool synthetic = argc > 1 && std::string(argv[1]) == "--synthetic-vocab";
  const int first = synthetic ? 2 : 1;
  if (argc < first + 3) {
    std::fprintf(stderr, "usage: %s [--synthetic-vocab] OUT_DIR MODELS_DIR MODEL...\n", argv[0]);
    return 2;
  }
  try {
    for (int a = first + 2; a < argc; ++a)
      convert(fs::path(argv[first + 1]) / argv[a], fs::path(argv[first]) / argv[a], synthetic);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpullm-hf-to-gguf: %s\n", e.what());
    return 1;
  }
  return 0;
}
