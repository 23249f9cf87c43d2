// tpullm bench FILE.bundle: prefill and decode speed of a bundle against this machine's
// ceilings measured in the same run (docs/cli.md "tpullm bench").
#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bundle_source.hpp"
#include "pipeline_run.hpp"
#include "command.hpp"
#include "sampling_options.hpp"
#include "step_bytes.hpp"
#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/kernels/detail/matmul_gemm_bf16dot.hpp"
#include "tpullm/kernels/worker_pool.hpp"
#include "tpullm/devtools/ceilings.hpp"
#include "tpullm/runtime/bundle_session.hpp"

namespace tpullm::cli {

namespace {

using clock_type = std::chrono::steady_clock;

/// Resets the peak resident set size to the current one (Linux clear_refs 5): the ceilings'
/// 1+ GiB read buffer must not count as the bundle's memory. False when the kernel refuses.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0)
      return line.substr(line.find(':') + 2);
  return "unknown";
}

/// Shares of `wall` seconds spent in each op kind's kernels (ExecStats::op_seconds while
/// profiling), largest first, kinds under 0.5% left out, by op name ("tpu.MatMul").
nlohmann::ordered_json op_shares(const runtime::ExecStats& st, double wall) {
  std::vector<std::pair<double, std::string>> v;
  for (std::size_t k = 0; k < st.op_seconds.size(); ++k)
    if (wall > 0 && st.op_seconds[k] / wall >= 0.005)
      v.emplace_back(st.op_seconds[k] / wall, std::string(ir::op_name(static_cast<ir::OpKind>(k))));
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [share, name] : v)
    out[name] = share;
  return out;
}

/// Where one untimed run went, timed instruction by instruction: the share of its wall time
/// inside kernel calls, and op_shares by op kind.
struct RunProfile {
  double kernel_share = 0;
  nlohmann::ordered_json op_share = nlohmann::ordered_json::object();
};
/// Runs `body` once with `ex` profiling every instruction, then turns profiling off.
template <class Body>
RunProfile profile_run(runtime::Executor& ex, Body&& body) {
  ex.set_profiling(true);
  ex.reset_stats();
  const auto t0 = std::chrono::steady_clock::now();
  body();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RunProfile r{ex.stats().kernel_seconds / wall, op_shares(ex.stats(), wall)};
  ex.set_profiling(false);
  return r;
}

/// Prints "  time by op at WHAT: op share% ..." (shares of op_shares, largest first) and `tail`.
void print_op_line(const std::string& what, const nlohmann::ordered_json& op_share,
                   const std::string& tail = "") {
  std::cout << "  time by op at " << what << ":";
  for (const auto& [op, share] : op_share.items())
    std::cout << " " << op << " " << std::setprecision(0) << 100 * share.get<double>() << "%";
  std::cout << tail << std::setprecision(1) << "\n";
}

/// Deterministic prompt ids spread over the vocabulary.
std::vector<std::int32_t> prompt_ids(std::int64_t n, std::int64_t vocab) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& t : p) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t = static_cast<std::int32_t>(x % static_cast<std::uint64_t>(vocab));
  }
  return p;
}

/// Seconds per token of `steps` greedy decode steps after a prefill of `context` tokens, the
/// best of `repeat` runs. The session is left after the last run (context + steps positions),
/// its last token in *last when given.
double decode_seconds(runtime::Session& s, std::int64_t context, std::int64_t steps,
                      std::int64_t repeat, std::int64_t vocab,
                      const std::function<void()>& between = {}, std::int32_t* last = nullptr) {
  double best = 1e300;
  for (std::int64_t r = 0; r < repeat; ++r) {
    if (between)
      between();
    s.reset();
    const auto ids = prompt_ids(context, vocab);
    (void)s.prefill(ids, false);
    std::int32_t tok = ids.back();
    const auto t0 = clock_type::now();
    for (std::int64_t k = 0; k < steps; ++k) {
      auto l = s.decode(tok);
      tok = static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    }
    best = std::min(best, seconds_since(t0) / static_cast<double>(steps));
    if (last)
      *last = tok;
  }
  if (between)
    between();
  return best;
}

/// A busy process spinning on one CPU of this process's affinity set (the last), from
/// construction to destruction; it dies with the bench if the bench is killed.
class CompetingProcess {
public:
  CompetingProcess() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
      return;
    int cpu = -1;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set))
        cpu = c;
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      (void)sched_setaffinity(0, sizeof(one), &one);
      for (std::uint64_t x = 0;; ++x)
        asm volatile("" : "+r"(x)); // a loop the compiler keeps
    }
  }
  ~CompetingProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  CompetingProcess(const CompetingProcess&) = delete;
  CompetingProcess& operator=(const CompetingProcess&) = delete;
  /// False when no process could be started.
  bool running() const { return pid_ > 0; }

private:
  pid_t pid_ = -1;
};

