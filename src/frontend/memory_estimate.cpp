// Out-of-line definitions of tpullm/frontend/memory_estimate.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/memory_estimate.hpp"

#include "tpullm/memory/kv_geometry.hpp"
#include "tpullm/memory/kv_rings.hpp"

namespace tpullm::frontend::detail {

double layer_elements(const ModelDims& d) {
  const double h = static_cast<double>(d.hidden), i = static_cast<double>(d.intermediate);
  const double q = static_cast<double>(d.heads) * static_cast<double>(d.head_dim);
  const double kv = static_cast<double>(d.kv_heads) * static_cast<double>(d.head_dim);
  return h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + q + 2 * kv + h +
         2 * static_cast<double>(d.head_dim);
}

namespace {
/// Elements of decoder layer l of `d`.
double elements_of_layer(const ModelDesc& d, std::int64_t l) {
  const ModelDims& m = d.dims;
  const double h = static_cast<double>(m.hidden), i = static_cast<double>(m.intermediate);
  const double experts = static_cast<double>(d.moe.experts);
  const double ei = static_cast<double>(d.moe.expert_intermediate);
  return layer_elements(m) + (d.moe.sparse_layer(l) ? experts * (3 * h * ei + h) - 3 * h * i : 0.0);
}
} // namespace

double all_layer_elements(const ModelDesc& d) {
  double n = 0;
  for (std::int64_t l = 0; l < d.dims.layers; ++l)
    n += elements_of_layer(d, l);
  return n;
}

double max_layer_elements(const ModelDesc& d) {
  double n = 0;
  for (std::int64_t l = 0; l < d.dims.layers; ++l)
    n = std::max(n, elements_of_layer(d, l));
  return n;
}

std::string human_bytes(double b) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  std::ostringstream os;
  os.precision(b < 10 ? 2 : 3);
  os << b << " " << units[u];
  return os.str();
}

std::optional<double> read_limit_file(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stod(s);
}

} // namespace tpullm::frontend::detail

