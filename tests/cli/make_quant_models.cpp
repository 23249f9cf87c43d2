// Builds the quantized test checkpoints of every direct-through variant, with their goldens:
//   tpullm-make-quant-models OUT_DIR MODELS_DIR
// For each variant, OUT_DIR/<variant>/ is a GPTQ / AWQ checkpoint (config.json with its
// quantization_config, model.safetensors) and OUT_DIR/<variant>-float/ the same model with every
// linear dequantized to f32. The linears' integers, scales and zero points are chosen here (by
// round-to-nearest of the float model MODELS_DIR/llama-gqa, whose other tensors are kept) and
// packed into the checkpoint words from the formats' definitions below, without the importer's
// unpacking code. OUT_DIR/<variant>/goldens.safetensors holds the float model's logits on the
// golden scenarios of llama-gqa (same prompts; decode tokens greedy under the float model),
// computed by the f64 Top interpreter from the float checkpoint (the path `verify --level top`
// holds to transformers' goldens at 1e-4 on the float test models).
//
// Formats (int32 words little-endian; b bits, pack = 32 / b, value i at bits [b*i, b*i + b)):
//   GPTQ qweight [K/pack, N]: word (r, n) value i = q[pack*r + i][n]
//        qzeros  [G, N/pack]: word (g, c) value i = zero[g][pack*c + i] - 1 (v1) or exact (v2)
//        scales [G, N] f16, g_idx [K] i32 (row k in group g_idx[k])
//   AWQ  qweight [K, N/8]: word (k, c) nibble i = q[k][8c + order[i]], order 0,2,4,6,1,3,5,7
//        qzeros as qweight's rows (zero_point true), or none: every zero is 8
//   compressed-tensors pack-quantized (signed values s stored as s + 2^(b-1) = the unsigned q):
//        weight_packed [N, K/pack]: word (n, r) value i = q[pack*r + i][n]       (along K)
//        weight_zero_point [N/pack, G] (asymmetric only): word (c, g) value i = zero[g][pack*c + i]
//        weight_scale [N, G] (F16, BF16 or F32), weight_shape [2] I64 = [N, K]
//        weight_g_idx [K] I32 (actorder "group" only): row k in group g_idx[k]
//   AutoRound writes the GPTQ layout (auto_round:auto_gptq: v1 zeros; auto_round: exact) or the
//   AWQ one (auto_round:auto_awq).
//   w[k][n] = (q[k][n] - zero[g][n]) * scale[g][n], g = g_idx[k]; HF weight[n][k] = w[k][n].
// Per-layer overrides (mixed checkpoints): a module may keep its float weight (the float twin
// then has the base model's tensor) or use other bits / group than the config-wide ones; the
// quantization_config says so in the method's own words (AutoRound extra_config, GPTQModel
// dynamic, AWQ modules_to_not_convert, compressed-tensors ignore).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "../frontend/frontend_test_util.hpp"
#include "tpullm/frontend/goldens.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/interpreted_stages.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/support/float16.hpp"

namespace fs = std::filesystem;
using fe_test::Entry;

namespace {

/// Bits / group of one module in a mixed checkpoint; bits 16 = left in float.
struct Override {
  int bits = 4;
  int group = 32;
  int sym = -1; // -1: the variant's; 0 / 1: asymmetric / symmetric
};

/// One checkpoint kind.
struct Variant {
  std::string name;
  std::string method;     // "gptq", "awq", "auto-round" or "compressed-tensors"
  int bits = 4;           // 4 or 8
  int group = 32;         // rows per group; -1 = one group over K
  bool sym = false;       // zero = 2^(bits-1) everywhere
  bool act_order = false; // a random permuting g_idx (GPTQ desc_act)
  bool v2 = false;        // GPTQ checkpoint_format gptq_v2 (zeros exact)
  bool zero_point = true; // AWQ: qzeros stored
  bool write_g_idx = true;
  bool shared_perm = false; // act-order: one permutation per layer input (q/k/v, gate/up), as
                            // GPTQ's Hessian order gives; else one per projection
  std::string layout = "";  // "gptq" | "awq" | "ct" (default: from method)
  std::string packing = ""; // AutoRound packing_format ("" = none written)
  std::string scale_dtype = "F16";
  std::map<std::string, Override> overrides = {}; // module name -> bits / group (16: float)
  bool quant_lm_head = false;

