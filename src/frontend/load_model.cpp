// load_model: a checkpoint folder or a GGUF file (frontend/model_desc.hpp).
#include "tpullm/frontend/gguf_model.hpp"
#include "tpullm/frontend/model_desc.hpp"

#include <array>
#include <fstream>

namespace tpullm::frontend {

namespace {
/// True when `p` is a regular file whose first four bytes are "GGUF".
bool has_gguf_magic(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec))
    return false;
  std::ifstream in(p, std::ios::binary);
  std::array<char, 4> m{};
  return in.read(m.data(), 4) && m == std::array<char, 4>{'G', 'G', 'U', 'F'};
}
} // namespace

std::optional<std::filesystem::path> gguf_source(const std::filesystem::path& path) {
  std::error_code ec;
  const std::string expected =
      "expected a checkpoint folder (config.json + *.safetensors), a GGUF file, or a folder "
      "holding one .gguf file";
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path / "config.json", ec))
      return std::nullopt;
    std::vector<std::filesystem::path> ggufs;
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
      if (e.path().extension() == ".gguf" && has_gguf_magic(e.path()))
        ggufs.push_back(e.path());
    check(ggufs.size() == 1, ErrorKind::invalid_input, path.string(),
          ggufs.empty() ? "has no config.json and no GGUF file: " + expected
                        : "has no config.json and " + std::to_string(ggufs.size()) +
                              " GGUF files; name one of them");
    return ggufs.front();
  }
  check(std::filesystem::exists(path, ec), ErrorKind::io, path.string(), "no such file or folder");
  check(has_gguf_magic(path), ErrorKind::invalid_input, path.string(),
        "is not a GGUF file (no 'GGUF' magic) nor a folder: ", expected);
  return path;
}

ModelDesc load_model(const std::filesystem::path& path, const LoadOptions& opts) {
  if (const auto gguf = gguf_source(path))
    return load_gguf_model(*gguf, opts);
  const HfConfig cfg = load_hf_config(path / "config.json");
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::open(path, opts.access));
  return describe_model(cfg, std::move(ckpt), opts);
}

} // namespace tpullm::frontend
