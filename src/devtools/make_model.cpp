// Out-of-line definitions of tpullm/devtools/make_model.hpp (compiled once into tpullm_devtools).
#include "tpullm/devtools/make_model.hpp"

#include <cmath>

namespace tpullm::frontend {

auto ModelPreset::validate() const -> void {
  const std::string where = "preset " + name;
  const std::initializer_list<std::pair<std::int64_t, const char*>> dims = {
      {hidden, "hidden"}, {intermediate, "intermediate"}, {layers, "layers"},
      {heads, "heads"},   {kv_heads, "kv_heads"},         {head_dim, "head_dim"},
      {vocab, "vocab"},   {max_position, "max_position"}};
  for (const auto& [v, what] : dims)
    check(v > 0 && v <= (std::int64_t{1} << 31), ErrorKind::invalid_input, where, what, " = ", v,
          " must be in [1, 2^31]");
  check(heads % kv_heads == 0, ErrorKind::invalid_input, where, "heads ", heads,
        " is not a multiple of kv_heads ", kv_heads);
  check(head_dim % 2 == 0, ErrorKind::invalid_input, where, "head_dim ", head_dim, " must be even");
  check(head_dim_in_config || hidden == heads * head_dim, ErrorKind::invalid_input, where,
        "hidden ", hidden, " != heads * head_dim without an explicit head_dim");
  check(family == ModelFamily::llama || family == ModelFamily::qwen2 ||
            family == ModelFamily::qwen3_moe,
        ErrorKind::unsupported, where, "family ", family_name(family),
        " has no config writer (llama, qwen2, qwen3_moe)");
  check(family != ModelFamily::qwen3_moe ||
            (experts > 0 && top_k > 0 && top_k <= experts && moe_intermediate > 0),
        ErrorKind::invalid_input, where, "a qwen3_moe preset needs 1 <= top_k (", top_k,
        ") <= experts (", experts, ") and moe_intermediate > 0");
}

const std::vector<ModelPreset>& model_presets() {
  // One preset a paragraph, by designated initializers (the fields a preset leaves out keep
  // ModelPreset's defaults); clang-format would put every field on a line of its own.
  // clang-format off
  static const std::vector<ModelPreset> presets = {
      {.name = "qwen2.5-0.5b", .family = ModelFamily::qwen2,
       .hidden = 896, .intermediate = 4864, .layers = 24, .heads = 14, .kv_heads = 2,
       .head_dim = 64, .vocab = 151936, .max_position = 32768,
       .tie_word_embeddings = true, .rms_norm_eps = 1e-6, .rope = {.theta = 1e6},
       .bos_token_id = 151643, .eos_token_id = 151643},
      {.name = "llama3.2-1b", .family = ModelFamily::llama,
       .hidden = 2048, .intermediate = 8192, .layers = 16, .heads = 32, .kv_heads = 8,
       .head_dim = 64, .head_dim_in_config = true, .vocab = 128256, .max_position = 131072,
       .tie_word_embeddings = true, .rms_norm_eps = 1e-5,
       .rope = {.type = RopeType::llama3, .theta = 5e5, .factor = 32, .low_freq_factor = 1,
                .high_freq_factor = 4, .original_max_position_embeddings = 8192},
       .bos_token_id = 128000, .eos_token_id = 128001},
      {.name = "tiny", .family = ModelFamily::llama,
       .hidden = 64, .intermediate = 128, .layers = 2, .heads = 4, .kv_heads = 2,
       .head_dim = 16, .vocab = 512, .max_position = 2048,
       .tie_word_embeddings = false, .rms_norm_eps = 1e-5, .rope = {.theta = 10000},
       .bos_token_id = 1, .eos_token_id = 2},
      {.name = "qwen3-30b-a3b", .family = ModelFamily::qwen3_moe,
       .hidden = 2048, .intermediate = 6144, .layers = 48, .heads = 32, .kv_heads = 4,
       .head_dim = 128, .head_dim_in_config = true, .vocab = 151936, .max_position = 40960,
       .tie_word_embeddings = false, .rms_norm_eps = 1e-6, .rope = {.theta = 1e6},
       .bos_token_id = 151643, .eos_token_id = 151645,
       .experts = 128, .top_k = 8, .moe_intermediate = 768}};
  // clang-format on
  return presets;
}

ModelPreset find_preset(std::string_view name) {
  std::string known;
  for (const auto& p : model_presets()) {
    if (p.name == name)
      return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw_error(ErrorKind::invalid_input, "--preset", "unknown preset '", name, "' (known: ", known,
              ")");
}

nlohmann::json preset_config_json(const ModelPreset& p, DType dtype) {
  p.validate();
  nlohmann::json j = nlohmann::json::object();
  const auto torch = [&]() -> std::string {
    switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::f64:
    case DType::i64:
    case DType::i32:
    case DType::i16:
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      break;
    }
    throw_error(ErrorKind::invalid_input, "--dtype", "weights cannot be stored as ",
                dtype_name(dtype), " (F32, F16, BF16)");
  }();
  j["attention_dropout"] = 0.0;
  j["hidden_act"] = "silu";
  j["hidden_size"] = p.hidden;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = p.intermediate;
  j["max_position_embeddings"] = p.max_position;
  j["model_type"] = std::string(family_name(p.family));
  j["num_attention_heads"] = p.heads;
  j["num_hidden_layers"] = p.layers;
  j["num_key_value_heads"] = p.kv_heads;
  j["rms_norm_eps"] = p.rms_norm_eps;
  j["rope_theta"] = p.rope.theta;
  j["tie_word_embeddings"] = p.tie_word_embeddings;
  j["torch_dtype"] = torch;
  j["use_cache"] = true;
  j["vocab_size"] = p.vocab;
  if (p.bos_token_id && *p.bos_token_id < p.vocab)
    j["bos_token_id"] = *p.bos_token_id;
  if (p.eos_token_id && *p.eos_token_id < p.vocab)
    j["eos_token_id"] = *p.eos_token_id;
  if (p.head_dim_in_config)
    j["head_dim"] = p.head_dim;
  switch (p.rope.type) {
  case RopeType::default_:
    break;
  case RopeType::linear:
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", p.rope.factor}};
    break;
  case RopeType::llama3:
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", p.rope.factor},
        {"low_freq_factor", p.rope.low_freq_factor},
        {"high_freq_factor", p.rope.high_freq_factor},
        {"original_max_position_embeddings", p.rope.original_max_position_embeddings}};
    break;
  case RopeType::yarn:
    j["rope_scaling"] = {
        {"rope_type", "yarn"},
        {"factor", p.rope.factor},
        {"original_max_position_embeddings", p.rope.original_max_position_embeddings},
        {"attention_factor", p.rope.attention_factor},
        {"beta_fast", p.rope.beta_fast},
        {"beta_slow", p.rope.beta_slow}};
    break;
  case RopeType::dynamic:
    j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", p.rope.factor}};
    break;
  }
  switch (p.family) {
  case ModelFamily::llama:
    j["architectures"] = {"LlamaForCausalLM"};
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
    break;
  case ModelFamily::qwen2:
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["max_window_layers"] = p.layers;
    j["sliding_window"] = p.max_position;
    j["use_sliding_window"] = false;
    break;
  case ModelFamily::qwen3_moe:
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["attention_bias"] = false;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::json::array();
    j["moe_intermediate_size"] = p.moe_intermediate;
    j["norm_topk_prob"] = true;
    j["num_experts"] = p.experts;
    j["num_experts_per_tok"] = p.top_k;
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
    break;
  case ModelFamily::qwen3:
  case ModelFamily::mistral:
  case ModelFamily::mixtral:
    break; // refused by validate()
  }
  return j;
}

