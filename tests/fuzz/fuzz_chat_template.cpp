// libFuzzer target: arbitrary bytes as a chat template. Parsing must succeed or throw
// tpullm::Error; a parsed template is rendered over a small fixed conversation, which must also
// succeed or throw tpullm::Error (never crash, hang or exhaust memory).
#include "tpullm/support/error.hpp"
#include "tpullm/text/chat_template.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "<think>\nok\n</think>\n\nHello",
                  "tool_calls": [{"type": "function",
                                  "function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "tool", "content": "42"}, {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false})");
  try {
    const tpullm::text::ChatTemplate t =
        tpullm::text::ChatTemplate::parse(std::string(reinterpret_cast<const char*>(data), size));
    (void)t.render(context);
  } catch (const tpullm::Error&) {
  }
  return 0;
}