/// Multiply-adds per token of a bundle with routed MLPs (0 when it has none): every packed
/// weight [K, N] of the decode functions of variant S and of lm_head counts K * N, a routed
/// expert's weights top_k / experts of that (the experts a token really runs).
double moe_active_parameters(const bundle::Bundle& b, std::int64_t S) {
  bool any = false;
  std::set<std::string> names;
  double macs = 0;
  for (const auto& p : b.programs()) {
    const bool use = (p.info.stage == ir::StageKind::decode &&
                      p.name == frontend::StageNames::block_cache(p.info.layer, S)) ||
                     p.name == "lm_head";
    if (!use)
      continue;
    for (const auto& in : p.instrs) {
      const auto* moe = std::get_if<ir::tpu::MoEOp>(&in.op);
      any = any || moe;
      for (std::size_t i = 0; i < in.operands.size(); ++i) {
        const auto& r = in.operands[i];
        if (r.buffer.region != ir::Region::weight || r.type.layout != ir::Layout::panels ||
            !names.insert(r.weight).second)
          continue;
        const double kn = static_cast<double>(r.type.shape[0] * r.type.shape[1]);
        macs += moe && i >= ir::tpu::MoEOp::first_expert
                    ? kn * static_cast<double>(moe->top_k) / static_cast<double>(moe->experts)
                    : kn;
      }
    }
  }
  return any ? macs : 0;
}

} // namespace