auto PresetTensor::numel() const -> std::int64_t {
  std::int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

std::vector<PresetTensor> preset_tensors(const ModelPreset& p) {
  p.validate();
  using I = PresetTensor::Init;
  const ModelFamily f = p.family;
  const std::int64_t H = p.hidden, Q = p.heads * p.head_dim, KV = p.kv_heads * p.head_dim;
  const bool qkv_bias = f == ModelFamily::qwen2;
  std::vector<PresetTensor> t;
  t.push_back({hf_embedding_name(f), {p.vocab, H}, I::noise});
  for (std::int64_t i = 0; i < p.layers; ++i) {
    const auto lin = [&](LinearSlot s, std::int64_t out, std::int64_t in, bool bias) {
      t.push_back({hf_linear_prefix(f, i, s) + ".weight", {out, in}, I::noise});
      if (bias)
        t.push_back({hf_linear_prefix(f, i, s) + ".bias", {out}, I::noise});
    };
    t.push_back({hf_norm_name(f, i, NormSlot::attn), {H}, I::one_plus_noise});
    lin(LinearSlot::q, Q, H, qkv_bias);
    lin(LinearSlot::k, KV, H, qkv_bias);
    lin(LinearSlot::v, KV, H, qkv_bias);
    lin(LinearSlot::o, H, Q, false);
    t.push_back({hf_norm_name(f, i, NormSlot::mlp), {H}, I::one_plus_noise});
    if (f == ModelFamily::qwen3_moe) {
      t.push_back({hf_norm_name(f, i, NormSlot::q), {p.head_dim}, I::one_plus_noise});
      t.push_back({hf_norm_name(f, i, NormSlot::k), {p.head_dim}, I::one_plus_noise});
      t.push_back({hf_router_name(f, i), {p.experts, H}, I::noise});
      const std::int64_t E = p.moe_intermediate;
      for (std::int64_t e = 0; e < p.experts; ++e) {
        t.push_back({hf_expert_prefix(f, i, e, ExpertSlot::gate) + ".weight", {E, H}, I::noise});
        t.push_back({hf_expert_prefix(f, i, e, ExpertSlot::up) + ".weight", {E, H}, I::noise});
        t.push_back({hf_expert_prefix(f, i, e, ExpertSlot::down) + ".weight", {H, E}, I::noise});
      }
      continue;
    }
    lin(LinearSlot::gate, p.intermediate, H, false);
    lin(LinearSlot::up, p.intermediate, H, false);
    lin(LinearSlot::down, H, p.intermediate, false);
  }
  t.push_back({hf_final_norm_name(f), {H}, I::one_plus_noise});
  if (!p.tie_word_embeddings)
    t.push_back({hf_lm_head_name(f), {p.vocab, H}, I::noise});
  return t;
}

std::int64_t ModelPreset::parameters() const {
  std::int64_t n = 0;
  for (const auto& t : preset_tensors(*this))
    n += t.numel();
  return n;
}

auto RandomQuant::validate() const -> void {
  if (method.empty())
    return;
  check(method == "gptq" || method == "awq", ErrorKind::invalid_input, "--quantize", "'", method,
        "' is not gptq or awq");
  check(bits == 4 || bits == 8, ErrorKind::invalid_input, "--bits", "must be 4 or 8, got ", bits);
  check(method == "gptq" || bits == 4, ErrorKind::invalid_input, "--bits",
        "awq (GEMM layout) is 4-bit only, got ", bits);
  check(group_size == -1 || (group_size > 0 && group_size <= (1 << 24)), ErrorKind::invalid_input,
        "--group-size", "must be positive or -1, got ", group_size);
  check(!act_order || method == "gptq", ErrorKind::invalid_input, "--act-order",
        "is a GPTQ option (awq has no act-order)");
}

auto QatGrid::validate() const -> void {
  check(bits == 0 || bits == 4 || bits == 8, ErrorKind::invalid_input, "--qat-grid",
        "must be int4 or int8, got ", bits, " bits");
  check(bits == 0 || group == 32 || group == 64 || group == 128, ErrorKind::invalid_input,
        "--group-size", "--qat-grid takes 32, 64 or 128 (compile's group sizes), got ", group);
}

namespace detail {

void round_to_grid(std::span<float> v, const QatGrid& g) {
  const float top = static_cast<float>((1 << (g.bits - 1)) - 1);
  for (std::size_t at = 0; at + static_cast<std::size_t>(g.group) <= v.size();
       at += static_cast<std::size_t>(g.group)) {
    const std::span<float> q = v.subspan(at, static_cast<std::size_t>(g.group));
    float m = 0;
    for (float x : q)
      m = std::max(m, std::abs(x));
    if (!(m > 0))
      continue;
    const float scale = m / top;
    for (float& x : q)
      x = std::clamp(std::nearbyint(x / scale), -top, top) * scale;
  }
}

bool on_qat_grid(const std::string& name) {
  return is_decoder_linear(name) || name == "model.embed_tokens.weight" || name == "lm_head.weight";
}

} // namespace detail

nlohmann::json random_quant_config(const RandomQuant& q) {
  if (q.method == "gptq")
    return {{"quant_method", "gptq"},  {"bits", q.bits},       {"group_size", q.group_size},
            {"desc_act", q.act_order}, {"sym", true},          {"checkpoint_format", "gptq"},
            {"lm_head", false},        {"damp_percent", 0.01}, {"static_groups", false},
            {"true_sequential", true}};
  return {{"quant_method", "awq"},
          {"bits", q.bits},
          {"group_size", q.group_size},
          {"zero_point", true},
          {"version", "gemm"}};
}

} // namespace tpullm::frontend

