#pragma once
/// Source locations and located diagnostics for the IR: text parsed from `file:line:col`, and
/// ops built in C++ carry a short provenance name instead (e.g. "layer3.q_proj").

#include <cstdint>
#include <stdexcept>
#include <string>

#include "tpullm/support/error.hpp"

namespace tpullm {

/// Where an op or token came from: a text position (line >= 1) or a provenance name.
struct Location {
  std::string file; ///< file path, or provenance name when line == 0
  int line = 0;     ///< 1-based line, 0 when unknown
  int col = 0;      ///< 1-based column, 0 when unknown

  /// "file:line:col", "name", or "<unknown>".
  std::string str() const;
  bool known() const { return line > 0 || !file.empty(); }
};

/// An error attached to a location (invalid input); what() is "location: message".
class DiagnosticError : public Error {
public:
  DiagnosticError(Location loc, const std::string& message)
      : Error(ErrorKind::invalid_input, loc.str(), message, loc.str() + ": " + message),
        loc_(std::move(loc)) {}
  const Location& location() const { return loc_; }

private:
  Location loc_;
};

} // namespace tpullm
