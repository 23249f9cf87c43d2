// Pipeline parallelism between MPI processes (run under mpirun -np N): for each checkpoint
// folder given, every rank compiles it in memory the same way (1 core, f32), ranks 1..N-1 serve
// their layers, and rank 0 drives a Session over the pipeline beside a single-process Session
// over its own executor. Their logits must be identical bit for bit through prefill, prefill_kv
// (two prompt segments, one through a shorter prefill variant), decode, verify (through the
// batched lm_head), truncation and greedy generation. A model with fewer layers than ranks is
// reported as skipped. A folder given as DIR@window=N runs with a sliding window of N keys,
// its caches rings on every rank, and also generates past the ring. Exit status 1 on rank 0
// when anything differs.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi_model_arg.hpp"
#include "pipeline_test_params.hpp"

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/mpi/mpi_link.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/layer_pipeline.hpp"
#include "tpullm/runtime/session.hpp"

using namespace tpullm;

using tpullm_test::test_ids;

int main(int argc, char** argv) {
  int failures = 0;
  {
    mpi::MpiSession mpi;
    mpi::MpiLink link(mpi);
    const int rank = mpi.rank(), ranks = mpi.ranks();
    const auto p = tpullm_test::pipeline_test_params();
    for (int a = 1; a < argc; ++a) {
      const auto model = tpullm_test::load_model_arg(argv[a]);
      const auto& desc = model.desc;
      const auto& name = model.name;
      const std::int64_t window = model.window;
      compiler::CompileOptions o;
      o.target.cores = 1;
      const auto cm = compiler::compile(frontend::build_top_modules(desc, p), o);
      const auto dims = runtime::session_dims(bundle::make_model_info(desc, p, "f32"));
      if (dims.layers < ranks) {
        if (rank == 0)
          std::printf("skipped: %s has %lld layers, fewer than %d ranks\n", name.c_str(),
                      static_cast<long long>(dims.layers), ranks);
        continue;
      }
      const std::vector<std::int64_t> unknown(static_cast<std::size_t>(dims.layers), 0);
      const auto ranges = runtime::split_layers(unknown, ranks);
      auto exec = runtime::make_executor(cm, 1);
      if (window > 0 && !exec->kv_rings().any()) {
        ++failures;
        std::printf("FAIL: %s has no ring cache\n", name.c_str());
      }
      runtime::CompiledStages stages(*exec);
      if (rank != 0) {
        (void)runtime::serve_pipeline_rank(link, stages, ranges[static_cast<std::size_t>(rank)],
                                           dims.hidden, p);
        continue;
      }
      auto single_exec = runtime::make_executor(cm, 1);
      runtime::CompiledStages single_stages(*single_exec);
      runtime::Session one(single_stages, dims, p), many(stages, dims, p);
      runtime::LayerPipeline pipe(link, ranges, dims.hidden, runtime::pipeline_max_rows(p));
      many.set_remote_layers(&pipe);
      double worst = 0;
      int differ = 0;
      auto same = [&](const char* what, const std::vector<float>& x, const std::vector<float>& y) {
        const double e = tpullm_test::max_rel_diff(x, y);
        worst = std::max(worst, e);
        if (x != y) {
          ++differ;
          std::printf("FAIL: %s %s on %d ranks: logits differ (max rel %.3g)\n", name.c_str(), what,
                      ranks, e);
        }
      };
      const auto prompt = test_ids(21, 1, dims.vocab);
      same("prefill + prefill_kv", many.prefill(prompt, true), one.prefill(prompt, true));
      for (std::int32_t t : {7, 9, 11})
        same("decode", many.decode(t), one.decode(t));
      const std::vector<std::int32_t> draft{4, 5, 6};
      same("verify", many.verify(draft), one.verify(draft));
      many.truncate(22);
      one.truncate(22);
      same("decode after truncate", many.decode(13), one.decode(13));
      many.reset();
      one.reset();
      runtime::GenerateOptions g;
      g.stop.max_new_tokens = 16;
      const auto x = many.generate(test_ids(5, 2, dims.vocab), g);
      const auto y = one.generate(test_ids(5, 2, dims.vocab), g);
      if (x.tokens != y.tokens || x.tokens.size() != 16) {
        ++differ;
        std::printf("FAIL: %s greedy tokens differ on %d ranks\n", name.c_str(), ranks);
      }
      if (window > 0) { // far enough past the ring (32 positions) for every row to be reused
        many.reset();
        one.reset();
        g.stop.max_new_tokens = 48;
        const auto xw = many.generate(test_ids(9, 3, dims.vocab), g);
        const auto yw = one.generate(test_ids(9, 3, dims.vocab), g);
        if (xw.tokens != yw.tokens || xw.tokens.size() != 48) {
          ++differ;
          std::printf("FAIL: %s greedy tokens past the ring differ on %d ranks\n", name.c_str(),
                      ranks);
        }
      }
      failures += differ;
      std::string split;
      for (const auto& r : ranges)
        split += " [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
      std::printf("%s: %s on %d ranks (layers%s): %lld round trips, max rel difference %.3g\n",
                  differ ? "FAIL" : "ok", name.c_str(), ranks, split.c_str(),
                  static_cast<long long>(pipe.stats().round_trips), worst);
    }
  }
  return failures ? 1 : 0;
}
