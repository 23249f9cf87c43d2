// Tensor parallelism between MPI processes (run under mpirun -np N): for each checkpoint folder
// given, every rank compiles its tensor-parallel bundle in memory the same way (1 core, f32,
// frontend/tensor_parallel.hpp), ranks 1..N-1 serve their halves, and rank 0 drives a Session
// over them through transformers' golden scenarios (a: prefill + decode, b: a second turn
// through prefill_kv, c: a 300-token prompt in segments), each logits tensor within
// 1e-4 x max|golden|, and then greedy generation and a verify segment against a single-process
// Session over the ordinary bundle (within 1e-4 x max|logit|, the same tokens). A folder given
// as DIR@window=N runs with a sliding window of N keys (its caches rings on every rank) and is
// compared with the single process only (the goldens are full attention's). A model that cannot
// be split over N ranks is reported as skipped with the reason. Exit status 1 on rank 0 when
// anything is out of bounds.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi_model_arg.hpp"
#include "pipeline_test_params.hpp"

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/goldens.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/frontend/tensor_parallel.hpp"
#include "tpullm/mpi/mpi_link.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/session.hpp"
#include "tpullm/runtime/tensor_parallel.hpp"
#include "tpullm/verify/golden_check.hpp"

using namespace tpullm;

using tpullm_test::test_ids;

int main(int argc, char** argv) {
  int failures = 0;
  {
    mpi::MpiSession mpi;
    mpi::MpiLink link(mpi);
    const int rank = mpi.rank(), ranks = mpi.ranks();
    // Room for scenario c's 300-token prompt in segments of 64, its decode, and a verify
    // segment of 4 rows through the batched lm_head.
    frontend::StageParams p;
    p.seq_length = 512;
    p.max_input_length = 64;
    p.decode_chunks = {128};
    p.prefill_chunks = {8};
    p.decode_batches = {4};
    for (int a = 1; a < argc; ++a) {
      const auto model = tpullm_test::load_model_arg(argv[a]);
      const auto& desc = model.desc;
      const auto& dir = model.dir;
      const auto& name = model.name;
      const std::int64_t window = model.window;
      if (const auto why = frontend::tensor_parallel_refusal(desc, ranks); !why.empty()) {
        if (rank == 0)
          std::printf("skipped: %s on %d ranks: %s\n", name.c_str(), ranks, why.c_str());
        continue;
      }
      compiler::CompileOptions o;
      o.target.cores = 1;
      const auto cm = compiler::compile(frontend::build_tensor_parallel_modules(desc, p, ranks), o);
      const auto dims = runtime::session_dims(bundle::make_model_info(desc, p, "f32"));
      auto exec = runtime::make_executor(cm, 1);
      runtime::CompiledStages stages(*exec);
      if (rank != 0) {
        (void)runtime::serve_tensor_rank(link, stages, dims, p);
        continue;
      }
      runtime::TensorParallelLayers tp(link, stages, dims, p);
      runtime::Session many(stages, dims, p);
      many.set_remote_layers(&tp);
      int bad = 0;
      double worst_golden = 0;
      if (window == 0) {
        const auto g = frontend::load_goldens(dir);
        for (const auto& [sname, sc] :
             {std::pair<const char*, const frontend::GoldenScenario*>{"a", &g.a},
              {"b", &g.b},
              {"c", &g.c}}) {
          if (std::string(sname) == "c")
            many.reset();
          const auto r = verify::detail::run_scenario(many, sname, *sc, 1e-4f);
          worst_golden = std::max(worst_golden, double(r.max_rel_err));
          if (!r.ok) {
            ++bad;
            std::printf("FAIL: %s scenario %s on %d ranks: %.3g x max|golden| (bound 1e-4)\n",
                        name.c_str(), sname, ranks, double(r.max_rel_err));
          }
        }
      }
      // Against one process over the ordinary bundle: a verify segment and greedy tokens.
      const auto cm_one = compiler::compile(frontend::build_top_modules(desc, p), o);
      auto one_exec = runtime::make_executor(cm_one, 1);
      runtime::CompiledStages one_stages(*one_exec);
      runtime::Session one(one_stages, dims, p);
      many.reset();
      const auto prompt = test_ids(70, 1, dims.vocab); // a segment of 64 and one of 6
      double worst =
          tpullm_test::max_rel_diff(many.prefill(prompt, true), one.prefill(prompt, true));
      const std::vector<std::int32_t> draft{4, 5, 6};
      worst = std::max(worst, tpullm_test::max_rel_diff(many.verify(draft), one.verify(draft)));
      many.reset();
      one.reset();
      runtime::GenerateOptions gen;
      gen.stop.max_new_tokens = window > 0 ? 48 : 16; // past the ring with a window
      const auto x = many.generate(test_ids(9, 2, dims.vocab), gen);
      const auto y = one.generate(test_ids(9, 2, dims.vocab), gen);
      if (worst > 1e-4) {
        ++bad;
        std::printf("FAIL: %s on %d ranks: logits %.3g x max|logit| from one process\n",
                    name.c_str(), ranks, worst);
      }
      if (x.tokens != y.tokens) {
        ++bad;
        std::printf("FAIL: %s greedy tokens differ from one process's on %d ranks\n", name.c_str(),
                    ranks);
      }
      const auto& st = tp.stats();
      std::printf("%s: %s on %d ranks: goldens within %.3g x max|golden|, one process within "
                  "%.3g; %lld calls, %lld all-reduces of %.0f bytes each, %.1f us each\n",
                  bad ? "FAIL" : "ok", name.c_str(), ranks, worst_golden, worst,
                  static_cast<long long>(st.calls), static_cast<long long>(st.all_reduces),
                  st.all_reduces ? double(st.reduced_bytes) / double(st.all_reduces) : 0.0,
                  st.all_reduces ? st.reduce_seconds * 1e6 / double(st.all_reduces) : 0.0);
      failures += bad;
    }
  }
  return failures ? 1 : 0;
}
