// tpullm-bench-interp: wall time and peak memory of the Top reference interpreter at real
// model sizes, on checkpoints from `tpullm make-model`.
//
//   tpullm-bench-interp MODEL_DIR scenarios [--goldens-out FILE] [--seed S]
//     The calls `tpullm verify --level top` makes (seq_length 512, max_input_length 64, decode
//     variants 512/256/128): scenario a (37-token prompt, all rows, 12 decode steps), b (23
//     more tokens on a's cache, 6 steps), c (300-token prompt in 5 segments, last row, 8
//     steps), with random prompt tokens and greedy decode tokens. --goldens-out writes what the
//     interpreter computed as a goldens.safetensors, so that `tpullm verify` itself can be timed
//     on a random checkpoint. Those goldens are the interpreter's own output: a speed fixture,
//     never evidence of correctness.
//   tpullm-bench-interp MODEL_DIR prefill N
//     One N-token prefill (max_input_length N, last row's logits), as a prompt is processed.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "tpullm/frontend/safetensors_writer.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/interp/linalg.hpp"
#include "tpullm/runtime/interpreted_stages.hpp"
#include "tpullm/runtime/session.hpp"

using namespace tpullm;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0; // KiB on Linux
}

std::int32_t argmax(const std::vector<float>& logits, std::int64_t row, std::int64_t vocab) {
  const auto b = logits.begin() + row * vocab;
  return static_cast<std::int32_t>(std::max_element(b, b + vocab) - b);
}

/// One scenario's inputs and what the interpreter produced for them.
struct Scenario {
  std::string name;
  std::vector<std::int32_t> prompt;
  bool last_only = false;
  std::int64_t steps = 0;
  std::vector<float> prefill_logits, decode_logits;
  std::vector<std::int32_t> decode_tokens;
};

void run(runtime::Session& s, Scenario& sc, std::int64_t vocab) {
  const auto t0 = Clock::now();
  sc.prefill_logits = s.prefill(sc.prompt, !sc.last_only);
  const double t_prefill = seconds_since(t0);
  const auto t1 = Clock::now();
  std::int32_t next = argmax(
      sc.prefill_logits, static_cast<std::int64_t>(sc.prefill_logits.size()) / vocab - 1, vocab);
  for (std::int64_t k = 0; k < sc.steps; ++k) {
    sc.decode_tokens.push_back(next);
    const auto l = s.decode(next);
    sc.decode_logits.insert(sc.decode_logits.end(), l.begin(), l.end());
    next = argmax(l, 0, vocab);
  }
  std::printf("  scenario %s: prefill %zu tokens %.2f s, %lld decode steps %.2f s\n",
              sc.name.c_str(), sc.prompt.size(), t_prefill, static_cast<long long>(sc.steps),
              seconds_since(t1));
}

void write_goldens(const std::string& path, const std::vector<Scenario>& sc, std::int64_t vocab) {
  frontend::SafetensorsWriter w(path);
  w.set_metadata("note", "computed by tpullm's own interpreter (tpullm-bench-interp): a speed "
                         "fixture, not an oracle");
  const auto ids = [](const std::vector<std::int32_t>& v) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()),
                                      v.size() * sizeof(std::int32_t));
  };
  const auto floats = [](const std::vector<float>& v) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()),
                                      v.size() * sizeof(float));
  };
  const auto rows = [&](const std::vector<float>& v) {
    return static_cast<std::int64_t>(v.size()) / vocab;
  };
  for (const auto& s : sc) {
    w.declare(s.name + ".prompt", frontend::DType::i32,
              {static_cast<std::int64_t>(s.prompt.size())});
    w.declare(s.name + (s.last_only ? ".last_logits" : ".prefill_logits"), frontend::DType::f32,
              {rows(s.prefill_logits), vocab});
    w.declare(s.name + ".decode_tokens", frontend::DType::i32,
              {static_cast<std::int64_t>(s.decode_tokens.size())});
    w.declare(s.name + ".decode_logits", frontend::DType::f32, {rows(s.decode_logits), vocab});
  }
  for (const auto& s : sc) {
    w.write(s.name + ".prompt", ids(s.prompt));
    w.write(s.name + (s.last_only ? ".last_logits" : ".prefill_logits"), floats(s.prefill_logits));
    w.write(s.name + ".decode_tokens", ids(s.decode_tokens));
    w.write(s.name + ".decode_logits", floats(s.decode_logits));
  }
  w.finish();
}