  std::string the_layout() const {
    if (!layout.empty())
      return layout;
    if (method == "awq" || packing == "auto_round:auto_awq")
      return "awq";
    if (method == "compressed-tensors")
      return "ct";
    return "gptq";
  }
  /// Stored zeros are zero - 1 (GPTQ v1, AutoRound auto_gptq).
  bool v1() const {
    return the_layout() == "gptq" && !v2 &&
           (method == "gptq" || packing.empty() || packing == "auto_round:auto_gptq");
  }
};

/// splitmix64: the same stream on every platform (std distributions are not portable).
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(next() % n); }
};

std::string bytes_of(const void* p, std::size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

/// A quantized linear W: [K, N] in plain form, chosen from the float weight.
struct Plain {
  std::int64_t K = 0, N = 0, G = 0, gs = 0;
  std::vector<int> q;            // [K, N]
  std::vector<int> zero;         // [G, N]
  std::vector<float> s;          // [G, N], exact in the variant's scale dtype
  std::vector<std::int32_t> gix; // [K]
  float w(std::int64_t k, std::int64_t n) const {
    const std::int64_t g = gix[static_cast<std::size_t>(k)];
    return static_cast<float>(q[k * N + n] - zero[g * N + n]) * s[g * N + n];
  }
};

/// Round-to-nearest of HF weight `hf` [N, K] (f32) under variant `v`; `rng` draws the act-order
/// permutation.
Plain quantize(const std::vector<float>& hf, std::int64_t N, std::int64_t K, const Variant& v,
               const Override& o, Rng rng) {
  Plain p;
  p.K = K;
  p.N = N;
  p.gs = o.group == -1 ? K : o.group;
  p.G = K / p.gs;
  const int qmax = (1 << o.bits) - 1, mid = 1 << (o.bits - 1);
  const bool sym = o.sym < 0 ? v.sym : o.sym == 1;
  p.gix.resize(static_cast<std::size_t>(K));
  std::vector<std::int64_t> order(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k)
    order[static_cast<std::size_t>(k)] = k;
  if (v.act_order) // GPTQ desc_act: rows taken in a permuted order, groups along that order
    for (std::int64_t i = K - 1; i > 0; --i)
      std::swap(order[static_cast<std::size_t>(i)],
                order[static_cast<std::size_t>(rng.below(i + 1))]);
  for (std::int64_t j = 0; j < K; ++j)
    p.gix[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])] =
        static_cast<std::int32_t>(j / p.gs);
  p.q.assign(static_cast<std::size_t>(K * N), 0);
  p.zero.assign(static_cast<std::size_t>(p.G * N), 0);
  p.s.assign(static_cast<std::size_t>(p.G * N), 0);
  // v1 stores zero - 1, so its zeros must be >= 1; v2, AWQ and compressed-tensors may use 0.
  const int zlo = v.v1() ? 1 : 0;
  for (std::int64_t g = 0; g < p.G; ++g)
    for (std::int64_t n = 0; n < N; ++n) {
      float mn = 0, mx = 0, amax = 0;
      for (std::int64_t k = 0; k < K; ++k)
        if (p.gix[static_cast<std::size_t>(k)] == g) {
          const float x = hf[n * K + k];
          mn = std::min(mn, x);
          mx = std::max(mx, x);
          amax = std::max(amax, std::abs(x));
        }
      float scale;
      int z;
      if (sym) {
        scale = std::max(amax, 1e-4f) / static_cast<float>(mid - 1);
        z = mid;
      } else {
        scale = std::max(mx - mn, 1e-4f) / static_cast<float>(qmax);
        z = 0; // set below from the rounded scale
      }
      // a scale the checkpoint's dtype holds exactly (F32 scales carry f16 values)
      const float sf = v.scale_dtype == "BF16" ? tpullm::bf16_to_f32(tpullm::f32_to_bf16(scale))
                                               : tpullm::f16_to_f32(tpullm::f32_to_f16(scale));
      if (!sym)
        z = std::clamp(static_cast<int>(std::lround(-mn / sf)), zlo, qmax);
      p.s[g * N + n] = sf;
      p.zero[g * N + n] = z;
      for (std::int64_t k = 0; k < K; ++k)
        if (p.gix[static_cast<std::size_t>(k)] == g)
          p.q[k * N + n] =
              std::clamp(static_cast<int>(std::lround(hf[n * K + k] / sf)) + z, 0, qmax);
    }
  return p;
}

/// `v` (float values) as `dtype` ("F16", "BF16" or "F32") bytes; each value is exact in it.
std::string scale_bytes(const std::vector<float>& v, const std::string& dtype) {
  if (dtype == "F32")
    return bytes_of(v.data(), v.size() * 4);
  std::vector<std::uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    h[i] = dtype == "BF16" ? tpullm::f32_to_bf16(v[i]) : tpullm::f32_to_f16(v[i]);
  return bytes_of(h.data(), h.size() * 2);
}