namespace tpullm::frontend::detail {

std::vector<PackedTensor> random_quant_linear(const std::string& name, std::int64_t N,
                                              std::int64_t K, const RandomQuant& q,
                                              std::uint64_t key, double std) {
  const std::string prefix = name.substr(0, name.size() - 7); // drop ".weight"
  const std::int64_t gs = q.group_size == -1 ? K : q.group_size;
  check(K % gs == 0, ErrorKind::invalid_input, "--group-size",
        str_cat(gs, " does not divide in_features ", K, " of ", prefix));
  const std::int64_t G = K / gs;
  const int levels = 1 << q.bits, mid = levels / 2;
  std::uint64_t i = 0;
  const auto draw = [&]() { return mix64(key + (++i) * 0x9E3779B97F4A7C15ull); };
  std::vector<std::uint8_t> qv(static_cast<std::size_t>(K * N));
  for (auto& x : qv)
    x = static_cast<std::uint8_t>(draw() % static_cast<std::uint64_t>(levels));
  // uniform integers around the zero have std ~ levels / sqrt(12): scale them to `std`
  const double base = std / (levels / 3.4641016151377544);
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(G * N));
  for (auto& s : scales)
    s = f32_to_f16(
        static_cast<float>(base * (0.75 + 0.5 * static_cast<double>(draw() % 1024) / 1024.0)));
  std::vector<std::uint8_t> zeros(static_cast<std::size_t>(G * N), static_cast<std::uint8_t>(mid));
  std::vector<PackedTensor> out;
  if (q.method == "awq") {
    for (auto& z : zeros)
      z = static_cast<std::uint8_t>(draw() % 16);
    out.push_back({prefix + ".qweight", DType::i32, {K, N / 8}, bytes_of(pack_awq_rows(qv, K, N))});
    out.push_back(
        {prefix + ".qzeros", DType::i32, {G, N / 8}, bytes_of(pack_awq_rows(zeros, G, N))});
    out.push_back({prefix + ".scales", DType::f16, {G, N}, bytes_of(scales)});
    return out;
  }
  std::vector<std::int32_t> g_idx(static_cast<std::size_t>(K));
  std::vector<std::int64_t> order(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k)
    order[static_cast<std::size_t>(k)] = k;
  if (q.act_order) // rows taken in a random order; groups along that order (GPTQ desc_act)
    for (std::int64_t k = K - 1; k > 0; --k)
      std::swap(order[static_cast<std::size_t>(k)],
                order[static_cast<std::size_t>(draw() % static_cast<std::uint64_t>(k + 1))]);
  for (std::int64_t j = 0; j < K; ++j)
    g_idx[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])] =
        static_cast<std::int32_t>(j / gs);
  const int pack = 32 / q.bits;
  out.push_back({prefix + ".qweight",
                 DType::i32,
                 {K / pack, N},
                 bytes_of(pack_gptq_qweight(qv, K, N, q.bits))});
  out.push_back({prefix + ".qzeros",
                 DType::i32,
                 {G, N / pack},
                 bytes_of(pack_gptq_qzeros(zeros, G, N, q.bits, 1))});
  out.push_back({prefix + ".scales", DType::f16, {G, N}, bytes_of(scales)});
  out.push_back({prefix + ".g_idx", DType::i32, {K}, bytes_of(g_idx)});
  return out;
}

} // namespace tpullm::frontend::detail

