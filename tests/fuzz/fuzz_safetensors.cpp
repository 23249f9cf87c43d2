// libFuzzer target: arbitrary bytes as a .safetensors image. Any input must either parse into
// in-bounds views or throw tpullm::Error; anything else (crash, sanitizer report, other
// exception) is a bug.
#include "tpullm/frontend/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tpullm::frontend;
  try {
    const auto bytes = std::as_bytes(std::span<const std::uint8_t>(data, size));
    const SafetensorsFile f = SafetensorsFile::parse(bytes, nullptr, "fuzz.safetensors");
    std::uint64_t total = 0;
    for (const auto& [name, v] : f.tensors()) {
      // Touch every byte (ASan catches an out-of-range view) and exercise the accessors.
      for (std::byte b : v.bytes)
        total += static_cast<std::uint8_t>(b);
      if (is_float(v.dtype))
        total += v.to_f32().size();
      else
        total += v.to_i64().size();
      if (v.is_aligned() && v.dtype == DType::f32)
        total += v.data<float>().size();
      (void)f.at(name);
    }
    (void)f.find("missing");
    (void)total;
  } catch (const tpullm::Error&) {
  }
  return 0;
}
