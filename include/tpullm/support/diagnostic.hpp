#pragma once
/// Source locations and located diagnostics for the IR: text parsed from `file:line:col`, and
/// ops built in C++ carry a short provenance name instead (e.g. "layer3.q_proj").

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tpullm {

/// Where an op or token came from: a text position (line >= 1) or a provenance name.
struct Location {
  std::string file; ///< file path, or provenance name when line == 0
  int line = 0;     ///< 1-based line, 0 when unknown
  int col = 0;      ///< 1-based column, 0 when unknown

  /// "file:line:col", "name", or "<unknown>".
  std::string str() const {
    if (line > 0)
      return (file.empty() ? std::string("<input>") : file) + ":" + std::to_string(line) + ":" +
             std::to_string(col);
    return file.empty() ? std::string("<unknown>") : file;
  }
  bool known() const { return line > 0 || !file.empty(); }
};

/// An error attached to a location; what() is "location: message".
class DiagnosticError : public std::runtime_error {
public:
  DiagnosticError(Location loc, const std::string& message)
      : std::runtime_error(loc.str() + ": " + message), loc_(std::move(loc)), message_(message) {}
  const Location& location() const { return loc_; }
  /// The message without the location prefix.
  const std::string& message() const { return message_; }

private:
  Location loc_;
  std::string message_;
};

} // namespace tpullm
