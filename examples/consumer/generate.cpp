// Compile a HuggingFace checkpoint into a bundle and generate from it, with the installed
// library only: the C++ API behind `tpullm compile` and `tpullm run`.
//   generate MODEL_DIR BUNDLE [token ids...]
// Prints each generated id as it is chosen, then the stop reason and the speeds.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <tpullm/bundle/bundle.hpp>
#include <tpullm/compiler/compiler.hpp>
#include <tpullm/frontend/stage_builder.hpp>
#include <tpullm/runtime/bundle_session.hpp>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: generate MODEL_DIR BUNDLE [token ids...]\n";
    return 2;
  }
  try {
    // 1. Compile: checkpoint -> Top stage modules -> Tpu programs -> one bundle file.
    const auto desc = tpullm::frontend::load_model(argv[1]);
    tpullm::frontend::StageParams params;
    params.seq_length = 256;
    params.max_input_length = 32;
    params.decode_chunks = {128, 64};
    tpullm::compiler::CompileOptions options; // f32 weights, this machine as the target
    const auto model =
        tpullm::compiler::compile(tpullm::frontend::build_top_modules(desc, params), options);
    {
      std::ofstream out(argv[2], std::ios::binary);
      tpullm::bundle::write_bundle(model, tpullm::bundle::make_model_info(desc, params, "f32"),
                                   out);
    }
    // 2. Run: map the bundle, prefill the prompt, decode greedily, streaming the tokens.
    tpullm::runtime::BundleSession engine(argv[2]);
    std::vector<std::int32_t> prompt;
    for (int i = 3; i < argc; ++i)
      prompt.push_back(static_cast<std::int32_t>(std::atoi(argv[i])));
    if (prompt.empty())
      prompt = {1, 2, 3, 4};
    tpullm::runtime::GenerateOptions g;
    g.stop.max_new_tokens = 16;
    std::cout << "generated:";
    const auto r = engine.session().generate(
        prompt, g, [](std::int32_t t) { std::cout << " " << t << std::flush; });
    std::cout << "\nstopped: " << tpullm::runtime::to_string(r.reason) << " after "
              << r.tokens.size() << " tokens; time to first token " << r.prefill_seconds * 1e3
              << " ms\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "generate: " << e.what() << "\n";
    return 2;
  }
}
