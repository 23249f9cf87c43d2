#pragma once
// Builders of hostile inputs from the test models, shared by the CLI corpus generator
// (make_hostile.cpp) and the Catch tests: goldens with a non-finite logit, a GPTQ checkpoint
// whose scales are BF16, a config with a huge max_position_embeddings.

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "../frontend/frontend_test_util.hpp"
#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/support/float16.hpp"

namespace hostile {

namespace fs = std::filesystem;
using tpullm::frontend::SafetensorsFile;

/// Every tensor of `f` as a writable entry (dtype string, shape, bytes).
inline std::map<std::string, fe_test::Entry> entries_of(const SafetensorsFile& f) {
  std::map<std::string, fe_test::Entry> out;
  for (const auto& [name, v] : f.tensors())
    out[name] =
        fe_test::Entry{std::string(tpullm::frontend::dtype_name(v.dtype)), v.shape,
                       std::string(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size())};
  return out;
}

/// Copies the safetensors file `src` to `dst`, letting `edit` change the entries first.
inline void
rewrite_safetensors(const fs::path& src, const fs::path& dst,
                    const std::function<void(std::map<std::string, fe_test::Entry>&)>& edit) {
  auto entries = entries_of(SafetensorsFile::open(src));
  edit(entries);
  fe_test::write_file(dst, fe_test::make_safetensors(entries));
}

/// goldens.safetensors of `model_dir` with a.prefill_logits[0, 0] set to `value` (inf, NaN).
inline void write_goldens_with(const fs::path& model_dir, const fs::path& dst, float value) {
  rewrite_safetensors(model_dir / "goldens.safetensors", dst, [&](auto& e) {
    std::memcpy(e.at("a.prefill_logits").bytes.data(), &value, sizeof value);
  });
}

/// A copy of the GPTQ/AWQ model in `src_dir` whose F16 scales are stored as BF16 (same values,
/// rounded): a valid-looking checkpoint the dequantizer cannot read.
inline void write_bf16_scales_model(const fs::path& src_dir, const fs::path& dst_dir) {
  fs::create_directories(dst_dir);
  fs::copy_file(src_dir / "config.json", dst_dir / "config.json",
                fs::copy_options::overwrite_existing);
  rewrite_safetensors(src_dir / "model.safetensors", dst_dir / "model.safetensors", [](auto& e) {
    for (auto& [name, entry] : e) {
      if (name.size() < 7 || name.compare(name.size() - 7, 7, ".scales") != 0)
        continue;
      entry.dtype = "BF16";
      for (std::size_t i = 0; i + 1 < entry.bytes.size(); i += 2) {
        std::uint16_t h = 0;
        std::memcpy(&h, entry.bytes.data() + i, 2);
        const std::uint16_t b = tpullm::f32_to_bf16(tpullm::f16_to_f32(h));
        std::memcpy(entry.bytes.data() + i, &b, 2);
      }
    }
  });
}

/// A copy of `src_dir` (config edited by `edit`; the safetensors files linked, not copied).
inline void write_model_with_config(const fs::path& src_dir, const fs::path& dst_dir,
                                    const std::function<void(nlohmann::json&)>& edit) {
  fs::create_directories(dst_dir);
  auto config = nlohmann::json::parse(fe_test::read_file(src_dir / "config.json"));
  edit(config);
  fe_test::write_file(dst_dir / "config.json", config.dump(2));
  for (const char* f : {"model.safetensors", "goldens.safetensors"}) {
    std::error_code ec;
    fs::remove(dst_dir / f, ec);
    fs::create_symlink(fs::absolute(src_dir / f), dst_dir / f);
  }
}

} // namespace hostile