int usage() {
  std::cerr << "usage: tpullm-bench-interp MODEL_DIR scenarios [--goldens-out FILE] [--seed S]\n"
               "       tpullm-bench-interp MODEL_DIR prefill N\n";
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 3)
    return usage();
  const std::string model = argv[1], mode = argv[2];
  std::string goldens_out;
  std::uint32_t seed = 1;
  std::int64_t prefill_tokens = 0;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--goldens-out" && i + 1 < argc)
      goldens_out = argv[++i];
    else if (a == "--seed" && i + 1 < argc)
      seed = static_cast<std::uint32_t>(std::stoul(argv[++i]));
    else if (mode == "prefill" && prefill_tokens == 0)
      prefill_tokens = std::stoll(a);
    else
      return usage();
  }
  if (mode != "scenarios" && !(mode == "prefill" && prefill_tokens > 0))
    return usage();
  try {
    const auto t0 = Clock::now();
    const auto d = frontend::load_model(model);
    frontend::StageParams p;
    if (mode == "scenarios") {
      p.seq_length = 512;
      p.max_input_length = 64;
      p.decode_chunk = 128;
    } else {
      p.seq_length = prefill_tokens;
      p.max_input_length = prefill_tokens;
      p.decode_chunk = 0;
      p.with_history = false;
    }
    runtime::InterpretedStages exec(frontend::build_top_modules(d, p));
    runtime::Session session(
        exec, {d.dims.layers, d.dims.hidden, d.dims.kv_heads, d.dims.head_dim, d.dims.vocab}, p);
    std::printf("%s: %lld layers, hidden %lld, vocab %lld; %d OpenMP threads; modules built in "
                "%.2f s\n",
                model.c_str(), static_cast<long long>(d.dims.layers),
                static_cast<long long>(d.dims.hidden), static_cast<long long>(d.dims.vocab),
                interp::linalg::max_threads(), seconds_since(t0));
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::int32_t> token(0,
                                                      static_cast<std::int32_t>(d.dims.vocab - 1));
    const auto tokens = [&](std::int64_t n) {
      std::vector<std::int32_t> v(static_cast<std::size_t>(n));
      for (auto& t : v)
        t = token(rng);
      return v;
    };
    const auto t1 = Clock::now();
    if (mode == "scenarios") {
      std::vector<Scenario> sc{{"a", tokens(37), false, 12, {}, {}, {}},
                               {"b", tokens(23), false, 6, {}, {}, {}},
                               {"c", tokens(300), true, 8, {}, {}, {}}};
      session.reset();
      run(session, sc[0], d.dims.vocab);
      run(session, sc[1], d.dims.vocab);
      session.reset();
      run(session, sc[2], d.dims.vocab);
      if (!goldens_out.empty())
        write_goldens(goldens_out, sc, d.dims.vocab);
    } else {
      const auto logits = session.prefill(tokens(prefill_tokens), false);
      std::printf("  prefill of %lld tokens: last-row argmax %d\n",
                  static_cast<long long>(prefill_tokens), argmax(logits, 0, d.dims.vocab));
    }
    std::printf("run %.2f s, total %.2f s; weights materialized %.0f MiB; peak RSS %.0f MiB\n",
                seconds_since(t1), seconds_since(t0),
                static_cast<double>(exec.weights().bytes()) / (1 << 20), peak_rss_mib());
  } catch (const std::exception& e) {
    std::cerr << "tpullm-bench-interp: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
