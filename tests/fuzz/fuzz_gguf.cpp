// libFuzzer target: arbitrary bytes as a GGUF image. Any input must either parse into in-bounds
// views or throw tpullm::Error; anything else (crash, sanitizer report, other exception, a
// timeout or an allocation past the RSS limit) is a bug.
#include "tpullm/frontend/gguf.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tpullm::frontend;
  try {
    const auto bytes = std::as_bytes(std::span<const std::uint8_t>(data, size));
    const GgufFile f = GgufFile::parse(bytes, nullptr, "fuzz.gguf");
    std::uint64_t total = f.version() + f.alignment();
    for (const GgufTensor& t : f.tensors()) {
      // Touch every byte (ASan catches an out-of-range view) and exercise the accessors.
      for (std::byte b : t.bytes)
        total += static_cast<std::uint8_t>(b);
      total += static_cast<std::uint64_t>(t.numel() + t.rows()) + t.where().size();
      (void)f.find_tensor(t.name);
    }
    // Every typed getter on every key: each returns a value or throws Error.
    // (No structured binding: clang 14's lambdas cannot capture one.)
    for (const auto& kv : f.metadata()) {
      const std::string& key = kv.first;
      total += kv.second.array.size() + kv.second.nested.size();
      const auto attempt = [&](auto&& get) {
        try {
          get();
        } catch (const tpullm::Error&) {
        }
      };
      attempt([&] { total += f.get_string(key).value_or("").size(); });
      attempt([&] { total += static_cast<std::uint64_t>(f.get_int(key).value_or(0)); });
      attempt([&] { total += f.get_float(key).value_or(0.0) > 0 ? 1 : 0; });
      attempt([&] { total += f.get_bool(key).value_or(false) ? 1 : 0; });
      attempt(
          [&] { total += f.get_string_array(key).value_or(std::vector<std::string>{}).size(); });
      attempt([&] { total += f.get_int_array(key).value_or(std::vector<std::int64_t>{}).size(); });
      attempt([&] { total += f.get_float_array(key).value_or(std::vector<double>{}).size(); });
    }
    (void)f.find("missing");
    (void)total;
  } catch (const tpullm::Error&) {
  }
  return 0;
}