int cmd_bench(const std::vector<std::string>& args) {
  std::string prompts_text = "128,512", contexts_text = "128,1024";
  std::int64_t repeat = 3, decode_steps = 16;
  BundleArgs source;
  bool json = false, no_contention = false;
  po::options_description o("tpullm bench BUNDLE [--prompt 128,512] [--context 128,1024] "
                            "[--json]\n\nBUNDLE: a bundle file, a checkpoint folder or a .gguf "
                            "file\n\noptions");
  o.add_options()("help,h", "show this help")(
      "prompt", po::value(&prompts_text)->default_value(prompts_text),
      "prompt lengths to time prefill at (tokens/s, time to first token)")(
      "context", po::value(&contexts_text)->default_value(contexts_text),
      "history lengths to time decode at (tokens/s, fraction of the read roofline)")(
      "decode-steps", po::value(&decode_steps)->default_value(decode_steps),
      "decode steps timed at each context")("repeat", po::value(&repeat)->default_value(repeat),
                                            "repetitions; the best is reported")(
      "no-contention", po::bool_switch(&no_contention),
      "skip the contention rows (decode at the first context on 1 thread, and with a busy "
      "process on one core)")("json", po::bool_switch(&json),
                              "print one JSON object (docs/cli.md) instead of a table");
  DraftArgs draft;
  o.add(speculation_options(draft));
  ParallelArgs parallel;
  o.add(parallel_options(parallel));
  po::variables_map vm;
  if (!parse_bundle_command(args, o, source, vm))
    return kOk;
  const std::int64_t cores = source.threads;
  // Every option is checked here, before the bundle is mapped or anything is measured.
  check(repeat >= 1 && repeat <= 1000, ErrorKind::invalid_input, "--repeat",
        "must be in [1, 1000], got ", repeat);
  check(decode_steps >= 1 && decode_steps <= (1 << 24), ErrorKind::invalid_input, "--decode-steps",
        "must be in [1, 2^24], got ", decode_steps);
  auto prompts = parse_id_list<std::int64_t>(prompts_text, "--prompt");
  auto contexts = parse_id_list<std::int64_t>(contexts_text, "--context");
  check(prompts.size() <= 64, ErrorKind::invalid_input, "--prompt", "at most 64 lengths, got ",
        prompts.size());
  check(contexts.size() <= 64, ErrorKind::invalid_input, "--context", "at most 64 lengths, got ",
        contexts.size());

  // Open (and validate, and check the weights: before any timing) first: a bad bundle is
  // refused before seconds of measuring.
  // The memory figures start before: the weight check reads (maps in) the whole blob.
  const std::int64_t rss_before = proc_status_bytes("VmRSS");
  std::string checked;
  // One process, or rank 0 of a pipeline (--parallel pipeline under mpirun): the executor and
  // its memory check come with the opening, before the ceilings, so that a bundle too big for
  // this machine is refused before seconds of measuring. A layer rank serves its layers and
  // hands rank 0 its report.
  parallel.rank_reports = true;
  CommandEngine ce(parallel, source, args, true, &checked);
  if (ce.layer_rank())
    return ce.serve_layers();
  runtime::BundleSession& engine = ce.engine();
  const std::string& file = source.source;
  const auto opened = engine.shared_bundle();
  const auto& m = opened->model();
  const std::int64_t seq = m.params.seq_length;
  // The default lengths are trimmed to what the bundle holds (a bundle compiled with the
  // default --seq-length 512 has no room for a 1024-token context); given lengths must fit.
  auto fit = [&](std::vector<std::int64_t>& v, bool defaulted, std::int64_t most) {
    if (!defaulted)
      return;
    std::vector<std::int64_t> kept;
    for (auto x : v)
      if (x <= most)
        kept.push_back(x);
    if (kept.empty())
      kept.push_back(std::max<std::int64_t>(1, most));
    v = kept;
  };
  fit(prompts, vm["prompt"].defaulted(), seq);
  fit(contexts, vm["context"].defaulted(), seq - std::min(decode_steps, seq));
  for (auto p : prompts)
    check(p >= 1 && p <= seq, ErrorKind::invalid_input, "--prompt", "length ", p,
          " is outside [1, seq_length = ", seq, "]");
  for (auto c : contexts)
    check(c >= 1 && decode_steps < seq && c <= seq - decode_steps, ErrorKind::invalid_input,
          "--context", "context ", c, " + ", decode_steps,
          " decode steps exceeds the bundle's seq_length ", seq);

  // The speculation row's context (--draft): a random prompt, the model's greedy continuation,
  // the prompt again and the continuation of all that, so that the answer repeats it.
  constexpr std::int64_t kSpecBase = 16, kSpecPiece = 64;
  constexpr std::int64_t kSpecContext = 2 * (kSpecBase + kSpecPiece);
  check(draft.source == "none" || kSpecContext + decode_steps < seq, ErrorKind::invalid_input,
        "--draft", "the speculation row needs ", kSpecContext + decode_steps + 1, " positions (a ",
        kSpecContext, "-token context and --decode-steps), the bundle has ", seq);

  // A bad --draft is refused before the ceilings too.
  runtime::GenerateOptions plain, sped;
  const auto drafts = apply_draft(draft, *opened, source.open, cores, sped);
  share_draft_workers(drafts, engine.executor());
  std::cerr << checked << "\n"
            << "measuring this machine's ceilings (a few seconds)...\n";
  const machine::Ceilings& ceil = machine::measure_ceilings();
  const bool hwm_reset = reset_peak_rss();
  const std::int64_t rss_after_open = proc_status_bytes("VmRSS");

  const std::int64_t threads = engine.executor().threads();
  runtime::Session& s = engine.session();
  const double read_bw = (threads >= 2 ? ceil.read_gbs_2t : ceil.read_gbs_1t) * 1e9;
  const double fma = (threads >= 2 ? ceil.f32_gflops_2t : ceil.f32_gflops_1t) * 1e9;
  const double lm_head_params = static_cast<double>(m.vocab * m.hidden);
  // A mixture of experts: the weights a token really multiplies (router + top_k experts).
  const double moe_params = moe_active_parameters(*opened, opened->model().params.seq_length);
  const double block_params =
      moe_params > 0
          ? moe_params - lm_head_params
          : static_cast<double>(m.layers *
                                (m.hidden * (m.heads + 2 * m.kv_heads) * m.head_dim +
                                 m.heads * m.head_dim * m.hidden + 3 * m.hidden * m.intermediate));
  const double params = block_params + lm_head_params;
  // The FLOPs a prefill of P tokens needs: every row through the blocks, causal attention
  // (scores and values over the i + 1 keys of row i, at most a windowed layer's window), and
  // the lm_head on the last row only.
  const auto windows = sliding_windows(*opened);
  auto prefill_flops = [&](std::int64_t P) {
    const double p = static_cast<double>(P);
    double keys = 0; // sum over layers and rows of the keys each row sees
    for (std::int64_t layer = 0; layer < m.layers; ++layer) {
      const auto it = windows.find(layer);
      const double w = it == windows.end() ? p : static_cast<double>(std::min(P, it->second));
      keys += w * (w + 1) / 2 + (p - w) * w; // rows up to w see i + 1 keys, the rest w
    }
    const double attention = 4.0 * static_cast<double>(m.heads * m.head_dim) * keys;
    return 2 * block_params * p + attention + 2 * lm_head_params;
  };

  // The integer dot-product peak of the path a W8A8 / VNNI GEMV takes on this CPU (none on the
  // portable path).
  std::string int8_dot_path = "none";
  const auto int8_dot = machine::w8a8_ceiling(1, int8_dot_path);
  const double int8_dot_gops = int8_dot ? machine::ceiling_value(*int8_dot, threads) / 1e9 : 0;
  nlohmann::ordered_json out;
  out["machine"] = {{"cpu", cpu_model()},
                    {"threads", threads},
                    {"isa", std::string(kernels::isa_name(kernels::active_isa()))},
                    {"amx", ceil.amx}};
  out["ceilings"] = {{"read_gbs", read_bw / 1e9},
                     {"read_pattern", threads >= 2 ? ceil.read_best_2t : ceil.read_best_1t},
                     {"f32_fma_gflops", fma / 1e9},
                     {"bf16_dot_gflops", ceil.bf16_gflops_2t},
                     {"int8_dot_gops", int8_dot_gops},
                     {"int8_dot_path", int8_dot_path},
                     {"amx_bf16_gflops", ceil.amx_bf16_gflops_2t},
                     {"amx_int8_gops", ceil.amx_int8_gops_2t}};
  out["bundle"] = {{"file", file},
                   {"bytes", opened->file_bytes()},
                   {"mode", m.mode},
                   {"family", m.family},
                   {"source", m.source},
                   {"seq_length", m.params.seq_length},
                   {"max_input_length", m.params.max_input_length},
                   {"linear_parameters", params},
                   {"kv_cache_bytes", opened->kv().bytes()},
                   {"kv_dtype", std::string(conversion::kv_dtype_spelling(opened->kv().dtype))}};

  // Each prefill row is judged against the compute peaks measured next to it (before each
  // repeat and after the last, the best kept), as decode rows are against the read ceiling: a
  // VM's compute moves too (one start-up FMA sweep read 251 GFLOP/s between runs of 450-516).
  // The start-up figure stays in fma_peak_frac_start.
  nlohmann::ordered_json pre = nlohmann::ordered_json::array();
  for (auto P : prompts) {
    const auto ids = prompt_ids(P, m.vocab);
    // The products' own unit: W8A8 products run on an integer dot-product unit, bf16 products of
    // 16 rows or more on VDPBF16PS where the CPU has AVX512_BF16 and no AMX. A peak this CPU
    // cannot measure (no such instruction, a non-x86 build) is 0 and its fraction is reported 0,
    // as the start-up ceilings are.
    std::string int8_path;
    const auto int8_unit = m.mode == "int8" ? machine::w8a8_ceiling(P, int8_path) : std::nullopt;
    const bool bf16_unit = m.mode == "bf16" && kernels::detail::bf16_dot_applies(P);
    double fma_near = 0, int8_near = 0, bf16_near = 0;
    const auto measure_near = [&] {
      const int t = static_cast<int>(threads);
      fma_near = std::max(fma_near, machine::compute_ceiling_now(machine::Ceiling::f32_fma, t));
      if (int8_unit)
        int8_near = std::max(int8_near, machine::compute_ceiling_now(*int8_unit, t));
      if (bf16_unit)
        bf16_near =
            std::max(bf16_near, machine::compute_ceiling_now(machine::Ceiling::bf16_dot, t));
    };
    double best = 1e300;
    for (std::int64_t r = 0; r < repeat; ++r) {
      measure_near();
      s.reset();
      const auto t0 = clock_type::now();
      auto logits = s.prefill(ids, false);
      best = std::min(best, seconds_since(t0));
      print_progress("prefill of " + std::to_string(P) + " tokens", static_cast<std::size_t>(r + 1),
                     static_cast<std::size_t>(repeat));
    }
    measure_near();
    // One more prefill, profiled (as for decode below; not the timed runs).
    s.reset();
    const RunProfile prof = profile_run(engine.executor(), [&] { (void)s.prefill(ids, false); });
    const double flops = prefill_flops(P) / best;
    pre.push_back({{"prompt", P},
                   {"tokens_per_s", static_cast<double>(P) / best},
                   {"seconds", best},
                   {"time_to_first_token_ms", best * 1e3},
                   {"gflops", flops / 1e9},
                   {"f32_fma_gflops_near", fma_near / 1e9},
                   {"fma_peak_frac", fma_near > 0 ? flops / fma_near : 0},
                   {"fma_peak_frac_start", fma > 0 ? flops / fma : 0},
                   {"kernel_share", prof.kernel_share},
                   {"op_share", prof.op_share}});
    // the fraction of the int8 unit's peak counts all FLOPs, the f32 attention included, so it
    // is a bound from above on the int8 units' use
    if (m.mode == "int8") {
      pre.back()["int8_path"] = int8_path;
      pre.back()["int8_peak_gops"] = int8_near / 1e9;
      pre.back()["int8_peak_frac"] = int8_near > 0 ? flops / int8_near : 0;
    }
    // likewise all FLOPs against the vdpbf16ps peak
    if (bf16_unit) {
      pre.back()["bf16_path"] = "vdpbf16ps";
      pre.back()["bf16_dot_peak_gflops"] = bf16_near / 1e9;
      pre.back()["bf16_dot_peak_frac"] = bf16_near > 0 ? flops / bf16_near : 0;
    }
  }
  // The read ceiling next to each decode row: the weights the steps read (the blob's first GiB,
  // or read_now_min_bytes() where 4 x the cache is more: 1040 MiB on a Xeon VM whose sysfs says
  // 260 MiB of L3) swept with the start-up ceiling's patterns before each repeat and after the
  // last, the row judged against the best of those sweeps (a VM's bandwidth moves within a
  // minute: 46 to 81 GB/s seen on one). A blob the sweep refuses (under read_now_min_bytes(),
  // which would measure the cache) keeps the start-up ceiling for its rows.
  const auto blob = opened->weight_blob();
  // (+ 2 pages: the sweep trims an unaligned region to whole 4 KiB pages)
  const std::size_t near_bytes = std::min<std::size_t>(
      blob.size(),
      std::max<std::size_t>(std::size_t{1} << 30, machine::read_now_min_bytes() + 8192));
  // a first sweep faults the pages in (timed sweeps must read resident memory) and says
  // whether the blob can be swept at all
  const bool near_ok =
      (!contexts.empty() || draft.source != "none") && read_bw > 0 &&
      machine::read_bandwidth_now(blob.data(), near_bytes, static_cast<int>(threads)).gbs > 0;
  // The best near read ceiling of sweeps made between timed runs (start-up ceiling when none).
  auto sweep_near = [&](machine::ReadNow& near) {
    if (!near_ok)
      return;
    machine::ReadNow r =
        machine::read_bandwidth_now(blob.data(), near_bytes, static_cast<int>(threads));
    if (r.gbs > near.gbs)
      near = std::move(r);
  };
  // Bytes one decode step reads at history C: the weights of its variant and the valid KV
  // history (mid-run).
  auto step_bytes = [&](std::int64_t C) {
    const std::int64_t S = s.decode_length_for(C + decode_steps / 2);
    const double kv = decode_kv_bytes(*opened, windows, C + decode_steps / 2);
    return std::pair{S, static_cast<double>(decode_weight_bytes(*opened, S)) + kv};
  };
  nlohmann::ordered_json dec = nlohmann::ordered_json::array();
  for (auto C : contexts) {
    const std::int64_t stalls0 = engine.executor().pool_stalls();
    machine::ReadNow near;
    std::int32_t tok = 0;
    const double best = decode_seconds(
        s, C, decode_steps, repeat, m.vocab, [&] { sweep_near(near); }, &tok);
    const double ceiling = near.gbs > 0 ? near.gbs * 1e9 : read_bw;
    const std::int64_t stalls = engine.executor().pool_stalls() - stalls0;
    print_progress("decode at context " + std::to_string(C), 1, 1);
    // Share of the decode wall time spent inside kernel calls (executor profiling on: every
    // instruction timed), the rest being the executor's and the session's own work. The
    // profiled steps go on from the last timed run (context C + steps, no second prefill of C
    // tokens: at 32k that prefill is minutes) where the bundle has room, else start again at C.
    if (C + 2 * decode_steps > seq) {
      s.reset();
      const auto ids = prompt_ids(C, m.vocab);
      (void)s.prefill(ids, false);
      tok = ids.back();
    }
    const RunProfile prof = profile_run(engine.executor(), [&] {
      for (std::int64_t k = 0; k < decode_steps; ++k) {
        auto l = s.decode(tok);
        tok = static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      }
    });
    const auto [S, bytes] = step_bytes(C);
    dec.push_back({{"context", C},
                   {"variant", S},
                   {"tokens_per_s", 1 / best},
                   {"ms_per_token", best * 1e3},
                   {"bytes_per_token", bytes},
                   {"gbs", bytes / best / 1e9},
                   {"roofline_frac", ceiling > 0 ? bytes / best / ceiling : 0},
                   {"read_gbs_near", ceiling / 1e9},
                   {"read_near_pattern", near.gbs > 0 ? near.pattern : "start-up ceiling"},
                   {"roofline_frac_start", read_bw > 0 ? bytes / best / read_bw : 0},
                   {"kernel_share", prof.kernel_share},
                   {"op_share", prof.op_share},
                   {"pool_stalls", stalls}});
  }
  out["prefill"] = pre;
  out["decode"] = dec;
  // The peak of the runs above (the contention rows below make a second executor).
  const std::int64_t peak = proc_status_bytes("VmHWM");
  // Contention: the first context again on 1 thread, and on all threads with a busy process on
  // one core (the worker pool should lose about that core's share, not more).
  nlohmann::ordered_json contention;
  if (no_contention || contexts.empty()) {
    contention = {{"skipped", "--no-contention"}};
  } else if (ce.pipeline() != nullptr) {
    contention = {{"skipped", "--parallel " + parallel.mode}};
  } else if (threads < 2) {
    contention = {{"skipped", "one thread"}};
  } else {
    const std::int64_t C = contexts.front();
    const double quiet = 1 / dec.front()["tokens_per_s"].get<double>();
    double one = 0;
    {
      runtime::BundleSession single(opened, 1);
      one = decode_seconds(single.session(), C, decode_steps, repeat, m.vocab);
    }
    print_progress("decode on 1 thread", 1, 1);
    const std::int64_t stalls0 = engine.executor().pool_stalls();
    double busy = 0;
    bool started = false;
    {
      CompetingProcess competitor;
      started = competitor.running();
      if (started)
        busy = decode_seconds(s, C, decode_steps, repeat, m.vocab);
    }
    print_progress("decode beside a busy process", 1, 1);
    if (!started) {
      contention = {{"skipped", "could not start the competing process"}};
    } else {
      contention = {{"context", C},
                    {"threads", threads},
                    {"quiet_tokens_per_s", 1 / quiet},
                    {"one_thread_tokens_per_s", 1 / one},
                    {"competing_tokens_per_s", 1 / busy},
                    {"competing_loss", 1 - quiet / busy},
                    {"pool_stalls", engine.executor().pool_stalls() - stalls0}};
    }
  }
  out["contention"] = contention;
  // Speculative decoding (--draft): plain and speculative decoding of the same decode-steps
  // tokens after the context above, best of --repeat each, the near read ceiling swept before
  // each repeat.
  nlohmann::ordered_json spec;
  if (draft.source != "none") {
    std::vector<std::int32_t> ctx = prompt_ids(kSpecBase, m.vocab);
    const std::vector<std::int32_t> base = ctx;
    plain.stop.max_new_tokens = static_cast<int>(kSpecPiece);
    for (int r = 0; r < 2; ++r) {
      if (r > 0)
        ctx.insert(ctx.end(), base.begin(), base.end());
      s.reset();
      const auto a = s.generate(ctx, plain);
      ctx.insert(ctx.end(), a.tokens.begin(), a.tokens.end());
    }
    plain.stop.max_new_tokens = sped.stop.max_new_tokens = static_cast<int>(decode_steps);
    double best_plain = 1e300, best_spec = 1e300;
    runtime::GenerateResult p_res, s_res;
    machine::ReadNow near;
    auto per_token = [](const runtime::GenerateResult& r) {
      return r.decode_seconds / static_cast<double>(std::max<std::size_t>(1, r.tokens.size() - 1));
    };
    // each repeat's plain over speculative time: the median of these pairs is less moved by a
    // machine whose speed drifts between repeats than the ratio of the two bests
    std::vector<double> pair_ratios;
    for (std::int64_t r = 0; r < repeat; ++r) {
      sweep_near(near);
      s.reset();
      p_res = s.generate(ctx, plain);
      best_plain = std::min(best_plain, per_token(p_res));
      s.reset();
      reset_draft(drafts); // a fresh conversation for the draft model too
      s_res = s.generate(ctx, sped);
      best_spec = std::min(best_spec, per_token(s_res));
      pair_ratios.push_back(per_token(p_res) / per_token(s_res));
    }
    std::sort(pair_ratios.begin(), pair_ratios.end());
    const std::size_t half = pair_ratios.size() / 2;
    const double median_ratio = pair_ratios.size() % 2 == 1
                                    ? pair_ratios[half]
                                    : (pair_ratios[half - 1] + pair_ratios[half]) / 2;
    sweep_near(near);
    print_progress("speculative decoding", 1, 1);
    const auto& st = s_res.speculation;
    const double ceiling = near.gbs > 0 ? near.gbs * 1e9 : read_bw;
    const double bytes = step_bytes(static_cast<std::int64_t>(ctx.size())).second;
    spec = {{"draft", draft.source},
            {"draft_max", draft.max},
            {"context", static_cast<std::int64_t>(ctx.size())},
            {"tokens", static_cast<std::int64_t>(s_res.tokens.size())},
            {"plain_tokens_per_s", 1 / best_plain},
            {"speculative_tokens_per_s", 1 / best_spec},
            {"speedup", best_plain / best_spec},
            {"speedup_median", median_ratio},
            {"verify_calls", st.verify_calls},
            {"drafted", st.drafted},
            {"accepted", st.accepted},
            {"acceptance", st.acceptance()},
            {"tokens_per_verify_call", st.verify_calls > 0
                                           ? static_cast<double>(st.accepted + st.verify_calls) /
                                                 static_cast<double>(st.verify_calls)
                                           : 0.0},
            {"bytes_per_token", bytes},
            {"read_gbs_near", ceiling / 1e9},
            {"plain_read_frac_near", bytes / best_plain / ceiling},
            {"same_answer", s_res.tokens == p_res.tokens},
            // where the speculative time went: drafting (per token drafted) and verify calls,
            // in plain decode steps of the same repeat
            {"draft_ms_per_token",
             st.drafted > 0 ? 1e3 * st.draft_seconds / static_cast<double>(st.drafted) : 0.0},
            {"verify_ms_per_call",
             st.verify_calls > 0 ? 1e3 * st.verify_seconds / static_cast<double>(st.verify_calls)
                                 : 0.0},
            {"plain_ms_per_token", 1e3 * per_token(p_res)},
            // a draft model's catching up on the context, with the prompt (not in decode)
            {"draft_prefill_seconds", s_res.draft_prefill_seconds},
            {"prefill_seconds", s_res.prefill_seconds - s_res.draft_prefill_seconds}};
  }
  out["speculation"] = spec;
  // What this process may hold at its peak: what it held before opening the engine (binary,
  // libraries, the mapped bundle's pages already touched), the bundle, the KV cache, the
  // activation arena and local scratch, the draft bundle's (--draft DRAFT.bundle) and 64 MiB of
  // slack for the runtime's own buffers.
  const std::int64_t arena = engine.executor().arena_bytes();
  const std::int64_t budget = rss_before + opened->file_bytes() +
                              engine.executor().kv_resident_bytes() + arena +
                              draft_memory_bytes(drafts) + (64ll << 20);
  // A pipeline: rank 0's traffic, then every rank's report (which stops the pipeline).
  nlohmann::ordered_json pipeline;
  if (const auto* ps = ce.pipeline_stats()) {
    const runtime::PipelineStats st = *ps;
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const auto& r : ce.rank_reports())
      ranks.push_back(nlohmann::ordered_json::parse(r));
    pipeline = {{"layers", ce.describe_ranks()},
                {"round_trips", st.round_trips},
                {"bytes_sent_by_rank_0", st.bytes_sent},
                {"bytes_per_round_trip",
                 st.round_trips > 0
                     ? static_cast<double>(st.bytes_sent) / static_cast<double>(st.round_trips)
                     : 0.0},
                {"seconds_in_other_ranks", st.seconds},
                {"ranks", ranks}};
  }
  if (const auto* ts = ce.tensor_stats()) {
    const runtime::TensorParallelStats st = *ts;
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const auto& r : ce.rank_reports())
      ranks.push_back(nlohmann::ordered_json::parse(r));
    const double calls = static_cast<double>(std::max<std::int64_t>(st.calls, 1));
    pipeline = {
        {"layers", ce.describe_ranks()},
        {"calls", st.calls},
        {"all_reduces", st.all_reduces},
        {"all_reduce_bytes_by_rank_0", st.reduced_bytes},
        {"all_reduce_bytes_per_call", static_cast<double>(st.reduced_bytes) / calls},
        {"all_reduce_seconds", st.reduce_seconds},
        {"all_reduce_us_each",
         st.all_reduces > 0 ? st.reduce_seconds * 1e6 / static_cast<double>(st.all_reduces) : 0.0},
        {"bytes_sent_by_rank_0", st.bytes_sent},
        {"ranks", ranks}};
  }
  out[ce.tensor_parallel() ? "tensor_parallel" : "pipeline"] = pipeline;
  out["memory"] = {{"peak_rss_bytes", peak},
                   {"rss_before_load_bytes", rss_before},
                   {"rss_after_open_bytes", rss_after_open},
                   {"arena_bytes", arena},
                   {"peak_reset_after_ceilings", hwm_reset},
                   {"budget_bytes", budget},
                   {"within_budget", peak <= budget}};
  if (json) {
    std::cout << out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return ce.peak_within_budget(std::cerr) ? kOk : kCheckFailed;
  }
  std::cout << std::fixed << std::setprecision(1) << "machine: " << cpu_model() << ", " << threads
            << " threads; read " << read_bw / 1e9 << " GB/s ("
            << out["ceilings"]["read_pattern"].get<std::string>() << "), f32 FMA " << fma / 1e9
            << " GFLOP/s\n"
            << "bundle: " << file << " (" << m.family << ", mode " << m.mode << ", "
            << opened->file_bytes() / (1 << 20) << " MiB)\n\n"
            << "prefill  prompt  tokens/s   TTFT ms   GFLOP/s  FMA near  of it  of start\n";
  for (const auto& p : pre) {
    std::cout << "         " << std::setw(6) << p["prompt"].get<std::int64_t>() << std::setw(10)
              << p["tokens_per_s"].get<double>() << std::setw(10)
              << p["time_to_first_token_ms"].get<double>() << std::setw(10)
              << p["gflops"].get<double>() << std::setw(10)
              << p["f32_fma_gflops_near"].get<double>() << std::setprecision(3) << std::setw(7)
              << p["fma_peak_frac"].get<double>() << std::setw(10)
              << p["fma_peak_frac_start"].get<double>() << std::setprecision(1);
    if (p.contains("int8_peak_frac") && p["int8_peak_gops"].get<double>() <= 0)
      std::cout << "   int8 path " << p["int8_path"].get<std::string>() << ": no measured peak";
    else if (p.contains("int8_peak_frac"))
      std::cout << "   " << std::setprecision(3) << p["int8_peak_frac"].get<double>() << " of the "
                << p["int8_path"].get<std::string>() << " int8 peak (" << std::setprecision(0)
                << p["int8_peak_gops"].get<double>() << " GOP/s)" << std::setprecision(1);
    if (p.contains("bf16_dot_peak_frac"))
      std::cout << "   " << std::setprecision(3) << p["bf16_dot_peak_frac"].get<double>()
                << " of the vdpbf16ps peak (" << std::setprecision(0)
                << p["bf16_dot_peak_gflops"].get<double>() << " GFLOP/s)" << std::setprecision(1);
    std::cout << "\n";
  }
  for (const auto& p : pre) {
    std::ostringstream tail;
    tail << std::fixed << std::setprecision(0) << " (in kernels "
         << 100 * p["kernel_share"].get<double>() << "%)";
    print_op_line("prompt " + std::to_string(p["prompt"].get<std::int64_t>()), p["op_share"],
                  tail.str());
  }
  std::cout
      << "decode   context tokens/s  ms/token  MB/token  GB/s    read GB/s near  of it  of start"
         "  in kernels\n";
  for (const auto& d : dec)
    std::cout << "         " << std::setw(6) << d["context"].get<std::int64_t>() << std::setw(10)
              << d["tokens_per_s"].get<double>() << std::setw(10) << std::setprecision(2)
              << d["ms_per_token"].get<double>() << std::setw(10) << std::setprecision(1)
              << d["bytes_per_token"].get<double>() / 1e6 << std::setw(8) << d["gbs"].get<double>()
              << std::setw(16) << d["read_gbs_near"].get<double>() << std::setw(7)
              << std::setprecision(3) << d["roofline_frac"].get<double>() << std::setw(10)
              << d["roofline_frac_start"].get<double>() << std::setw(12)
              << d["kernel_share"].get<double>() << std::setprecision(1) << "\n";
  for (const auto& d : dec)
    print_op_line("context " + std::to_string(d["context"].get<std::int64_t>()), d["op_share"]);
  if (contention.contains("skipped")) {
    std::cout << "contention: skipped (" << contention["skipped"].get<std::string>() << ")\n";
  } else {
    std::cout << "contention at context " << contention["context"].get<std::int64_t>() << ": "
              << contention["quiet_tokens_per_s"].get<double>() << " t/s on " << threads
              << " threads, " << contention["one_thread_tokens_per_s"].get<double>() << " on 1, "
              << contention["competing_tokens_per_s"].get<double>() << " on " << threads
              << " beside a busy process on one core (loses " << std::setprecision(0)
              << 100 * contention["competing_loss"].get<double>() << "%, "
              << contention["pool_stalls"].get<std::int64_t>() << " worker stalls)"
              << std::setprecision(1) << "\n";
  }
  if (!spec.is_null())
    std::cout << "speculation (" << spec["draft"].get<std::string>() << ", at most "
              << spec["draft_max"].get<int>() << "): context "
              << spec["context"].get<std::int64_t>()
              << " tokens (a prompt, its greedy continuation, the prompt again and the "
                 "continuation of all that), "
              << spec["tokens"].get<std::int64_t>() << " tokens: plain "
              << spec["plain_tokens_per_s"].get<double>() << " tokens/s (" << std::setprecision(3)
              << spec["plain_read_frac_near"].get<double>() << " of the near read ceiling, "
              << std::setprecision(1) << spec["read_gbs_near"].get<double>()
              << " GB/s), speculative " << spec["speculative_tokens_per_s"].get<double>()
              << " tokens/s = " << std::setprecision(2) << spec["speedup"].get<double>()
              << "x (median of the repeats' pairs " << spec["speedup_median"].get<double>()
              << "x); " << spec["verify_calls"].get<std::int64_t>() << " verify calls, "
              << spec["drafted"].get<std::int64_t>() << " drafted, "
              << spec["accepted"].get<std::int64_t>() << " kept (" << std::setprecision(1)
              << 100 * spec["acceptance"].get<double>() << "%), " << std::setprecision(2)
              << spec["tokens_per_verify_call"].get<double>() << " tokens per call; same answer: "
              << (spec["same_answer"].get<bool>() ? "yes" : "NO") << std::setprecision(1);
  if (!spec.is_null() && spec["verify_calls"].get<std::int64_t>() > 0)
    std::cout << "; a verify call " << std::setprecision(2)
              << spec["verify_ms_per_call"].get<double>() << " ms, a draft token "
              << spec["draft_ms_per_token"].get<double>() << " ms, a plain step "
              << spec["plain_ms_per_token"].get<double>() << " ms" << std::setprecision(1);
  if (!spec.is_null() && spec["draft_prefill_seconds"].get<double>() > 0)
    std::cout << "; the draft model caught up on the context in "
              << 1e3 * spec["draft_prefill_seconds"].get<double>() << " ms beside the model's "
              << 1e3 * spec["prefill_seconds"].get<double>()
              << " ms prefill (prompt time, not in decode)";
  if (!spec.is_null())
    std::cout << "\n";
  std::cout << "peak resident memory " << peak / (1 << 20)
            << " MiB (before load + bundle + KV cache + arena" << (drafts ? " + draft bundle" : "")
            << " + 64 MiB = " << budget / (1 << 20)
            << " MiB: " << (peak <= budget ? "within" : "OVER") << ")"
            << (hwm_reset ? "" : " [could not reset the peak after measuring ceilings]") << "\n";
  if (!pipeline.is_null() && ce.tensor_parallel()) {
    std::cout << pipeline["layers"].get<std::string>() << ": "
              << pipeline["calls"].get<std::int64_t>() << " calls, "
              << pipeline["all_reduces"].get<std::int64_t>() << " all-reduces of "
              << std::setprecision(0) << pipeline["all_reduce_bytes_per_call"].get<double>()
              << " bytes a call on rank 0, " << std::setprecision(1)
              << pipeline["all_reduce_us_each"].get<double>() << " us each (transfer and wait)\n";
    for (const auto& r : pipeline["ranks"])
      std::cout << "  rank " << r["rank"].get<int>() << ": " << r["calls"].get<std::int64_t>()
                << " calls, " << std::setprecision(3) << r["busy_seconds"].get<double>()
                << " s in its halves, " << r["all_reduce_seconds"].get<double>()
                << " s in all-reduces, peak resident " << std::setprecision(1)
                << r["peak_rss_bytes"].get<double>() / (1 << 20) << " MiB\n";
  } else if (!pipeline.is_null()) {
    std::cout << pipeline["layers"].get<std::string>() << ": "
              << pipeline["round_trips"].get<std::int64_t>() << " round trips of "
              << std::setprecision(0) << pipeline["bytes_per_round_trip"].get<double>()
              << " bytes from rank 0, " << std::setprecision(3)
              << pipeline["seconds_in_other_ranks"].get<double>()
              << " s in the other ranks' layers and the hops" << std::setprecision(1) << "\n";
    for (const auto& r : pipeline["ranks"]) {
      std::cout << "  rank " << r["rank"].get<int>() << ": layers [" << r["layers"][0].get<int>()
                << ", " << r["layers"][1].get<int>() << "), " << r["calls"].get<std::int64_t>()
                << " calls, ";
      if (r["busy_seconds"].is_null())
        std::cout << "with the embedding, the lm_head and this bench, ";
      else
        std::cout << std::setprecision(3) << r["busy_seconds"].get<double>() << " s busy of "
                  << r["total_seconds"].get<double>() << " s, ";
      std::cout << "peak resident " << std::setprecision(1)
                << r["peak_rss_bytes"].get<double>() / (1 << 20) << " MiB\n";
    }
  }
  return ce.peak_within_budget(std::cerr) ? kOk : kCheckFailed;
}

} // namespace tpullm::cli
