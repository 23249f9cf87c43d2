#pragma once
/// The project version, kept equal to `project(tpullm VERSION ...)` in the top-level
/// CMakeLists.txt (a CTest test checks `tpullm-opt --version` against PROJECT_VERSION).

#include <string_view>

namespace tpullm {

/// Major version (incompatible API changes).
inline constexpr int kVersionMajor = 0;
/// Minor version (additions).
inline constexpr int kVersionMinor = 1;
/// Patch version (fixes).
inline constexpr int kVersionPatch = 0;
/// "major.minor.patch".
inline constexpr std::string_view kVersionString = "0.1.0";

} // namespace tpullm