/// Checkpoint tensors of `p` (`bits` wide) at `prefix` (e.g. model.layers.0.self_attn.q_proj)
/// under `v`.
void pack(const Plain& p, const Variant& v, int bits, const std::string& prefix,
          std::map<std::string, Entry>& out) {
  const int b = bits, pack = 32 / b;
  const std::int64_t K = p.K, N = p.N, G = p.G;
  std::vector<std::uint32_t> qw, qz;
  const std::string layout = v.the_layout();
  if (layout == "gptq") {
    qw.assign(static_cast<std::size_t>(K / pack * N), 0);
    for (std::int64_t r = 0; r < K / pack; ++r)
      for (std::int64_t n = 0; n < N; ++n)
        for (int i = 0; i < pack; ++i)
          qw[r * N + n] |= static_cast<std::uint32_t>(p.q[(pack * r + i) * N + n]) << (b * i);
    const int off = v.v1() ? 1 : 0;
    qz.assign(static_cast<std::size_t>(G * N / pack), 0);
    for (std::int64_t g = 0; g < G; ++g)
      for (std::int64_t c = 0; c < N / pack; ++c)
        for (int i = 0; i < pack; ++i)
          qz[g * (N / pack) + c] |= static_cast<std::uint32_t>(p.zero[g * N + pack * c + i] - off)
                                    << (b * i);
    out[prefix + ".qweight"] = {"I32", {K / pack, N}, bytes_of(qw.data(), qw.size() * 4)};
    out[prefix + ".qzeros"] = {"I32", {G, N / pack}, bytes_of(qz.data(), qz.size() * 4)};
    if (v.write_g_idx)
      out[prefix + ".g_idx"] = {"I32", {K}, bytes_of(p.gix.data(), p.gix.size() * 4)};
  } else if (layout == "awq") {
    static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    qw.assign(static_cast<std::size_t>(K * N / 8), 0);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t c = 0; c < N / 8; ++c)
        for (int i = 0; i < 8; ++i)
          qw[k * (N / 8) + c] |= static_cast<std::uint32_t>(p.q[k * N + 8 * c + kOrder[i]])
                                 << (4 * i);
    out[prefix + ".qweight"] = {"I32", {K, N / 8}, bytes_of(qw.data(), qw.size() * 4)};
    if (v.zero_point) {
      qz.assign(static_cast<std::size_t>(G * N / 8), 0);
      for (std::int64_t g = 0; g < G; ++g)
        for (std::int64_t c = 0; c < N / 8; ++c)
          for (int i = 0; i < 8; ++i)
            qz[g * (N / 8) + c] |= static_cast<std::uint32_t>(p.zero[g * N + 8 * c + kOrder[i]])
                                   << (4 * i);
      out[prefix + ".qzeros"] = {"I32", {G, N / 8}, bytes_of(qz.data(), qz.size() * 4)};
    }
  } else { // compressed-tensors pack-quantized
    qw.assign(static_cast<std::size_t>(N * (K / pack)), 0);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t r = 0; r < K / pack; ++r)
        for (int i = 0; i < pack; ++i)
          qw[n * (K / pack) + r] |= static_cast<std::uint32_t>(p.q[(pack * r + i) * N + n])
                                    << (b * i);
    out[prefix + ".weight_packed"] = {"I32", {N, K / pack}, bytes_of(qw.data(), qw.size() * 4)};
    if (!v.sym) {
      qz.assign(static_cast<std::size_t>(N / pack * G), 0);
      for (std::int64_t c = 0; c < N / pack; ++c)
        for (std::int64_t g = 0; g < G; ++g)
          for (int i = 0; i < pack; ++i)
            qz[c * G + g] |= static_cast<std::uint32_t>(p.zero[g * N + pack * c + i]) << (b * i);
      out[prefix + ".weight_zero_point"] = {
          "I32", {N / pack, G}, bytes_of(qz.data(), qz.size() * 4)};
    }
    std::vector<float> st(static_cast<std::size_t>(N * G));
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t g = 0; g < G; ++g)
        st[n * G + g] = p.s[g * N + n];
    out[prefix + ".weight_scale"] = {v.scale_dtype, {N, G}, scale_bytes(st, v.scale_dtype)};
    const std::int64_t shape[2] = {N, K};
    out[prefix + ".weight_shape"] = {"I64", {2}, bytes_of(shape, sizeof shape)};
    if (v.act_order) // actorder "group": rows keep their order, g_idx [K] names each row's group
      out[prefix + ".weight_g_idx"] = {"I32", {K}, bytes_of(p.gix.data(), p.gix.size() * 4)};
    return;
  }
  out[prefix + ".scales"] = {"F16", {G, N}, scale_bytes(p.s, "F16")};
}