namespace tpullm::frontend {

MakeModelReport write_random_model(const ModelPreset& p, const RandomWeights& w,
                                   const std::filesystem::path& dir,
                                   const std::function<void(std::size_t, std::size_t)>& progress) {
  w.quant.validate();
  w.grid.validate();
  check(w.grid.bits == 0 || w.quant.method.empty(), ErrorKind::invalid_input, "--qat-grid",
        "rounds a float checkpoint; it cannot be combined with --quantize");
  check(w.grid.bits != 8 || w.dtype != DType::bf16, ErrorKind::invalid_input, "--qat-grid",
        "int8 codes times a scale do not survive bf16's 8 significant bits; use --dtype f16 or "
        "f32");
  nlohmann::json config = preset_config_json(p, w.dtype);
  const bool quantized = !w.quant.method.empty();
  check(!quantized || p.family != ModelFamily::qwen3_moe, ErrorKind::invalid_input, "--quantize",
        "quantized mixture-of-experts checkpoints are not supported");
  if (quantized)
    config["quantization_config"] = random_quant_config(w.quant);
  {
    OutputFile out(dir / "config.json");
    out.write(config.dump(2) + "\n");
    out.commit();
  }
  const auto tensors = preset_tensors(p);
  SafetensorsWriter st(dir / "model.safetensors");
  st.set_metadata("format", "pt");
  const auto quant_parts = [&](const PresetTensor& t) {
    return detail::random_quant_linear(t.name, t.shape.at(0), t.shape.at(1), w.quant,
                                       tensor_key(w.seed, t.name), w.std);
  };
  for (const auto& t : tensors) {
    if (quantized && detail::is_decoder_linear(t.name)) {
      // declared from a small stand-in of the same shapes: the parts' shapes only
      const std::int64_t N = t.shape.at(0), K = t.shape.at(1), pack = 32 / w.quant.bits;
      const std::int64_t G = K / (w.quant.group_size == -1 ? K : w.quant.group_size);
      check(K % (w.quant.group_size == -1 ? K : w.quant.group_size) == 0 && K % pack == 0 &&
                N % pack == 0,
            ErrorKind::invalid_input, "--group-size",
            str_cat("in_features ", K, " / out_features ", N, " of ", t.name,
                    " do not fit the packing (group ", w.quant.group_size, ", ", pack,
                    " values a word)"));
      const std::string prefix = t.name.substr(0, t.name.size() - 7);
      if (w.quant.method == "awq") {
        st.declare(prefix + ".qweight", DType::i32, {K, N / 8});
        st.declare(prefix + ".qzeros", DType::i32, {G, N / 8});
        st.declare(prefix + ".scales", DType::f16, {G, N});
      } else {
        st.declare(prefix + ".qweight", DType::i32, {K / pack, N});
        st.declare(prefix + ".qzeros", DType::i32, {G, N / pack});
        st.declare(prefix + ".scales", DType::f16, {G, N});
        st.declare(prefix + ".g_idx", DType::i32, {K});
      }
      continue;
    }
    if (w.grid.bits > 0 && detail::on_qat_grid(t.name))
      check(t.shape.size() == 2 && t.shape.back() % w.grid.group == 0, ErrorKind::invalid_input,
            "--group-size",
            str_cat("the ", t.shape.back(), " input values of ", t.name,
                    " do not split into groups of ", w.grid.group));
    st.declare(t.name, w.dtype, t.shape);
  }
  MakeModelReport report;
  const std::size_t esize = dtype_size(w.dtype);
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;
  std::vector<std::byte> buf(static_cast<std::size_t>(kChunk) * esize);
  std::vector<float> vals(static_cast<std::size_t>(kChunk));
  for (std::size_t ti = 0; ti < tensors.size(); ++ti) {
    const PresetTensor& t = tensors[ti];
    if (quantized && detail::is_decoder_linear(t.name)) {
      for (const auto& part : quant_parts(t))
        st.write(part.name, std::span<const std::byte>(part.bytes));
      report.parameters += t.numel();
      if (progress)
        progress(ti + 1, tensors.size());
      continue;
    }
    const std::uint64_t key = tensor_key(w.seed, t.name);
    const double base = t.init == PresetTensor::Init::one_plus_noise ? 1.0 : 0.0;
    const std::int64_t n = t.numel();
    // (a chunk holds whole rows' groups: kChunk and every row length are multiples of them)
    const bool grid = w.grid.bits > 0 && detail::on_qat_grid(t.name);
    for (std::int64_t at = 0; at < n; at += kChunk) {
      const std::int64_t len = std::min(kChunk, n - at);
      for (std::int64_t k = 0; k < len; ++k)
        vals[static_cast<std::size_t>(k)] = static_cast<float>(
            base + w.std * random_normal(key, static_cast<std::uint64_t>(at + k)));
      if (grid)
        detail::round_to_grid(std::span<float>(vals.data(), static_cast<std::size_t>(len)), w.grid);
      for (std::int64_t k = 0; k < len; ++k) {
        const float v = vals[static_cast<std::size_t>(k)];
        std::byte* dst = buf.data() + k * static_cast<std::int64_t>(esize);
        if (w.dtype == DType::bf16) {
          const std::uint16_t h = f32_to_bf16(v);
          std::memcpy(dst, &h, 2);
        } else if (w.dtype == DType::f16) {
          const std::uint16_t h = f32_to_f16(v);
          std::memcpy(dst, &h, 2);
        } else {
          std::memcpy(dst, &v, 4);
        }
      }
      st.write(t.name,
               std::span<const std::byte>(buf.data(), static_cast<std::size_t>(len) * esize));
    }
    report.parameters += n;
    if (progress)
      progress(ti + 1, tensors.size());
  }
  st.finish();
  report.file_bytes = st.header().size() + st.data_size();
  return report;
}

} // namespace tpullm::frontend
