// libFuzzer target: arbitrary bytes as tokenizer.json text. It must load or throw tpullm::Error;
// a loaded tokenizer must encode text (the input itself, and a fixed mixed-script string) into
// ids inside its vocabulary, and decode and stream-decode them without failing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tpullm/support/error.hpp"
#include "tpullm/text/stream_decoder.hpp"
#include "tpullm/text/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto tok = tpullm::text::Tokenizer::from_json(text);
    const std::string_view samples[] = {
        text.substr(0, 512), "Hello  world 123 \xE4\xBD\xA0\xE5\xA5\xBD <|sep|>\r\n\xFF"};
    for (const auto s : samples)
      for (const bool special : {false, true}) {
        const auto ids = tok.encode(s, special);
        for (const auto id : ids)
          if (id < 0 || id >= tok.vocab_size())
            __builtin_trap();
        (void)tok.decode(ids, false);
        (void)tok.decode(ids, true);
        (void)tok.pieces(ids);
        tpullm::text::StreamDecoder sd(tok);
        for (const auto id : ids)
          (void)sd.push(id);
        (void)sd.finish();
      }
  } catch (const tpullm::Error&) {
  }
  return 0;
}