nlohmann::json quant_config(const Variant& v) {
  if (v.method == "compressed-tensors") {
    nlohmann::json w = {{"num_bits", v.bits},
                        {"type", "int"},
                        {"symmetric", v.sym},
                        {"dynamic", false},
                        {"actorder", v.act_order ? nlohmann::json("group") : nlohmann::json()},
                        {"observer", "minmax"},
                        {"strategy", v.group == -1 ? "channel" : "group"}};
    if (v.group != -1)
      w["group_size"] = v.group;
    nlohmann::json ignore = {"lm_head"};
    for (const auto& [name, o] : v.overrides)
      if (o.bits >= 16)
        ignore.push_back(name);
    return {{"quant_method", "compressed-tensors"},
            {"format", "pack-quantized"},
            {"quantization_status", "compressed"},
            {"ignore", ignore},
            {"kv_cache_scheme", nullptr},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}},
                {"weights", w},
                {"input_activations", nullptr},
                {"output_activations", nullptr}}}}}};
  }
  nlohmann::json q = {{"quant_method", v.method}, {"bits", v.bits}, {"group_size", v.group}};
  if (v.method == "gptq") {
    q["desc_act"] = v.act_order;
    q["sym"] = v.sym;
    q["checkpoint_format"] = v.v2 ? "gptq_v2" : "gptq";
    if (v.quant_lm_head)
      q["lm_head"] = true;
    nlohmann::json dyn = nlohmann::json::object();
    for (const auto& [name, o] : v.overrides) {
      std::string re;
      for (char c : name)
        re += c == '.' ? std::string("\\.") : std::string(1, c);
      if (o.bits >= 16)
        dyn["-:" + re + "$"] = nlohmann::json::object();
      else
        dyn["+:" + re + "$"] = {{"bits", o.bits}, {"group_size", o.group}};
      if (o.sym >= 0 && o.bits < 16)
        dyn["+:" + re + "$"]["sym"] = o.sym == 1;
    }
    if (!dyn.empty())
      q["dynamic"] = dyn;
  } else if (v.method == "awq") {
    q["zero_point"] = v.zero_point;
    q["version"] = "gemm";
    nlohmann::json keep = nlohmann::json::array();
    for (const auto& [name, o] : v.overrides)
      keep.push_back(name); // AWQ can only leave modules float
    if (!keep.empty())
      q["modules_to_not_convert"] = keep;
  } else { // auto-round
    q["sym"] = v.sym;
    q["data_type"] = "int";
    if (!v.packing.empty())
      q["packing_format"] = v.packing;
    nlohmann::json extra = nlohmann::json::object();
    for (const auto& [name, o] : v.overrides)
      extra[name] = o.bits >= 16 ? nlohmann::json{{"bits", 16}, {"data_type", "float"}}
                                 : nlohmann::json{{"bits", o.bits}, {"group_size", o.group}};
    for (const auto& [name, o] : v.overrides)
      if (o.sym >= 0 && o.bits < 16)
        extra[name]["sym"] = o.sym == 1;
    if (v.quant_lm_head)
      extra["lm_head"] = {{"bits", v.bits}, {"group_size", v.group}};
    if (!extra.empty())
      q["extra_config"] = extra;
  }
  return q;
}

/// The logits of the float model in `dir` on the scenarios of `base` (same prompts; greedy
/// decode tokens of its own), as a goldens.safetensors file.
std::string goldens_of(const fs::path& dir, const tpullm::frontend::Goldens& base) {
  using namespace tpullm;
  const auto desc = frontend::load_model(dir);
  frontend::StageParams params;
  params.validate(desc.dims.max_position);
  runtime::InterpretedStages exec(frontend::build_top_modules(desc, params));
  const runtime::SessionDims dims{desc.dims.layers, desc.dims.hidden, desc.dims.kv_heads,
                                  desc.dims.head_dim, desc.dims.vocab};
  runtime::Session session(exec, dims, params);
  const std::int64_t V = desc.dims.vocab;
  std::map<std::string, Entry> out;
  auto argmax_last = [&](const std::vector<float>& l) {
    const auto* row = l.data() + l.size() - static_cast<std::size_t>(V);
    return static_cast<std::int32_t>(std::max_element(row, row + V) - row);
  };
  auto put_f32 = [&](const std::string& name, const std::vector<float>& v) {
    out[name] = {
        "F32", {static_cast<std::int64_t>(v.size()) / V, V}, bytes_of(v.data(), v.size() * 4)};
  };
  auto put_i32 = [&](const std::string& name, const std::vector<std::int32_t>& v) {
    out[name] = {"I32", {static_cast<std::int64_t>(v.size())}, bytes_of(v.data(), v.size() * 4)};
  };
  auto run = [&](const std::string& n, const frontend::GoldenScenario& g) {
    std::vector<float> pre = session.prefill(g.prompt, !g.last_only);
    std::vector<std::int32_t> toks;
    std::vector<float> dec;
    std::int32_t next = argmax_last(pre);
    for (std::size_t i = 0; i < g.decode_tokens.size(); ++i) {
      toks.push_back(next);
      const auto l = session.decode(next);
      dec.insert(dec.end(), l.begin(), l.end());
      next = argmax_last(l);
    }
    put_i32(n + ".prompt", g.prompt);
    put_f32(n + (g.last_only ? ".last_logits" : ".prefill_logits"), pre);
    put_i32(n + ".decode_tokens", toks);
    put_f32(n + ".decode_logits", dec);
  };
  run("a", base.a);
  run("b", base.b);
  session.reset();
  run("c", base.c);
  return fe_test::make_safetensors(out);
}

