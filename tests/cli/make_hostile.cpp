// Builds the corpus of hostile inputs the CLI reliability tests run the tools on:
//   tpullm-make-hostile OUT_DIR MODELS_DIR
// OUT_DIR is recreated: FIFOs in place of files, goldens with non-finite logits, a GPTQ
// checkpoint with BF16 scales, a config allowing 2^31 positions, broken target files,
// overflowing and rank-0 .tir modules (Top and Tpu), a 50000-rank module, a 20000-part
// --split-input-file input, files that must not change (precious.tir, victim.txt) and earlier
// output directories of import and make-model with stale files and planted links, and a
// mixture of experts whose router weights are NaN.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "hostile.hpp"

namespace fs = std::filesystem;
using fe_test::write_file;

namespace {

const char* kValid = R"(module @m {
  func @f(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>) {
    %0 = "top.SiLU"(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    "builtin.Return"(%0) : (tensor<2x4xf32>) -> ()
  }
}
)";

void fifo(const fs::path& p) {
  if (::mkfifo(p.c_str(), 0644) != 0)
    throw std::runtime_error("mkfifo " + p.string() + " failed");
}

void make(const fs::path& out, const fs::path& models) {
  fs::remove_all(out);
  fs::create_directories(out);
  const fs::path llama = models / "llama-gqa", gptq = models / "llama-gqa-gptq-g32";

  // Special files where regular files are expected.
  fifo(out / "fifo");
  // opened for writing only: a test that opens "fifo" to read it, in parallel, would be the
  // reader that lets a writer's open succeed
  fifo(out / "fifo-output");
  fs::create_directories(out / "model-fifo-weights");
  fs::copy_file(llama / "config.json", out / "model-fifo-weights" / "config.json");
  fifo(out / "model-fifo-weights" / "model.safetensors");
  fs::create_directories(out / "model-fifo-config");
  fifo(out / "model-fifo-config" / "config.json");
  fs::create_symlink(fs::absolute(llama / "model.safetensors"),
                     out / "model-fifo-config" / "model.safetensors");

  // Unusable data that looks valid.
  hostile::write_goldens_with(llama, out / "goldens-inf.safetensors", INFINITY);
  hostile::write_goldens_with(llama, out / "goldens-nan.safetensors", NAN);
  hostile::write_bf16_scales_model(gptq, out / "model-gptq-bf16-scales");
  hostile::write_model_with_config(llama, out / "model-huge-positions",
                                   [](auto& c) { c["max_position_embeddings"] = 2147483648LL; });

  // Target files for verify --level tpu --target.
  write_file(out / "target-bad-cores.json", R"({"cores": -1})");
  write_file(out / "target-f32-only.json", R"({"weight_dtypes": ["f32"]})");
  write_file(out / "target-small-local.json", R"({"local_memory": 4096})");
  write_file(out / "target-not-json.json", "{\"cores\": ");

  // IR inputs.
  write_file(out / "valid.tir", kValid);
  write_file(out / "inplace.tir", kValid);
  write_file(out / "bad.tir", "module @m {\n  garbage\n}\n");
  write_file(out / "rank0.tir", R"(module @m {
  func @f(%a: tensor<f32>, %b: tensor<f32>) -> () {
    %0 = "top.MatMul"(%a, %b) {transpose_b = false} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "builtin.Return"() : () -> ()
  }
}
)");
  write_file(out / "rank0-tpu.tir", R"(module @m {
  func @f(%x: tensor<f32>) -> () {
    %0 = "tpu.Softmax"(%x) : (tensor<f32>) -> tensor<f32>
    "builtin.Return"() : () -> ()
  }
}
)");
  write_file(out / "overflow-slice.tir", R"(module @m {
  func @f(%x: tensor<8xf32>) -> () {
    %0 = "top.Slice"(%x) {offsets = [9223372036854775807], sizes = [2]} : (tensor<8xf32>) -> tensor<2xf32>
    "builtin.Return"() : () -> ()
  }
}
)");
  write_file(out / "overflow-elements.tir", R"(module @m {
  func @f(%x: tensor<4294967296x4294967296xf32>) -> () {
    "builtin.Return"() : () -> ()
  }
}
)");
  std::string dims, order, shape;
  const int rank = 50000;
  for (int i = 0; i < rank; ++i) {
    dims += "1x";
    order += (i ? ", " : "") + std::to_string(rank - 1 - i);
    shape += i ? ", 1" : "1";
  }
  const std::string t = "tensor<" + dims + "f32>";
  write_file(out / "wide.tir", "module @m {\n  func @f(%x: " + t + ") -> (" + t + ") {\n" +
                                   "    %0 = \"top.Permute\"(%x) {order = [" + order + "]} : (" +
                                   t + ") -> " + t + "\n    %1 = \"top.Reshape\"(%0) {shape = [" +
                                   shape + "]} : (" + t + ") -> " + t +
                                   "\n    \"builtin.Return\"(%1) : (" + t + ") -> ()\n  }\n}\n");
  std::string many;
  for (int i = 0; i < 20000; ++i)
    many += std::string(i ? "// -----\n" : "") + kValid;
  write_file(out / "split-many.tir", many);

  // Files and directories that must survive every failing run.
  write_file(out / "precious.tir", "precious contents\n");
  fs::create_symlink("precious.tir", out / "link-to-precious.tir");
  fs::create_directories(out / "adir");
  fs::create_directory_symlink("adir", out / "link-to-adir");
  fs::create_directories(out / "quiet");
  write_file(out / "quiet" / "out.tir", "an earlier output\n");
  write_file(out / "victim.txt", "victim contents\n");
  fs::create_directories(out / "foreign");
  write_file(out / "foreign" / "notes.txt", "not an import output\n");
  for (const char* d : {"earlier-import", "kept-import"}) {
    fs::create_directories(out / d);
    write_file(out / d / ".tpullm-import", "marker\n");
    write_file(out / d / "stale.tir", "from an earlier import with other settings\n");
  }
  fs::create_symlink(fs::absolute(out / "victim.txt"), out / "earlier-import" / "block_0.tir");
  fs::create_directories(out / "earlier-model");
  write_file(out / "earlier-model" / ".tpullm-make-model", "marker\n");
  write_file(out / "earlier-model" / "stale.txt", "from an earlier make-model\n");
  fs::create_symlink(fs::absolute(out / "victim.txt"), out / "earlier-model" / "model.safetensors");
  // An earlier make-model output holding only make-model's own names (one a planted link).
  fs::create_directories(out / "earlier-model-clean");
  write_file(out / "earlier-model-clean" / ".tpullm-make-model", "marker\n");
  write_file(out / "earlier-model-clean" / "config.json", "{}\n");
  fs::create_symlink(fs::absolute(out / "victim.txt"),
                     out / "earlier-model-clean" / "model.safetensors");
  // A model whose config.json names an eos id outside its vocabulary (compile must refuse it).
  hostile::write_model_with_config(models / "llama-gqa", out / "model-eos-outside",
                                   [](auto& c) { c["eos_token_id"] = 999999; });
  fs::create_directories(out / "tmpdir");
  write_file(out / "tmpdir" / "precious.bundle", "not ours\n");
  // A mixture of experts whose layer-1 router weights are NaN: the run fails on the model's
  // values, which must be reported as the model's, at that layer.
  const fs::path mixtral = models / "mixtral-e8k2", nan_router = out / "model-moe-nan-router";
  fs::create_directories(nan_router);
  fs::copy_file(mixtral / "config.json", nan_router / "config.json");
  fs::copy_file(mixtral / "goldens.safetensors", nan_router / "goldens.safetensors");
  hostile::rewrite_safetensors(
      mixtral / "model.safetensors", nan_router / "model.safetensors", [](auto& e) {
        auto& g = e.at("model.layers.1.block_sparse_moe.gate.weight");
        if (g.dtype != "F32")
          throw std::runtime_error("mixtral-e8k2's router is " + g.dtype + ", not F32");
        const float nan = NAN;
        for (std::size_t i = 0; i + sizeof nan <= g.bytes.size(); i += sizeof nan)
          std::memcpy(g.bytes.data() + i, &nan, sizeof nan);
      });
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tpullm-make-hostile OUT_DIR MODELS_DIR\n");
    return 2;
  }
  try {
    make(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpullm-make-hostile: %s\n", e.what());
    return 1;
  }
  std::printf("hostile corpus in %s\n", argv[1]);
  return 0;
}
