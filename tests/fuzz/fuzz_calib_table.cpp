// libFuzzer target: arbitrary bytes as an int8 calibration table (calib.json). Must parse or
// throw tpullm::Error; a parsed table keeps the invariants the lowering relies on, and its
// formatted text parses back to the same text.
#include "tpullm/conversion/calib_table.hpp"
#include "tpullm/conversion/int8_calib.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tpullm/support/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tpullm::conversion;
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const CalibTable t = parse_calib_table(text, "fuzz.json");
    for (const auto& e : t.inputs) {
      if (e.name.empty() || !(e.min <= e.max) || !(e.threshold >= 0) ||
          !(e.threshold <= e.absmax) || e.channel_absmax.empty())
        __builtin_trap();
      for (float c : e.channel_absmax)
        if (!(c >= 0 && c <= e.absmax))
          __builtin_trap();
      // Static parameters exist for every non-zero entry, or are refused with an Error.
      for (bool asym : {false, true})
        try {
          const StaticActParams p = static_act_params(e, asym);
          if (!(p.scale > 0) || !std::isfinite(p.scale) || p.zero < -128 || p.zero > 127)
            __builtin_trap();
        } catch (const tpullm::Error&) {
        }
    }
    const std::string again = format_calib_table(t);
    if (format_calib_table(parse_calib_table(again, "again")) != again)
      __builtin_trap();
  } catch (const tpullm::Error&) {
  }
  return 0;
}