/// A broken copy of the checkpoint in `src` at `dst`: config edited by `cfg`, tensors by `ts`.
void broken(const fs::path& src, const fs::path& dst,
            const std::function<void(nlohmann::json&)>& cfg,
            const std::function<void(std::map<std::string, Entry>&)>& ts) {
  fs::create_directories(dst);
  auto c = nlohmann::json::parse(fe_test::read_file(src / "config.json"));
  cfg(c);
  fe_test::write_file(dst / "config.json", c.dump(2));
  std::map<std::string, Entry> e;
  const auto file = tpullm::frontend::SafetensorsFile::open(src / "model.safetensors");
  for (const auto& [name, t] : file.tensors())
    e[name] = Entry{std::string(tpullm::frontend::dtype_name(t.dtype)), t.shape,
                    bytes_of(t.bytes.data(), t.bytes.size())};
  ts(e);
  fe_test::write_file(dst / "model.safetensors", fe_test::make_safetensors(e));
  fs::copy_file(src / "goldens.safetensors", dst / "goldens.safetensors");
}

/// The refused kinds: each a config or tensor the importer must name in a one-line error.
void make_broken(const fs::path& out) {
  const fs::path gptq = out / "gptq4-act-asym", gptq8 = out / "gptq8-sym", awq = out / "awq4-nozp";
  const auto same_tensors = [](std::map<std::string, Entry>&) {};
  const auto same_config = [](nlohmann::json&) {};
  const auto set_q = [](const char* key, nlohmann::json value) {
    return [key, value](nlohmann::json& c) { c["quantization_config"][key] = value; };
  };
  broken(gptq, out / "bad-bits2", set_q("bits", 2), same_tensors);
  broken(gptq, out / "bad-bits3", set_q("bits", 3), same_tensors);
  broken(gptq, out / "bad-marlin", set_q("checkpoint_format", "marlin"), same_tensors);
  broken(awq, out / "bad-awq-gemv", set_q("version", "gemv"), same_tensors);
  broken(awq, out / "bad-awq-gemv-fast", set_q("version", "gemv_fast"), same_tensors);
  broken(awq, out / "bad-awq-exllama", set_q("version", "exllama"), same_tensors);
  broken(
      gptq, out / "bad-fp8",
      [](nlohmann::json& c) {
        c["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
      },
      same_tensors);
  const std::string l0 = "model.layers.0.";
  broken(gptq, out / "bad-qweight-shape", same_config, [&](auto& e) {
    Entry& q = e.at(l0 + "self_attn.k_proj.qweight");
    q.shape[0] -= 1; // [K/8 - 1, N]
    q.bytes.resize(q.bytes.size() - static_cast<std::size_t>(q.shape[1]) * 4);
  });
  broken(gptq, out / "bad-missing-scales", same_config,
         [&](auto& e) { e.erase(l0 + "mlp.down_proj.scales"); });
  broken(gptq, out / "bad-missing-g_idx", same_config,
         [&](auto& e) { e.erase(l0 + "mlp.up_proj.g_idx"); });
  broken(gptq, out / "bad-zero-range", same_config, [&](auto& e) {
    // v1 stores zero - 1: a stored 15 is the zero 16, outside [0, 15]
    Entry& z = e.at(l0 + "self_attn.o_proj.qzeros");
    const std::uint32_t word = 0xFFFFFFFFu;
    std::memcpy(z.bytes.data(), &word, 4);
  });
  broken(gptq8, out / "bad-zero-range-8bit", same_config, [&](auto& e) {
    Entry& z = e.at(l0 + "mlp.gate_proj.qzeros");
    const std::uint32_t word = 0x000000FFu; // stored 255: zero 256
    std::memcpy(z.bytes.data(), &word, 4);
  });
  broken(gptq, out / "bad-g_idx-range", same_config, [&](auto& e) {
    Entry& g = e.at(l0 + "self_attn.v_proj.g_idx");
    const std::int32_t bad = 99;
    std::memcpy(g.bytes.data() + 8, &bad, 4);
  });
  // AutoRound, compressed-tensors and the mixed checkpoints.
  const fs::path ar = out / "ar-gptq4-asym", ct = out / "ct4-asym-g32", mixed = out / "ar-mixed";
  broken(ar, out / "bad-ar-marlin", set_q("packing_format", "auto_round:gptq:marlin"),
         same_tensors);
  broken(ar, out / "bad-ar-ipex", set_q("packing_format", "ipex_awq"), same_tensors);
  broken(
      ar, out / "bad-ar-bits3",
      [](nlohmann::json& c) {
        c["quantization_config"]["extra_config"] = {{"model.layers.1.mlp.up_proj", {{"bits", 3}}}};
      },
      same_tensors);
  broken(ar, out / "bad-ar-zero-range", same_config, [&](auto& e) {
    Entry& z = e.at(l0 + "mlp.up_proj.qzeros"); // auto_gptq: v1 zeros, stored 15 is 16
    const std::uint32_t word = 0x0000000Fu;
    std::memcpy(z.bytes.data() + 4, &word, 4);
  });
  broken(mixed, out / "bad-mixed-missing-float", same_config,
         [&](auto& e) { e.erase(l0 + "self_attn.q_proj.weight"); });
  broken(
      mixed, out / "bad-mixed-float-now-quantized",
      [](nlohmann::json& c) { c["quantization_config"]["extra_config"].erase("lm_head"); },
      same_tensors); // the quantized head's tensors are then unexpected
  broken(
      ct, out / "bad-ct-fp8",
      [](nlohmann::json& c) {
        auto& w = c["quantization_config"]["config_groups"]["group_0"]["weights"];
        w["type"] = "float";
        w["num_bits"] = 8;
        c["quantization_config"]["format"] = "float-quantized";
      },
      same_tensors);
  broken(
      ct, out / "bad-ct-w8a8",
      [](nlohmann::json& c) {
        c["quantization_config"]["config_groups"]["group_0"]["input_activations"] = {
            {"num_bits", 8}, {"type", "int"}, {"strategy", "token"}, {"dynamic", true}};
      },
      same_tensors);
  broken(ct, out / "bad-ct-packed-shape", same_config, [&](auto& e) {
    Entry& q = e.at(l0 + "self_attn.k_proj.weight_packed");
    q.shape[1] -= 1; // [N, K/8 - 1]
    q.bytes.resize(static_cast<std::size_t>(q.shape[0] * q.shape[1]) * 4);
  });
  broken(ct, out / "bad-ct-missing-scale", same_config,
         [&](auto& e) { e.erase(l0 + "mlp.gate_proj.weight_scale"); });
  broken(ct, out / "bad-ct-missing-zero-point", same_config,
         [&](auto& e) { e.erase(l0 + "mlp.down_proj.weight_zero_point"); });
  broken(ct, out / "bad-ct-weight-shape", same_config, [&](auto& e) {
    Entry& sh = e.at(l0 + "self_attn.o_proj.weight_shape");
    const std::int64_t bad[2] = {128, 64};
    std::memcpy(sh.bytes.data(), bad, sizeof bad);
  });
  broken(ct, out / "bad-ct-g_idx-range", same_config, [&](auto& e) {
    std::vector<std::int32_t> g(128);
    for (std::size_t k = 0; k < g.size(); ++k)
      g[k] = static_cast<std::int32_t>(k / 32);
    g[5] = 7; // 4 groups
    e[l0 + "self_attn.q_proj.weight_g_idx"] = {"I32", {128}, bytes_of(g.data(), g.size() * 4)};
  });
  broken(gptq, out / "bad-scales-dtype", same_config, [&](auto& e) {
    Entry& s = e.at(l0 + "self_attn.q_proj.scales");
    s.dtype = "I16";
  });
}

void make(const fs::path& out, const fs::path& models) {
  fs::remove(out / ".complete"); // until this run has written everything again
  const fs::path base_dir = models / "llama-gqa";
  const auto base_cfg = nlohmann::json::parse(fe_test::read_file(base_dir / "config.json"));
  const auto base = tpullm::frontend::SafetensorsFile::open(base_dir / "model.safetensors");
  const auto base_goldens = tpullm::frontend::load_goldens(base_dir / "goldens.safetensors");
  std::vector<Variant> variants = {
      // act-order on every projection (down included), asymmetric, v1 zeros
      {"gptq4-act-asym", "gptq", 4, 32, false, true, false},
      // exact zeros (0 allowed), natural order
      {"gptq4-v2-asym", "gptq", 4, 32, false, false, true},
      // one group over K (group_size -1), symmetric, v2, act-order (a permutation with one group)
      {"gptq4-v2-sym-g1", "gptq", 4, -1, true, true, true},
      // 8-bit (4 values per word), symmetric, v1 zeros, no g_idx tensor
      {"gptq8-sym", "gptq", 8, 32, true, false, false, true, false},
      // 8-bit act-order, symmetric, v2 zeros, q/k/v and gate/up sharing their row order
      {"gptq8-act-sym-v2", "gptq", 8, 32, true, true, true, true, true, true},
      // 8-bit asymmetric, v1 zeros (the int8_asym kernel format)
      {"gptq8-asym", "gptq", 8, 32, false, false, false},
      // 8-bit asymmetric, act-order with one order per input, v2 zeros (0 allowed)
      {"gptq8-act-asym-v2", "gptq", 8, 32, false, true, true, true, true, true},
      // AWQ GEMM without zero points (signed values, zero 8)
      {"awq4-nozp", "awq", 4, 32, true, false, false, false},
  };
  // AutoRound, compressed-tensors and the mixed checkpoints.
  const auto with = [](Variant v, const std::function<void(Variant&)>& f) {
    f(v);
    return v;
  };
  const Variant ar{"", "auto-round", 4, 32, false, false, false, true, false};
  const Variant ct{"", "compressed-tensors", 4, 32, false, false, false, true, false};
  variants.push_back(with(ar, [](Variant& v) { // no packing_format: auto_gptq, v1 zeros
    v.name = "ar-gptq4-asym";
  }));
  variants.push_back(with(ar, [](Variant& v) {
    v.name = "ar-gptqmodel8-sym";
    v.packing = "auto_round:gptqmodel";
    v.bits = 8;
    v.sym = true;
  }));
  variants.push_back(with(ar, [](Variant& v) {
    v.name = "ar-awq4-asym";
    v.packing = "auto_round:auto_awq";
  }));
  variants.push_back(with(ct, [](Variant& v) { // BF16 scales, zero points packed along N
    v.name = "ct4-asym-g32";
    v.scale_dtype = "BF16";
  }));
  variants.push_back(with(ct, [](Variant& v) {
    v.name = "ct4-sym-g64";
    v.group = 64;
    v.sym = true;
    v.overrides["model.layers.0.mlp.down_proj"] = {16, 0}; // K=352: no 64-row groups
    v.overrides["model.layers.1.mlp.down_proj"] = {16, 0};
    v.overrides["model.layers.2.mlp.down_proj"] = {16, 0};
  }));
  variants.push_back(with(ct, [](Variant& v) { // actorder group: a permuting weight_g_idx
    v.name = "ct4-actorder-asym";
    v.act_order = true;
  }));
  variants.push_back(with(ct, [](Variant& v) {
    v.name = "ct8-channel-sym";
    v.bits = 8;
    v.group = -1;
    v.sym = true;
    v.scale_dtype = "F32";
  }));
  // Mixed: q float next to quantized k / v (must not fuse), an 8-bit down among 4-bit gate /
  // up, a whole float MLP, other groups, and a quantized lm_head.
  variants.push_back(with(ar, [](Variant& v) {
    v.name = "ar-mixed";
    v.overrides["model.layers.0.self_attn.q_proj"] = {16, 0};
    v.overrides["model.layers.1.mlp.down_proj"] = {8, 32, 1};
    v.overrides["model.layers.1.self_attn.o_proj"] = {4, -1};
    v.overrides["model.layers.2.mlp.gate_proj"] = {16, 0};
    v.overrides["model.layers.2.mlp.up_proj"] = {16, 0};
    v.overrides["model.layers.2.mlp.down_proj"] = {16, 0};
    v.quant_lm_head = true;
  }));
  variants.push_back(with(variants[0], [](Variant& v) { // GPTQModel dynamic
    v.name = "gptq4-dynamic";
    v.act_order = false;
    v.overrides["model.layers.0.self_attn.v_proj"] = {16, 0};
    v.overrides["model.layers.2.mlp.up_proj"] = {8, -1, 1};
  }));
  variants.push_back(with(variants[0], [](Variant& v) { // AWQ modules_to_not_convert
    v.name = "awq4-not-convert";
    v.method = "awq";
    v.act_order = false;
    v.overrides["model.layers.1.mlp.gate_proj"] = {16, 0};
    v.overrides["model.layers.1.mlp.up_proj"] = {16, 0};
    v.overrides["model.layers.1.mlp.down_proj"] = {16, 0};
  }));
  // (block, projection, input): projections of one input share its act-order row order when
  // the variant says so.
  const std::vector<std::tuple<std::string, std::string, int>> linears = {
      {"self_attn", "q_proj", 0}, {"self_attn", "k_proj", 0}, {"self_attn", "v_proj", 0},
      {"self_attn", "o_proj", 1}, {"mlp", "gate_proj", 2},    {"mlp", "up_proj", 2},
      {"mlp", "down_proj", 3}};
  fs::remove_all(out);
  fs::create_directories(out);
  std::uint64_t seed = 1;
  for (const Variant& v : variants) {
    const std::uint64_t vseed = 1000 * seed++;
    std::map<std::string, Entry> qt, ft;
    for (const auto& [name, t] : base.tensors()) {
      const bool linear = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
                          name.find("_proj.") != std::string::npos;
      if (linear)
        continue;
      Entry e{std::string(tpullm::frontend::dtype_name(t.dtype)), t.shape,
              bytes_of(t.bytes.data(), t.bytes.size())};
      qt[name] = e;
      ft[name] = e;
    }
    const std::int64_t layers = base_cfg.at("num_hidden_layers").get<std::int64_t>();
    std::uint64_t proj_index = 0;
    // One linear at `prefix` (module name), quantized under `o` or kept float (bits 16).
    const auto one = [&](const std::string& prefix, const Override& o, Rng rng) {
      const auto* t = base.find(prefix + ".weight");
      if (!t)
        throw std::runtime_error("base model has no " + prefix + ".weight");
      const Entry orig{std::string(tpullm::frontend::dtype_name(t->dtype)), t->shape,
                       bytes_of(t->bytes.data(), t->bytes.size())};
      if (o.bits >= 16) {
        qt[prefix + ".weight"] = orig;
        ft[prefix + ".weight"] = orig;
        return;
      }
      qt.erase(prefix + ".weight");
      const std::int64_t N = t->shape.at(0), K = t->shape.at(1);
      const std::vector<float> hf = t->to_f32();
      const Plain p = quantize(hf, N, K, v, o, rng);
      pack(p, v, o.bits, prefix, qt);
      std::vector<float> deq(static_cast<std::size_t>(N * K));
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t k = 0; k < K; ++k)
          deq[n * K + k] = p.w(k, n);
      ft[prefix + ".weight"] = {"F32", {N, K}, bytes_of(deq.data(), deq.size() * 4)};
    };
    const auto override_of = [&](const std::string& prefix) {
      const auto it = v.overrides.find(prefix);
      return it != v.overrides.end() ? it->second : Override{v.bits, v.group};
    };
    for (std::int64_t l = 0; l < layers; ++l)
      for (const auto& [block, proj, input] : linears) {
        const Rng rng{vseed + static_cast<std::uint64_t>(v.shared_perm ? 10 * l + input
                                                                       : 100 + proj_index++)};
        const std::string prefix = "model.layers." + std::to_string(l) + "." + block + "." + proj;
        one(prefix, override_of(prefix), rng);
      }
    if (v.quant_lm_head)
      one("lm_head", Override{v.bits, v.group}, Rng{vseed + 999});
    const fs::path qdir = out / v.name, fdir = out / (v.name + "-float");
    fs::create_directories(qdir);
    fs::create_directories(fdir);
    nlohmann::json qcfg = base_cfg;
    qcfg["quantization_config"] = quant_config(v);
    fe_test::write_file(qdir / "config.json", qcfg.dump(2));
    fe_test::write_file(qdir / "model.safetensors", fe_test::make_safetensors(qt));
    fe_test::write_file(fdir / "config.json", base_cfg.dump(2));
    fe_test::write_file(fdir / "model.safetensors", fe_test::make_safetensors(ft));
    fe_test::write_file(qdir / "goldens.safetensors", goldens_of(fdir, base_goldens));
  }
  make_broken(out);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tpullm-make-quant-models OUT_DIR MODELS_DIR\n");
    return 2;
  }
  try {
    make(argv[1], argv[2]);
    // The last file: another tree may take this folder (tests/cli/copy_fixture.cmake) once it is.
    fe_test::write_file(fs::path(argv[1]) / ".complete", "tpullm-make-quant-models\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpullm-make-quant-models: %s\n", e.what());
    return 1;
  }
  return 0;
}
