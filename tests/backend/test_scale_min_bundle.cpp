// Scale-and-min weights (int4_min / int8_min: w = u * scale - min) end to end through the Tpu
// weight parts ("mins"), the executor and the bundle: a w4a16 / w8a16 compile of a shared
// checkpoint (lm_head quantized too, groups of 16 and 32) has its zero-point weights rewritten as
// scale-and-min weights with the same codes and scales and min = zero * scale (the same function up
// to one f32 rounding per min), then
//  - a bundle written from it opens (its types say `min`, its weights carry the mins part) and
//    runs to logits bit-identical with the in-memory model, and
//  - those logits agree with the zero-point model's within 3e-5 x max|logit| (measured on
//    AVX-512: 0.8e-6, 1.5e-6 and 4.3e-6 x max|logit| for the three cases; f32 KV cache, since
//    an f16 cache rounds a few keys of the two runs apart and the gap grows to 5e-5).
// The checkpoints cover a tied lm_head (its packed embedding gather), GQA attention and MoE
// experts, so every op that reads a packed weight sees the new formats.
#include "small_compile.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/conversion/weight_convert.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/runtime/bundle_session.hpp"

using namespace tpullm;
namespace fs = std::filesystem;

namespace {

frontend::StageParams min_params() {
  return tpullm_test::small_params(64, 16, {32});
}

struct MinCompiled {
  frontend::ModelDesc desc;
  codegen::CompiledModel model;
  bundle::ModelInfo info;
};

MinCompiled compile_min_case(const std::string& name, const std::string& mode,
                             const std::string& lm_head, std::int64_t group) {
  MinCompiled c{frontend::load_model(tpullm_test::model_dir(name)), {}, {}};
  compiler::CompileOptions o;
  o.lower.mode = mode;
  o.lower.lm_head = lm_head;
  o.lower.group_size = group;
  o.lower.kv_dtype = "f32"; // an f16 cache would round the two runs' keys apart
  o.target.cores = 2;
  c.model = compiler::compile(frontend::build_top_modules(c.desc, min_params()), o);
  c.info = bundle::make_model_info(c.desc, min_params(), mode);
  return c;
}

/// `w` (int4_asym / int8_asym) as int4_min / int8_min: same codes and scales, min = zero * scale.
ir::Weight as_scale_min(const ir::Weight& w) {
  const kernels::PackedWeights v = conversion::packed_view(w);
  const auto f = v.format == kernels::WeightFormat::int4_asym ? kernels::WeightFormat::int4_min
                                                              : kernels::WeightFormat::int8_min;
  kernels::PackedWeights m = kernels::detail::make_packed(f, v.K, v.N, v.group_size);
  std::memcpy(m.data.data(), v.data.data(), v.data.size());
  for (std::size_t i = 0; i < v.scales.size(); ++i) {
    m.scales[i] = v.scales[i];
    m.mins[i] = static_cast<float>(v.zeros[i]) * v.scales[i];
  }
  m.k_perm = v.k_perm;
  return conversion::make_packed_weight(w.name, std::move(m), !v.k_perm.empty());
}

/// Rewrites every zero-point weight of `c` (modules and the programs' weight operands); returns
/// how many distinct weights changed.
std::size_t rewrite_as_scale_min(MinCompiled& c) {
  std::map<std::string, ir::Weight> done;
  for (auto& mod : c.model.modules) {
    std::vector<std::string> names;
    for (const auto& [name, w] : mod.weights())
      if (w.type.layout == ir::Layout::panels && w.type.quant && w.type.quant->zero_point)
        names.push_back(name);
    for (const auto& name : names) {
      auto it = done.find(name);
      if (it == done.end())
        it = done.emplace(name, as_scale_min(mod.weight(name))).first;
      ir::Weight copy = it->second;
      mod.erase_weight(name);
      mod.add_weight(std::move(copy));
    }
  }
  for (auto& p : c.model.programs)
    for (auto& in : p.instrs)
      for (auto& r : in.operands)
        if (r.buffer.region == ir::Region::weight)
          if (auto it = done.find(r.weight); it != done.end())
            r.type = it->second.type;
  return done.size();
}

/// Logits of a short conversation (prefill, two decode steps, a second prefill).
std::vector<float> min_conversation(runtime::Session& s) {
  s.reset();
  std::vector<float> out = s.prefill({1, 5, 9, 2, 7, 3, 8, 4, 6, 10, 11}, true);
  for (std::int32_t t : {3, 1}) {
    auto l = s.decode(t);
    out.insert(out.end(), l.begin(), l.end());
  }
  auto l = s.prefill({9, 8, 7}, true);
  out.insert(out.end(), l.begin(), l.end());
  return out;
}

std::vector<float> run_in_memory(const MinCompiled& c) {
  auto exec = runtime::make_executor(c.model);
  runtime::CompiledStages stages(*exec);
  runtime::Session s(stages, runtime::session_dims(c.info), min_params());
  return min_conversation(s);
}

} // namespace

TEST_CASE("scale-and-min weights run through the executor and a bundle", "[bundle][scale_min]") {
  struct Case {
    const char* model;
    const char* mode;
    const char* lm_head;
    std::int64_t group;
    const char* type; // the packed type the rewritten weights must have
  };
  const Case cases[] = {
      {"qwen2-tied-bias", "w4a16", "w4", 32, "xu4, panels, quant<packed, group = 32"},
      {"mixtral-e8k2", "w4a16", "w4", 16, "xu4, panels, quant<packed, group = 16"},
      {"llama-gqa", "w8a16", "w8", 16, "xu8, panels, quant<packed, group = 16"}};
  for (const Case& cs : cases) {
    INFO(cs.model << " " << cs.mode << " group " << cs.group);
    MinCompiled c = compile_min_case(cs.model, cs.mode, cs.lm_head, cs.group);
    const std::vector<float> ref = run_in_memory(c);
    REQUIRE(rewrite_as_scale_min(c) > 0);
    const std::vector<float> mem = run_in_memory(c);

    std::ostringstream os;
    bundle::write_bundle(c.model, c.info, os);
    const fs::path path = fs::temp_directory_path() /
                          ("tpullm-test-" + std::to_string(::getpid()) + "-scale-min.bundle");
    std::ofstream(path, std::ios::binary)
        .write(os.str().data(), static_cast<std::streamsize>(os.str().size()));
    std::vector<float> from_bundle;
    {
      const auto b = bundle::Bundle::open(path);
      std::size_t with_mins = 0;
      for (const auto& w : b->weights())
        if (w.find_part("mins") != nullptr) {
          ++with_mins;
          CHECK(w.type.str().find(cs.type) != std::string::npos);
          CHECK(w.type.str().find(", min>>") != std::string::npos);
          CHECK(w.find_part("zeros") == nullptr);
        }
      CHECK(with_mins > 0);
      runtime::BundleSession engine(path);
      from_bundle = min_conversation(engine.session());
    }
    std::error_code ec;
    fs::remove(path, ec);

    REQUIRE(mem.size() == ref.size());
    REQUIRE(from_bundle.size() == mem.size());
    CHECK(std::memcmp(mem.data(), from_bundle.data(), mem.size() * sizeof(float)) == 0);
    double mx = 0, worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      mx = std::max(mx, std::abs(double(ref[i])));
      worst = std::max(worst, std::abs(double(mem[i]) - double(ref[i])));
    }
    INFO("max |logit| " << mx << ", max |scale-min - zero-point| " << worst);
    CHECK(std::isfinite(worst));
    CHECK(worst <= 3e-5 * mx);
  }
}
