#pragma once
// Helpers for the frontend tests: temporary directories, a tiny safetensors writer and a tiny
// synthetic llama-shaped checkpoint generator.

#include "test_data_dir.hpp"
#include "tpullm/frontend/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace fe_test {

namespace fs = std::filesystem;

inline fs::path data_dir() {
  return fs::path(TPULLM_TEST_DATA_DIR);
}
inline fs::path model_dir(const std::string& name) {
  return data_dir() / "models" / name;
}

inline const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {
      "llama-gqa",          "qwen2-tied-bias",         "qwen3-headdim",
      "llama-gqa-gptq-g32", "qwen2-tied-bias-awq-g32", "qwen3moe-e16k4",
      "mixtral-e8k2"};
  return names;
}

/// A fresh directory under the system temp dir, removed on destruction.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("tpullm-fe-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const std::string& name) const { return path / name; }
};

inline void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// 8-byte little-endian length + header text + data.
inline std::string raw_safetensors(const std::string& header, const std::string& data,
                                   std::uint64_t header_len_override = UINT64_MAX) {
  std::uint64_t n = header_len_override == UINT64_MAX ? header.size() : header_len_override;
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

/// One tensor to write: dtype string, shape and raw bytes.
struct Entry {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

inline std::size_t dsize(const std::string& dt) {
  if (auto t = tpullm::frontend::parse_dtype(dt))
    return tpullm::frontend::dtype_size(*t);
  return 4;
}

/// Deterministic pseudo-random bytes for a tensor (floats in [0.5, 1.5) for float dtypes).
inline std::string fill_bytes(const std::string& dt, std::int64_t numel, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  std::string out;
  for (std::int64_t i = 0; i < numel; ++i) {
    if (dt == "F32") {
      float f = u(rng);
      out.append(reinterpret_cast<const char*>(&f), 4);
    } else if (dt == "F16") {
      std::uint16_t h = tpullm::f32_to_f16(u(rng));
      out.append(reinterpret_cast<const char*>(&h), 2);
    } else if (dt == "BF16") {
      std::uint16_t h = tpullm::f32_to_bf16(u(rng));
      out.append(reinterpret_cast<const char*>(&h), 2);
    } else {
      std::uint32_t w = rng();
      out.append(reinterpret_cast<const char*>(&w), dsize(dt));
    }
  }
  return out;
}

inline Entry make_entry(const std::string& dt, std::vector<std::int64_t> shape,
                        std::uint32_t seed = 1) {
  std::int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return Entry{dt, shape, fill_bytes(dt, n, seed)};
}

/// Serializes tensors (in name order, contiguous, header padded to 8 bytes).
inline std::string make_safetensors(const std::map<std::string, Entry>& tensors,
                                    bool with_metadata = true) {
  nlohmann::json h = nlohmann::json::object();
  if (with_metadata)
    h["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& [name, e] : tensors) {
    const std::size_t b = data.size();
    data += e.bytes;
    h[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {b, data.size()}}};
  }
  std::string header = h.dump();
  while (header.size() % 8)
    header += ' ';
  return raw_safetensors(header, data);
}

/// A tiny llama-shaped model: hidden 16, heads 4, kv 2, head_dim 4, inter 32, 2 layers, vocab 24.
struct TinyModel {
  nlohmann::json config = {{"model_type", "llama"},    {"hidden_size", 16},
                           {"intermediate_size", 32},  {"num_hidden_layers", 2},
                           {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                           {"vocab_size", 24},         {"max_position_embeddings", 128},
                           {"rms_norm_eps", 1e-5},     {"rope_theta", 10000.0},
                           {"hidden_act", "silu"},     {"tie_word_embeddings", false},
                           {"torch_dtype", "float32"}, {"bos_token_id", 1},
                           {"eos_token_id", 2}};
  std::map<std::string, Entry> tensors;

  TinyModel() {
    std::uint32_t seed = 1;
    const auto add = [&](const std::string& n, std::vector<std::int64_t> s) {
      tensors[n] = make_entry("F32", std::move(s), seed++);
    };
    add("model.embed_tokens.weight", {24, 16});
    add("model.norm.weight", {16});
    add("lm_head.weight", {24, 16});
    for (int i = 0; i < 2; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      add(p + "input_layernorm.weight", {16});
      add(p + "post_attention_layernorm.weight", {16});
      add(p + "self_attn.q_proj.weight", {16, 16});
      add(p + "self_attn.k_proj.weight", {8, 16});
      add(p + "self_attn.v_proj.weight", {8, 16});
      add(p + "self_attn.o_proj.weight", {16, 16});
      add(p + "mlp.gate_proj.weight", {32, 16});
      add(p + "mlp.up_proj.weight", {32, 16});
      add(p + "mlp.down_proj.weight", {16, 32});
    }
  }

  /// Replaces every layer linear with a GPTQ 4-bit group-8 triple (qweight/qzeros/scales and,
  /// if with_g_idx, g_idx).
  void make_gptq(bool with_g_idx, bool desc_act = false, int group = 8) {
    config["quantization_config"] = {
        {"quant_method", "gptq"}, {"bits", 4},   {"group_size", group},
        {"desc_act", desc_act},   {"sym", true}, {"checkpoint_format", "gptq"}};
    std::map<std::string, Entry> out;
    std::uint32_t seed = 100;
    for (auto& [name, e] : tensors) {
      const std::string suffix = "_proj.weight";
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        const std::string p = name.substr(0, name.size() - std::string(".weight").size());
        const std::int64_t n = e.shape[0], k = e.shape[1];
        out[p + ".qweight"] = make_entry("I32", {k / 8, n}, seed++);
        // Stored zero 7 (GPTQ v1: zero 8, symmetric); random nibbles could store 15, which
        // is zero 16 and refused by load_model.
        out[p + ".qzeros"] = make_entry("I32", {k / group, n / 8}, seed++);
        std::fill(out[p + ".qzeros"].bytes.begin(), out[p + ".qzeros"].bytes.end(), '\x77');
        out[p + ".scales"] = make_entry("F16", {k / group, n}, seed++);
        if (with_g_idx) {
          std::string g;
          for (std::int32_t i = 0; i < k; ++i) {
            const std::int32_t v =
                desc_act ? (i * 7 % static_cast<std::int32_t>(k)) / group : i / group;
            g.append(reinterpret_cast<const char*>(&v), 4);
          }
          out[p + ".g_idx"] = Entry{"I32", {k}, g};
        }
      } else {
        out[name] = e;
      }
    }
    tensors = std::move(out);
  }

  void write(const fs::path& dir) const {
    fs::create_directories(dir);
    write_file(dir / "config.json", config.dump(2));
    write_file(dir / "model.safetensors", make_safetensors(tensors));
  }
};

} // namespace fe_test
