// libFuzzer target: the first byte chooses the grammar text format (even) or a JSON Schema (odd);
// the rest is the text. Must build or throw tpullm::Error; a built grammar's text() must parse
// back, and a Matcher over the input's bytes must keep its promises (a refused byte string
// leaves the state unchanged; a complete state can end).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tpullm/grammar/grammar.hpp"
#include "tpullm/support/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::shared_ptr<const tpullm::grammar::Grammar> g;
  try {
    if (data[0] % 2 == 0) {
      g = tpullm::grammar::parse_grammar(text);
    } else {
      const auto j = nlohmann::json::parse(text, nullptr, false);
      if (j.is_discarded())
        return 0;
      g = tpullm::grammar::grammar_from_json_schema(j);
    }
  } catch (const tpullm::Error&) {
    return 0;
  }
  try {
    tpullm::grammar::parse_grammar(g->text()); // prints back to a grammar
  } catch (const tpullm::Error&) {
    __builtin_trap();
  }
  try {
    tpullm::grammar::Matcher m(g);
    for (std::size_t i = 0; i < text.size(); i += 3) {
      const bool end = m.can_end(), complete = m.is_complete();
      if (complete && !end)
        __builtin_trap();
      if (!m.accept_bytes(text.substr(i, 3)) && (m.can_end() != end || m.is_complete() != complete))
        __builtin_trap();
    }
  } catch (const tpullm::Error& e) {
    if (e.kind() != tpullm::ErrorKind::unsupported) // too many parses at once
      __builtin_trap();
  }
  return 0;
}
