// libFuzzer target: arbitrary bytes as config.json text. Must parse or throw tpullm::Error.
#include "tpullm/frontend/hf_config.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const tpullm::frontend::HfConfig c = tpullm::frontend::parse_hf_config(text, "fuzz.json");
    // Invariants promised by HfConfig.
    if (c.hidden_size <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0 ||
        c.num_attention_heads % c.num_key_value_heads != 0 || c.head_dim % 2 != 0 ||
        !(c.rope.theta > 0))
      __builtin_trap();
  } catch (const tpullm::Error&) {
  }
  return 0;
}
