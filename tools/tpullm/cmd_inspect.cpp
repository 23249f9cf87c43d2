// tpullm inspect FILE.bundle [--json]: what a bundle holds.
#include <variant>
#include <iostream>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "step_bytes.hpp"
#include "tpullm/conversion/lower_to_tpu.hpp"
#include "tpullm/runtime/kv_region.hpp"
#include "tpullm/runtime/text_side.hpp"
#include "tpullm/bundle/bundle.hpp"

namespace tpullm::cli {

namespace {

/// "tensor parallel: N ranks (...)\n" for a bundle split over N > 1 ranks, "" otherwise.
std::string tensor_parallel_line(const bundle::ModelInfo& m) {
  if (m.tensor_parallel <= 1)
    return {};
  return str_cat("tensor parallel: ", m.tensor_parallel,
                 " ranks (attention heads and MLP columns split; each rank keeps ",
                 frontend::tp_kv_heads(m.kv_heads, m.tensor_parallel), " of ", m.kv_heads,
                 " KV heads per position)\n");
}

/// Linears of `b` (MatMul, MatMulArgMax, MLP, MoE instructions) and those whose input is
/// rounded to int8 (act_quant: W8A8, or act-quant dynamic over integer weights).
std::pair<std::int64_t, std::int64_t> count_linears(const bundle::Bundle& b) {
  std::int64_t linears = 0, int8_x = 0;
  for (const auto& p : b.programs())
    for (const auto& in : p.instrs)
      std::visit(
          [&](const auto& o) {
            if constexpr (requires { o.act_quant; }) {
              ++linears;
              int8_x += o.act_quant.has_value();
            }
          },
          in.op);
  return {linears, int8_x};
}

} // namespace

int cmd_inspect(const std::vector<std::string>& args) {
  std::string file;
  bool json = false, instrs = false, verify = false;
  po::options_description o("tpullm inspect FILE.bundle [--json] [--instructions]");
  o.add_options()("help,h", "show this help")("bundle", po::value(&file)->required(),
                                              "bundle file")(
      "json", po::bool_switch(&json), "print one JSON object instead of text")(
      "instructions", po::bool_switch(&instrs),
      "also list every function's instructions with their plans and buffers")(
      "verify", po::bool_switch(&verify),
      "also read the whole weight blob and check every chunk's CRC-32C (docs/bundle.md)");
  bool no_mmap = false;
  o.add(bundle_read_options(no_mmap));
  po::variables_map vm;
  if (!parse_command_line(args, o, "bundle", vm))
    return kOk;
  const auto b = bundle::Bundle::open(file, no_mmap ? FileAccess::read : FileAccess::map);
  std::optional<bundle::WeightCheck> checked;
  if (verify)
    checked = b->verify_weights(0);
  const auto& m = b->model();
  std::int64_t weight_bytes = 0;
  std::map<std::string, std::int64_t> by_dtype;
  for (const auto& w : b->weights())
    for (const auto& p : w.parts) {
      weight_bytes += static_cast<std::int64_t>(p.bytes.size());
      by_dtype[std::string(ir::name(p.dtype))] += static_cast<std::int64_t>(p.bytes.size());
    }
  nlohmann::ordered_json j;
  j["file"] = file;
  j["format_version"] = b->version();
  j["compiler"] = b->compiler();
  j["file_bytes"] = b->file_bytes();
  j["model"] = {{"family", m.family},
                {"source", m.source},
                {"mode", m.mode},
                {"layers", m.layers},
                {"hidden", m.hidden},
                {"intermediate", m.intermediate},
                {"heads", m.heads},
                {"kv_heads", m.kv_heads},
                {"head_dim", m.head_dim},
                {"vocab", m.vocab},
                {"seq_length", m.params.seq_length},
                {"max_input_length", m.params.max_input_length},
                {"decode_lengths", m.params.decode_lengths()},
                {"prefill_lengths", m.params.prefill_lengths()},
                {"prefill_kv", m.params.with_history},
                {"bos_token_id", m.bos_token_id},
                {"eos_token_ids", m.eos_token_ids},
                {"tensor_parallel", m.tensor_parallel}};
  // The text side as compiled in (loaded, so a bundle whose tokenizer would not load says so).
  std::string text_line = "none (the checkpoint had no tokenizer.json: token ids only)";
  if (!m.text.empty()) {
    const auto side = runtime::load_text_side(*b, file);
    j["text"] = {{"tokenizer_bytes", m.text.tokenizer_json.size()},
                 {"vocab", side.tokenizer.vocab_size()},
                 {"chat_template", side.chat_template.has_value()},
                 {"generation_config", !m.text.generation_config_json.empty()},
                 {"stop_ids", side.stop_ids}};
    text_line = "tokenizer " + std::to_string(side.tokenizer.vocab_size()) + " tokens (" +
                std::to_string(m.text.tokenizer_json.size()) + " B), chat template " +
                (side.chat_template ? "yes" : "no") + ", generation_config " +
                (m.text.generation_config_json.empty() ? "no" : "yes") + ", stop ids " +
                j["text"]["stop_ids"].dump();
  } else {
    j["text"] = nullptr;
  }
  const auto& t = b->target();
  j["target"] = {{"name", t.name},
                 {"cores", t.cores},
                 {"local_memory", t.local_memory},
                 {"alignment", t.alignment}};
  const std::int64_t kv_per_token = 2 * b->kv().layers * b->kv().row_bytes; // keys and values
  // Sliding-window layers' caches kept as rings by the executor (runtime/kv_region.hpp).
  const auto rings = runtime::kv_rings_of(b->programs(), b->kv());
  j["memory"] = {{"kv_cache_bytes", b->kv().bytes()},
                 {"kv_memory_bytes", rings.bytes(b->kv())},
                 {"kv_capacity", b->kv().capacity},
                 {"kv_bytes_per_token", kv_per_token},
                 {"kv_dtype", std::string(conversion::kv_dtype_spelling(b->kv().dtype))},
                 {"max_arena_bytes", b->max_arena()},
                 {"arena_lower_bound_bytes", b->arena_lower_bound()},
                 {"max_local_bytes", b->max_local()}};
  j["weights"] = {{"count", b->weights().size()},
                  {"bytes", weight_bytes},
                  {"blob_bytes", b->blob_bytes()},
                  {"bytes_by_dtype", by_dtype},
                  {"checksum", "crc32c"},
                  {"checksum_chunk_bytes", b->weight_chunk_bytes()},
                  {"checksum_chunks", b->weight_checksums().size()}};
  // The draft model compiled in for self-speculation (compile --draft-mode), or null.
  std::string draft_line = "none (compile --draft-mode adds one for --draft self)";
  if (const auto& d = b->draft()) {
    const auto& dm = d->model();
    j["draft"] = {{"mode", dm.mode},
                  {"layers", dm.layers},
                  {"bytes", d->file_bytes()},
                  {"functions", d->programs().size()},
                  {"kv_cache_bytes", d->kv().bytes()}};
    draft_line = std::to_string(dm.layers) + " of " + std::to_string(m.layers) + " layers in " +
                 dm.mode + ", " + std::to_string(d->file_bytes() >> 20) + " MiB inside the " +
                 "weights, KV cache " + std::to_string(d->kv().bytes() >> 20) + " MiB";
    const auto [dl, dx] = count_linears(*d);
    j["draft"]["act_quant"] = {{"linears", dl}, {"int8_input", dx}};
    if (dx > 0)
      draft_line +=
          ", " + std::to_string(dx) + " of " + std::to_string(dl) + " linears with int8 inputs";
    draft_line += " (run --draft self)";
  } else {
    j["draft"] = nullptr;
  }
  if (checked)
    j["weights"]["verified"] = {
        {"chunks", checked->chunks}, {"bytes", checked->bytes}, {"seconds", checked->seconds}};
  const auto [linears, int8_x] = count_linears(*b);
  j["act_quant"] = {{"linears", linears}, {"int8_input", int8_x}};
  const std::string acts_line = int8_x == 0
                                    ? "f32 into every linear"
                                    : std::to_string(int8_x) + " of " + std::to_string(linears) +
                                          " linears round their input to int8 (" +
                                          (m.mode == "int8" ? "W8A8" : "act-quant dynamic") + ")";
  // Sliding-window attention (config.json's sliding_window), where a stage function has one.
  const auto windows = sliding_windows(*b);
  std::string attn_line = "full causal attention on every layer";
  if (!windows.empty()) {
    std::int64_t lo = INT64_MAX, hi = 0;
    for (const auto& [layer, w] : windows)
      lo = std::min(lo, w), hi = std::max(hi, w);
    attn_line = "sliding window of " +
                (lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi)) +
                " positions on " + std::to_string(windows.size()) + " of " +
                std::to_string(m.layers) + " layers";
    std::int64_t ring_lo = INT64_MAX, ring_hi = 0, ringed = 0;
    for (std::int64_t r : rings.rows)
      if (r > 0)
        ring_lo = std::min(ring_lo, r), ring_hi = std::max(ring_hi, r), ++ringed;
    attn_line += ringed == 0 ? " (the KV cache keeps every position)"
                             : " (" + std::to_string(ringed) + " of them keep a ring of " +
                                   (ring_lo == ring_hi
                                        ? std::to_string(ring_lo)
                                        : std::to_string(ring_lo) + "-" + std::to_string(ring_hi)) +
                                   " positions in memory)";
  }
  auto& jr = j["kv_rings"] = nlohmann::ordered_json::object();
  for (std::size_t l = 0; l < rings.rows.size(); ++l)
    if (rings.rows[l] > 0)
      jr[std::to_string(l)] = rings.rows[l];
  auto& jw = j["sliding_windows"] = nlohmann::ordered_json::object();
  for (const auto& [layer, w] : windows)
    jw[std::to_string(layer)] = w;
  auto& fns = j["functions"] = nlohmann::ordered_json::array();
  for (const auto& p : b->programs()) {
    std::int64_t groups = 0, last = -1;
    for (const auto& in : p.instrs)
      if (in.plan.group >= 0 && in.plan.group != last)
        ++groups, last = in.plan.group;
    nlohmann::ordered_json f = {{"name", p.name},
                                {"stage", std::string(ir::enum_name(p.info.stage))},
                                {"layer", p.info.layer},
                                {"args", nlohmann::ordered_json::array()},
                                {"results", nlohmann::ordered_json::array()},
                                {"instructions", p.instrs.size()},
                                {"layer_groups", groups},
                                {"arena_bytes", p.info.memory ? p.info.memory->arena : 0},
                                {"local_bytes", p.info.memory ? p.info.memory->local : 0},
                                {"strategy", p.info.memory ? p.info.memory->strategy : ""}};
    for (const auto& a : p.args)
      f["args"].push_back(a.type.str());
    for (const auto& r : p.results)
      f["results"].push_back(r.type.str());
    if (instrs) {
      auto& is = f["code"] = nlohmann::ordered_json::array();
      for (const auto& in : p.instrs) {
        nlohmann::ordered_json ij = {
            {"op", std::string(ir::op_name(in.kind()))},
            {"group", in.plan.group},
            {"tile",
             {std::string(ir::enum_name(in.plan.tile.dim)), in.plan.tile.size, in.plan.tile.count}},
            {"split", {std::string(ir::enum_name(in.plan.split.dim)), in.plan.split.parts}}};
        for (const auto& r : in.results)
          ij["results"].push_back({{"type", r.type.str()},
                                   {"region", std::string(ir::enum_name(r.buffer.region))},
                                   {"offset", r.buffer.offset},
                                   {"size", r.buffer.size}});
        is.push_back(std::move(ij));
      }
    }
    fns.push_back(std::move(f));
  }
  if (json) {
    // Names and paths are bytes, not always UTF-8: invalid sequences are shown as U+FFFD
    // instead of failing the output.
    std::cout << j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return kOk;
  }
  auto mib = [](std::int64_t v) {
    return std::to_string(v / (1 << 20)) + "." + std::to_string(v % (1 << 20) * 10 / (1 << 20)) +
           " MiB";
  };
  std::cout << file << ": tpullm bundle v" << b->version() << " (" << b->compiler() << "), "
            << mib(b->file_bytes()) << "\n"
            << "model   " << m.family << " '" << m.source << "' mode " << m.mode << ": " << m.layers
            << " layers, hidden " << m.hidden << ", heads " << m.heads << "/" << m.kv_heads << " x "
            << m.head_dim << ", vocab " << m.vocab << "\n"
            << "stages  seq_length " << m.params.seq_length << ", max_input_length "
            << m.params.max_input_length << ", prefill variants "
            << j["model"]["prefill_lengths"].dump() << ", decode variants "
            << j["model"]["decode_lengths"].dump() << ", prefill_kv "
            << (m.params.with_history ? "yes" : "no") << "\n"
            << tensor_parallel_line(m) << "text    " << text_line << "\n"
            << "target  " << t.name << ": " << t.cores << " cores, local memory " << t.local_memory
            << " B\n"
            << "memory  KV cache " << mib(b->kv().bytes()) << " ("
            << (rings.any() ? mib(rings.bytes(b->kv())) + " in memory with the rings, " : "")
            << b->kv().capacity << " slots, " << conversion::kv_dtype_spelling(b->kv().dtype)
            << ", " << kv_per_token << " B per token), arena " << b->max_arena()
            << " B (lower bound " << b->arena_lower_bound() << " B), local " << b->max_local()
            << " B per core\n"
            << "weights " << b->weights().size() << " tensors, " << mib(weight_bytes) << " "
            << j["weights"]["bytes_by_dtype"].dump() << "\n"
            << "draft   " << draft_line << "\n"
            << "acts    " << acts_line << "\n"
            << "attn    " << attn_line << "\n"
            << "checks  CRC-32C per " << mib(static_cast<std::int64_t>(b->weight_chunk_bytes()))
            << " chunk of the blob ("
            << (checked ? std::to_string(checked->chunks) + " chunks verified"
                        : "not verified: use --verify")
            << ")\n"
            << "functions (" << b->programs().size() << "):\n";
  for (const auto& f : fns)
    std::cout << "  " << f["name"].get<std::string>() << "  stage " << f["stage"].get<std::string>()
              << ", " << f["instructions"] << " instrs, " << f["layer_groups"] << " groups, arena "
              << f["arena_bytes"] << " B (" << f["strategy"].get<std::string>() << ")\n";
  if (instrs)
    std::cout << j["functions"].dump(1) << "\n";
  return kOk;
}

} // namespace tpullm::cli