namespace tpullm::frontend {

MemoryEstimate estimate_memory(const ModelDesc& d, const StageParams& p, Workload w,
                               FileAccess access, ir::DType kv_dtype) {
  const ModelDims& m = d.dims;
  const double seq = static_cast<double>(p.seq_length);
  const double L = static_cast<double>(p.max_input_length);
  const double hd = static_cast<double>(m.head_dim);
  const double kv_dim = static_cast<double>(m.kv_heads) * hd;
  const double q_heads = static_cast<double>(m.heads);
  const double h = static_cast<double>(m.hidden), inter = static_cast<double>(m.intermediate);
  const double vocab = static_cast<double>(m.vocab), layers = static_cast<double>(m.layers);
  const double decode_variants = static_cast<double>(p.decode_lengths().size());
  MemoryEstimate e;
  e.block_modules = 1 + (p.with_history ? 1 : 0) + decode_variants;

  // RoPE cos and sin tables [seq, head_dim / 2] f32, shared by every block module.
  e.seq_length += 2 * seq * (hd / 2) * 4;
  if (access == FileAccess::read && d.checkpoint)
    for (const auto& shard : d.checkpoint->shards())
      e.weights += static_cast<double>(shard.data_size());
  if (w == Workload::build)
    return e;
  if (w == Workload::run) {
    // Converted weights (at most f32 per element, shared by every stage program; a tied
    // embedding is the lm_head's weight, one copy), the KV cache [seq, kv_heads, head_dim] in
    // its dtype for k and v of every layer, and one call's activations.
    const double tables = d.tie_word_embeddings ? 1 : 2;
    e.weights += 4 * (detail::all_layer_elements(d) + tables * vocab * h + h);
    // A sliding-window layer's cache is a ring (memory/kv_rings.hpp): its window plus the
    // longest call's rows, in whole pages, when that is shorter than the sequence.
    const std::int64_t row = memory::kv_row_bytes(kv_dtype, m.kv_heads, m.head_dim);
    const memory::KvGeometry g{m.layers, p.seq_length, row};
    const auto rings = memory::plan_kv_rings(
        g, d.sliding_windows,
        std::vector<std::int64_t>(static_cast<std::size_t>(std::max<std::int64_t>(m.layers, 0)),
                                  p.max_input_length),
        memory::kRingPage);
    double positions = 0;
    for (std::int64_t l = 0; l < m.layers; ++l)
      positions += static_cast<double>(rings.kept(l, p.seq_length));
    e.seq_length += 2 * positions * static_cast<double>(row);
    e.max_input_length += 4 * 4 * L * (3 * h + 3 * inter + 2 * kv_dim + vocab);
    return e;
  }

  // The interpreter widens every weight a module uses to f64, per module (block modules hold
  // their own copy of the layer weights and of the RoPE tables).
  const double blocks = layers * e.block_modules;
  e.weights += 8 * (e.block_modules * detail::all_layer_elements(d) + 3 * vocab * h + h);
  e.seq_length += blocks * 2 * seq * (hd / 2) * 8;
  // KV cache: k and v [seq, kv_heads, head_dim] f32 per layer, plus the history copies of the
  // largest call (f32 host tensors, their f64 interpreter form, and k/v concatenated in f64).
  e.seq_length += 2 * layers * seq * kv_dim * 4 + 2 * seq * kv_dim * (4 + 8 + 8);
  // Prefill activations: attention scores [q_heads, L, seq] and the per-token rows.
  e.max_input_length +=
      8 * (q_heads * L * seq + 4 * L * (3 * h + 3 * inter + 2 * kv_dim) + L * vocab);
  return e;
}

MemoryEstimate estimate_calibrate_memory(const ModelDesc& d, const StageParams& p,
                                         FileAccess access, int sessions, double store_bytes) {
  // One session's tables, caches and activations are what interpreting costs less its weights.
  MemoryEstimate one = estimate_memory(d, p, Workload::interpret, FileAccess::map);
  const double n = std::max(1, sessions);
  MemoryEstimate e = estimate_memory(d, p, Workload::build, access); // a read checkpoint
  e.block_modules = 1; // no weight copies per module: the --decode-chunk advice does not apply
  e.seq_length = n * one.seq_length;
  e.max_input_length = n * one.max_input_length;
  e.weights += std::max(store_bytes, n * 8 * detail::max_layer_elements(d));
  return e;
}

double memory_limit_bytes() {
  double limit = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                 static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (!(limit > 0))
    limit = std::numeric_limits<double>::infinity();
  std::ifstream cg("/proc/self/cgroup");
  for (std::string line; std::getline(cg, line);) {
    if (line.rfind("0::", 0) == 0)
      if (auto v = detail::read_limit_file("/sys/fs/cgroup" + line.substr(3) + "/memory.max"))
        limit = std::min(limit, *v);
  }
  if (auto v = detail::read_limit_file("/sys/fs/cgroup/memory.max"))
    limit = std::min(limit, *v);
  if (auto v = detail::read_limit_file("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
    limit = std::min(limit, *v);
  for (int res : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit rl {};
    if (::getrlimit(res, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
      limit = std::min(limit, static_cast<double>(rl.rlim_cur));
  }
  return limit;
}

void check_memory(const MemoryEstimate& e, const StageParams& p, const ModelDesc& d, double limit) {
  if (!(e.total() > limit))
    return;
  std::string where, advice;
  if (e.seq_length >= e.max_input_length && e.seq_length >= e.weights) {
    where = "--seq-length";
    advice = str_cat("lower --seq-length (", p.seq_length, ")");
  } else if (e.max_input_length >= e.weights) {
    where = "--max-input-length";
    advice = str_cat("lower --max-input-length (", p.max_input_length, ")");
  } else if (e.block_modules > 2) {
    where = "--decode-chunk";
    advice = "fewer decode variants (a larger --decode-chunk, or 0) or --no-history, or a "
             "smaller model";
  } else {
    where = d.dir.string();
    advice = "a smaller model or a machine with more memory";
  }
  throw_error(ErrorKind::invalid_input, where, "this run needs about ",
              detail::human_bytes(e.total()), " (", detail::human_bytes(e.seq_length),
              " growing with --seq-length, ", detail::human_bytes(e.max_input_length),
              " with --max-input-length, ", detail::human_bytes(e.weights),
              " for the weights), more than the ", detail::human_bytes(limit),
              " of memory available; ", advice);
}

void check_run_memory(const ModelDesc& d, const StageParams& p, FileAccess access,
                      ir::DType kv_dtype, double limit) {
  const auto need = estimate_memory(d, p, Workload::run, access, kv_dtype);
  if (need.total() > limit && kv_dtype != ir::DType::i8) {
    const char* what = kv_dtype == ir::DType::f32 ? "a 32-bit" : "a 16-bit";
    const auto half = estimate_memory(d, p, Workload::run, access, ir::DType::f16);
    const auto int8 = estimate_memory(d, p, Workload::run, access, ir::DType::i8);
    auto refuse = [&](const std::string& option, double total) {
      throw_error(ErrorKind::invalid_input, "--seq-length", "this run needs about ",
                  detail::human_bytes(need.total()), " with ", what, " KV cache of ", p.seq_length,
                  " positions, more than the ", detail::human_bytes(limit),
                  " of memory available; ", option, " and needs about ",
                  detail::human_bytes(total));
    };
    if (kv_dtype == ir::DType::f32 && !(half.total() > limit))
      refuse("--kv-dtype f16 (or bf16) halves the cache", half.total());
    if (!(int8.total() > limit))
      refuse("--kv-dtype int8 stores a byte per value and a scale per position and head",
             int8.total());
  }
  check_memory(need, p, d, limit);
}

} // namespace tpullm::frontend
