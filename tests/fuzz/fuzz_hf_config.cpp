// libFuzzer target: arbitrary bytes as config.json text. Must parse or throw tpullm::Error;
// a parsed quantization_config must resolve modules to valid widths and groups.
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
    // Every per-module decision a parsed quantization_config makes is a kernel width and a
    // group that is -1 or positive (rules with regexes are matched here too).
    for (const char* m :
         {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj", "lm_head"})
      if (const auto q = tpullm::frontend::linear_quant(c.quant, m))
        if ((q->bits != 4 && q->bits != 8) || (q->group_size != -1 && q->group_size <= 0) ||
            (q->zero_offset != 0 && q->zero_offset != 1))
          __builtin_trap();
  } catch (const tpullm::Error&) {
  }
  return 0;
}
